/**
 * The coordinating process's check of a serving worker, on hand-moved timers: a worker that answers
 * is never taken for hung, one that stands still is reported once past the bound (not before), and
 * a stopped watch reports nothing.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { HUNG_AFTER_MS, LIVENESS_INTERVAL_MS, watchLiveness } from './liveness.ts';

function watched(answers: () => boolean) {
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  let asks = 0;
  const hung: number[] = [];
  const stop = watchLiveness(
    () => {
      asks++;
      // A worker that stands still never settles its call.
      return answers() ? Promise.resolve() : new Promise<never>(() => {});
    },
    (silentMs) => hung.push(silentMs),
    clock,
    timers,
  );
  return { clock, timers, hung, stop, asks: () => asks };
}

describe('a serving worker watched by its coordinating process', () => {
  it('that answers is never reported hung', async () => {
    const w = watched(() => true);
    await w.timers.advance(10 * HUNG_AFTER_MS);
    expect(w.hung).toEqual([]);
    expect(w.asks()).toBeGreaterThanOrEqual((10 * HUNG_AFTER_MS) / LIVENESS_INTERVAL_MS - 1);
  });

  it('that stands still is reported once, past the bound and not before, with one call in flight', async () => {
    let answering = true;
    const w = watched(() => answering);
    await w.timers.advance(5 * LIVENESS_INTERVAL_MS);
    answering = false;
    // Its last answer came at 5 intervals: silent for the bound at 5 intervals + the bound.
    await w.timers.advance(HUNG_AFTER_MS - 1);
    expect(w.hung).toEqual([]);
    const asksBefore = w.asks();
    await w.timers.advance(LIVENESS_INTERVAL_MS);
    expect(w.hung).toHaveLength(1);
    expect(w.hung[0]).toBeGreaterThanOrEqual(HUNG_AFTER_MS);
    expect(w.hung[0]).toBeLessThanOrEqual(HUNG_AFTER_MS + LIVENESS_INTERVAL_MS);
    expect(w.asks()).toBe(asksBefore);
    await w.timers.advance(10 * HUNG_AFTER_MS);
    expect(w.hung).toHaveLength(1);
    expect(w.timers.size).toBe(0);
  });

  it('whose call fails (its link closed) counts as silent', async () => {
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const hung: number[] = [];
    watchLiveness(
      () => Promise.reject(new Error('closed')),
      (ms) => hung.push(ms),
      clock,
      timers,
    );
    await timers.advance(HUNG_AFTER_MS + LIVENESS_INTERVAL_MS);
    expect(hung).toHaveLength(1);
  });

  it('that answers is not reported hung after the coordinating process itself stood still', async () => {
    const w = watched(() => true);
    await w.timers.advance(3 * LIVENESS_INTERVAL_MS);
    // Stopped for three bounds: no timer ran meanwhile.
    w.clock.advance(3 * HUNG_AFTER_MS);
    await w.timers.advance(3 * LIVENESS_INTERVAL_MS);
    expect(w.hung).toEqual([]);
  });

  it('is no longer watched once stopped', async () => {
    const w = watched(() => false);
    w.stop();
    await w.timers.advance(10 * HUNG_AFTER_MS);
    expect(w.hung).toEqual([]);
    expect(w.timers.size).toBe(0);
  });
});
