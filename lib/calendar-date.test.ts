import { describe, expect, it } from 'vitest';
import { isCalendarDay, parseInstant } from './calendar-date.ts';

describe('isCalendarDay', () => {
  it.each(['2024-02-29', '2000-02-29', '2023-02-28', '2024-04-30', '2024-12-31', '0001-01-01', '9999-12-31'])(
    'takes %s',
    (raw) => expect(isCalendarDay(raw)).toBe(true),
  );

  // Date reads the first four as a day in the next month.
  it.each([
    '2024-02-30',
    '2023-02-29',
    '1900-02-29',
    '2024-04-31',
    '2024-13-01',
    '2024-00-10',
    '2024-01-00',
    '2024-01-32',
    '0000-01-01',
    '2024-1-01',
    '2024-01-01T00:00:00Z',
    'today',
  ])('refuses %s', (raw) => expect(isCalendarDay(raw)).toBe(false));
});

describe('parseInstant', () => {
  it.each([
    ['2024-02-29', '2024-02-29T00:00:00.000Z'],
    ['2026-01-31T12:00:00Z', '2026-01-31T12:00:00.000Z'],
    ['2026-01-31T12:00Z', '2026-01-31T12:00:00.000Z'],
    ['2026-01-31T23:59:59.999Z', '2026-01-31T23:59:59.999Z'],
    ['2026-01-31T12:00:00+02:00', '2026-01-31T10:00:00.000Z'],
    ['2026-01-31T12:00:00-0130', '2026-01-31T13:30:00.000Z'],
    ['2026-01-31T12:00:00.123456789+00:00', '2026-01-31T12:00:00.123Z'],
    ['2026-01-31T12:00:00.5Z', '2026-01-31T12:00:00.500Z'],
    ['0050-06-01T00:00Z', '0050-06-01T00:00:00.000Z'],
    ['2026-01-31T12:00:00', '2026-01-31T12:00:00.000Z'],
    ['2026-01-31 12:00', '2026-01-31T12:00:00.000Z'],
  ])('reads %s as %s', (raw, iso) => expect(parseInstant(raw)?.toISOString()).toBe(iso));

  it("reads a time without an offset as UTC, like a day, whatever the process's time zone", () => {
    const zone = process.env.TZ;
    try {
      for (const tz of ['Asia/Kolkata', 'America/Los_Angeles', 'UTC']) {
        process.env.TZ = tz;
        expect(parseInstant('2026-07-01T12:30:00')?.toISOString(), tz).toBe('2026-07-01T12:30:00.000Z');
        expect(parseInstant('2026-07-01')?.toISOString(), tz).toBe('2026-07-01T00:00:00.000Z');
      }
    } finally {
      if (zone === undefined) delete process.env.TZ;
      else process.env.TZ = zone;
    }
  });

  it.each([
    '2024-02-30',
    '2024-02-30T12:00:00Z',
    '2023-02-29T00:00:00Z',
    '2024-04-31T00:00:00+02:00',
    '2024-01-01T24:00:00Z',
    '2024-01-01T23:60:00Z',
    '2024-01-01T23:59:60Z',
    '2024-01-01T12:00:00+24:00',
    '2024-01-01T12:00:00+02:60',
    '2024-01-01T12Z',
    '0000-01-01',
    '2024-01-01Z',
    'yesterday',
    '',
  ])('refuses %s', (raw) => expect(parseInstant(raw)).toBeUndefined());
});
