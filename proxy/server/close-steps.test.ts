import { type Logger, pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { bounded, CloseDeadline } from './close-steps.ts';

function recordingLog(): { log: Logger; warnings: Array<Record<string, unknown>> } {
  const warnings: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'silent' });
  vi.spyOn(log, 'warn').mockImplementation(((fields: Record<string, unknown>) => {
    warnings.push(fields);
  }) as Logger['warn']);
  return { log, warnings };
}

describe('CloseDeadline', () => {
  it('counts down on its clock and stops at 0', () => {
    let now = 1000;
    const deadline = new CloseDeadline(5000, () => now);
    expect(deadline.remainingMs()).toBe(5000);
    now += 4000;
    expect(deadline.remainingMs()).toBe(1000);
    now += 4000;
    expect(deadline.remainingMs()).toBe(0);
  });
});

describe('bounded', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('returns when the step settles, either way, and says nothing', async () => {
    const { log, warnings } = recordingLog();
    await bounded(Promise.resolve(), 5000, 'a step', log);
    await bounded(Promise.reject(new Error('gone')), 5000, 'a step', log);
    await bounded(undefined, 5000, 'a synchronous step', log);
    expect(warnings).toEqual([]);
  });

  it('leaves a step that never settles once its time is up, saying so', async () => {
    const { log, warnings } = recordingLog();
    let returned = false;
    const waiting = bounded(new Promise(() => {}), 5000, 'the lease connection', log).then(() => (returned = true));
    await vi.advanceTimersByTimeAsync(4999);
    expect(returned).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await waiting;
    expect(warnings).toEqual([{ step: 'the lease connection', waitedMs: 5000 }]);
  });

  it('with no time left, still lets a step end that settles at once', async () => {
    const { log, warnings } = recordingLog();
    const waiting = bounded(Promise.resolve(), 0, 'a step', log);
    await vi.advanceTimersByTimeAsync(0);
    await waiting;
    expect(warnings).toEqual([]);
  });
});
