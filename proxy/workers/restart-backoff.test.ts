/**
 * The spacing of a worker index's replacements, on a hand-moved clock: a worker that dies at every
 * start is started again after 1 s, 2 s, 4 s … never more than 30 s apart; one that lived past its
 * spacing is replaced at once; one that lived 60 s ends the streak.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { RESTART_POLICY, RestartBackoff, restartSpacingMs } from './restart-backoff.ts';

/** A worker started now that dies after `livedMs`: the decision on its death. */
function dieAfter(clock: ManualClock, backoff: RestartBackoff, livedMs: number) {
  const startedMs = clock.monotonicMs();
  clock.advance(livedMs);
  const decision = backoff.died(startedMs);
  // Its replacement starts once the delay is over.
  clock.advance(decision.delayMs);
  return decision;
}

describe('the restart backoff of a worker index', () => {
  it('doubles the wait of a worker that dies at once at every start, up to 30 s', () => {
    const clock = new ManualClock();
    const backoff = new RestartBackoff(clock);
    const delays = Array.from({ length: 8 }, () => dieAfter(clock, backoff, 0).delayMs);
    expect(delays).toEqual([1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
  });

  it('keeps the first restart within 1 s, and counts the spacing from the dead worker start', () => {
    const clock = new ManualClock();
    const backoff = new RestartBackoff(clock);
    expect(dieAfter(clock, backoff, 300)).toEqual({ delayMs: 700, streak: 1 });
    // Lived longer than the 2 s spacing: replaced at once, the streak still counted.
    expect(dieAfter(clock, backoff, 5000)).toEqual({ delayMs: 0, streak: 2 });
    expect(dieAfter(clock, backoff, 1000)).toEqual({ delayMs: 3000, streak: 3 });
  });

  it('starts again from 1 s once a worker lived the stable period', () => {
    const clock = new ManualClock();
    const backoff = new RestartBackoff(clock);
    for (let i = 0; i < 10; i++) dieAfter(clock, backoff, 10);
    // Lived more than the 30 s cap: replaced at once, but the streak goes on.
    expect(dieAfter(clock, backoff, RESTART_POLICY.stableMs - 1)).toEqual({ delayMs: 0, streak: 11 });
    expect(dieAfter(clock, backoff, 0)).toEqual({ delayMs: 30_000, streak: 12 });
    expect(dieAfter(clock, backoff, RESTART_POLICY.stableMs)).toEqual({ delayMs: 0, streak: 0 });
    expect(dieAfter(clock, backoff, 0)).toEqual({ delayMs: 1000, streak: 1 });
  });

  it('spaces a streak by the policy it is given', () => {
    const policy = { firstMs: 10, maxMs: 50, stableMs: 100 };
    expect([0, 1, 2, 3, 4, 5].map((n) => restartSpacingMs(n, policy))).toEqual([0, 10, 20, 40, 50, 50]);
    expect(restartSpacingMs(2000, policy)).toBe(50);
  });
});
