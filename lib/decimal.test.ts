import { describe, expect, it } from 'vitest';
import { decimalInteger } from './decimal.ts';

describe('decimalInteger', () => {
  it('reads decimal digits, leading zeros and all, up to MAX_SAFE_INTEGER', () => {
    expect(decimalInteger('0')).toBe(0);
    expect(decimalInteger('00')).toBe(0);
    expect(decimalInteger('010')).toBe(10);
    expect(decimalInteger(`${'0'.repeat(30)}7`)).toBe(7);
    expect(decimalInteger(String(Number.MAX_SAFE_INTEGER))).toBe(Number.MAX_SAFE_INTEGER);
  });

  it('is no number for anything else Number() would read, or past MAX_SAFE_INTEGER', () => {
    for (const text of [
      '',
      ' 1',
      '1 ',
      '\t1',
      '+1',
      '-0',
      '-1',
      '1e3',
      '0x10',
      '0b1',
      '0o7',
      '1.0',
      '1_000',
      '1,000',
      'Infinity',
      'NaN',
      '９',
    ])
      expect(decimalInteger(text), JSON.stringify(text)).toBeUndefined();
    expect(decimalInteger('9007199254740992')).toBeUndefined();
    expect(decimalInteger('99999999999999999999')).toBeUndefined();
  });
});
