import { afterEach, describe, expect, it, vi } from 'vitest';
import { serialTask } from './serial-task.ts';

afterEach(() => vi.useRealTimers());

function task(results: Array<'ok' | 'fail'>) {
  const log: string[] = [];
  let runs = 0;
  let release: (() => void) | undefined;
  const t = serialTask({
    run: async () => {
      const result = results[runs++] ?? 'ok';
      log.push(`run ${runs}`);
      await new Promise<void>((resolve) => (release = resolve));
      if (result === 'fail') throw new Error(`run ${runs} failed`);
    },
    retryMs: 1000,
    everyMs: 600_000,
    onFailure: (err) => log.push(`failure: ${(err as Error).message}`),
    onRecovery: () => log.push('recovered'),
  });
  return { t, log, finish: () => release?.(), runs: () => runs };
}

describe('serialTask', () => {
  it('runs once at a time; runs asked for meanwhile make one more run after it', async () => {
    vi.useFakeTimers();
    const { t, log, finish } = task([]);
    t.schedule();
    t.schedule();
    t.schedule();
    await vi.advanceTimersByTimeAsync(0);
    expect(log).toEqual(['run 1']);
    finish();
    await vi.advanceTimersByTimeAsync(0);
    expect(log).toEqual(['run 1', 'run 2']);
    finish();
    await vi.advanceTimersByTimeAsync(0);
    expect(log).toEqual(['run 1', 'run 2']);
    await t.close();
  });

  it('tries a failed run again after retryMs, until one succeeds, reporting the first failure and the recovery once', async () => {
    vi.useFakeTimers();
    const { t, log, finish, runs } = task(['fail', 'fail', 'ok']);
    t.schedule();
    await vi.advanceTimersByTimeAsync(0);
    finish();
    await vi.advanceTimersByTimeAsync(999);
    expect(runs()).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(runs()).toBe(2);
    finish();
    await vi.advanceTimersByTimeAsync(1000);
    expect(runs()).toBe(3);
    finish();
    await vi.advanceTimersByTimeAsync(5000);
    expect(runs()).toBe(3);
    expect(log).toEqual(['run 1', 'failure: run 1 failed', 'run 2', 'run 3', 'recovered']);
    await t.close();
  });

  it('runs every everyMs without being asked, and nothing once closed', async () => {
    vi.useFakeTimers();
    const { t, finish, runs } = task([]);
    await vi.advanceTimersByTimeAsync(600_000);
    expect(runs()).toBe(1);
    finish();
    const closing = t.close();
    await vi.advanceTimersByTimeAsync(0);
    await closing;
    t.schedule();
    await vi.advanceTimersByTimeAsync(1_200_000);
    expect(runs()).toBe(1);
  });
});
