import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers, settle } from '../../policy/timers.ts';
import { FreshRuns } from './fresh-runs.ts';

/** A run that ends when the test says; each is numbered in start order. */
function harness(spacingMs: number) {
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const started: Array<{ atMs: number; end: (ok?: boolean) => void }> = [];
  const runs = new FreshRuns<number>(
    () =>
      new Promise<number>((resolve, reject) => {
        const n = started.length + 1;
        started.push({
          atMs: clock.monotonicMs(),
          end: (ok = true) => (ok ? resolve(n) : reject(new Error(`run ${n} failed`))),
        });
      }),
    clock,
    timers,
    spacingMs,
  );
  return { clock, timers, started, runs };
}

describe('FreshRuns', () => {
  it('callers during a run share the one next run, begun after that run ends', async () => {
    const { timers, started, runs } = harness(0);
    const first = runs.get();
    await settle();
    const during = Array.from({ length: 50 }, () => runs.get());
    await settle();
    expect(started).toHaveLength(1);
    started[0]!.end();
    expect(await first).toBe(1);
    await timers.advance(0);
    expect(started).toHaveLength(2);
    started[1]!.end();
    expect(await Promise.all(during)).toEqual(Array(50).fill(2));
  });

  it('a caller is never answered by a run that began before it called', async () => {
    const { timers, started, runs } = harness(0);
    const first = runs.get();
    await settle();
    const late = runs.get();
    started[0]!.end();
    await first;
    await timers.advance(0);
    started[1]!.end();
    expect(await late).toBe(2);
    // Idle again: the next caller starts a run at once.
    const again = runs.get();
    await settle();
    expect(started).toHaveLength(3);
    started[2]!.end();
    expect(await again).toBe(3);
  });

  it('runs begin at least the spacing apart; a caller within it waits instead of getting an old result', async () => {
    const { clock, timers, started, runs } = harness(1000);
    const first = runs.get();
    await settle();
    started[0]!.end();
    await first;
    await timers.advance(300);
    const soon = [runs.get(), runs.get()];
    await timers.advance(699);
    expect(started).toHaveLength(1);
    await timers.advance(1);
    expect(started.map((s) => s.atMs)).toEqual([0, 1000]);
    started[1]!.end();
    expect(await Promise.all(soon)).toEqual([2, 2]);
    expect(clock.monotonicMs()).toBe(1000);
  });

  it('a failed run fails its callers only; the next run goes ahead', async () => {
    const { timers, started, runs } = harness(0);
    const first = runs.get();
    await settle();
    const next = runs.get();
    started[0]!.end(false);
    await expect(first).rejects.toThrow('run 1 failed');
    await timers.advance(0);
    started[1]!.end();
    expect(await next).toBe(2);
  });
});
