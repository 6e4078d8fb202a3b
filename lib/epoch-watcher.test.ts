import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { ConnectionUrl } from './connection-url.ts';
import { EpochWatcher } from './epoch-watcher.ts';

class Clock {
  nowMs = 0;
  monotonicMs(): number {
    return this.nowMs;
  }
}

/**
 * A pool whose epoch query reads the row when it is sent and answers when the test says so: the
 * database executed it at once, the answer was slow to come back.
 */
function slowPool() {
  const state = { epoch: '1', sent: 0, slow: false, pending: [] as Array<() => void> };
  const pool = {
    query: async () => {
      state.sent++;
      const seen = state.epoch;
      const answer = { rows: [{ epoch: seen }] };
      if (!state.slow) return answer;
      return new Promise((resolve) => state.pending.push(() => resolve(answer)));
    },
  };
  const answerAll = () => {
    for (const answer of state.pending.splice(0)) answer();
  };
  return { state, pool, answerAll };
}

function watcher(pool: unknown, clock: Clock) {
  const w = new EpochWatcher({
    name: 'auth',
    pool: pool as never,
    databaseUrl: 'postgres://unused' as unknown as ConnectionUrl,
    table: 'arkvory_auth_epoch',
    channel: 'arkvory_auth',
    clock,
    log: pino({ level: 'silent' }),
  });
  let invalidations = 0;
  w.onInvalidate(() => invalidations++);
  return { w, invalidations: () => invalidations };
}

describe('EpochWatcher trust window', () => {
  it('counts a slow answer as fresh from when its query was sent, so a change is never ignored past freshness + one interval', async () => {
    const clock = new Clock();
    const { state, pool, answerAll } = slowPool();
    const { w, invalidations } = watcher(pool, clock);
    await w.poll();
    expect(w.trusted).toBe(true);
    clock.nowMs = 500;
    state.slow = true;
    const sentAtMs = clock.nowMs;
    const slow = w.poll(); // reads epoch 1 now...
    clock.nowMs = 600;
    state.epoch = '2'; // ...a key is revoked just after (its NOTIFY lost)...
    const changedAtMs = clock.nowMs;
    clock.nowMs = 1200;
    answerAll(); // ...and the answer (epoch 1) arrives 700 ms after it left
    await slow;
    expect(invalidations()).toBe(1); // only the first poll's
    // Trusted for freshness after the query left, not after the answer came.
    clock.nowMs = sentAtMs + w.freshnessMs;
    expect(w.trusted).toBe(true);
    clock.nowMs += 1;
    expect(w.trusted).toBe(false);
    // So the documented bound holds: freshness + one interval after the change, it is not trusted.
    clock.nowMs = changedAtMs + w.freshnessMs + w.pollIntervalMs;
    expect(w.trusted).toBe(false);
  });

  it('runs one poll at a time: a poll asked for meanwhile joins it, and a late answer never moves the epoch back', async () => {
    const clock = new Clock();
    const { state, pool, answerAll } = slowPool();
    const { w, invalidations } = watcher(pool, clock);
    await w.poll(); // epoch 1
    state.slow = true;
    clock.nowMs = 500;
    const first = w.poll(); // reads epoch 1, answers late
    state.epoch = '2';
    state.slow = false;
    clock.nowMs = 1000;
    const second = w.poll(); // the timer's next poll, or a notification's
    expect(state.sent).toBe(2); // the start's poll and the slow one: nothing sent beside it
    answerAll();
    await Promise.all([first, second]);
    expect(invalidations()).toBe(1);
    // The next poll reads epoch 2 and invalidates once; epoch 1 never comes back.
    await w.poll();
    expect(invalidations()).toBe(2);
    await w.poll();
    expect(invalidations()).toBe(2);
  });

  it('a failed poll does not make the cache trusted', async () => {
    const clock = new Clock();
    let fail = false;
    const pool = {
      query: async () => {
        if (fail) throw new Error('connection refused');
        return { rows: [{ epoch: '1' }] };
      },
    };
    const { w } = watcher(pool, clock);
    await w.poll();
    fail = true;
    clock.nowMs = 1000;
    await w.poll();
    clock.nowMs = 1000 + w.freshnessMs;
    expect(w.trusted).toBe(false);
  });
});
