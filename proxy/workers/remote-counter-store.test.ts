/**
 * A worker's rate-limit counters over its link to the coordinating process, on an in-memory channel
 * pair: a coordinating process that does not answer (busy, stopped) holds a check no longer than the
 * limiter's store timeout, and the check then fails open, or closed for a rule that says
 * `on_store_error: deny`, exactly as a hung Redis does (docs/rate-limits.md).
 */
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { createLimiter } from '../../policy/rate-limit/limiter.ts';
import { createMemoryCounterStore } from '../../policy/rate-limit/memory-counter-store.ts';
import { defineRule } from '../../policy/rate-limit/rules.ts';
import { Link } from './link.ts';
import { channelPair } from '../../test/support/ipc-channel.ts';
import { remoteCounterStore } from './remote-counter-store.ts';
import type { CounterStore } from '../../policy/rate-limit/counter-store.ts';

const open = defineRule({ name: 'open', action: 'limit', characteristics: ['ip'], limit: 1, periodS: 60 });
const closed = defineRule({
  name: 'closed',
  action: 'limit',
  characteristics: ['ip'],
  limit: 1,
  periodS: 60,
  match: { ip: 'deny' },
  onStoreError: 'deny',
});

function workerLimiter(deaf: boolean) {
  const { worker, primary, stop } = channelPair();
  if (deaf) stop();
  const counters = createMemoryCounterStore();
  new Link(primary).handle('counters.run', (args) => counters.run(...(args as Parameters<CounterStore['run']>)));
  return createLimiter(
    {
      store: remoteCounterStore(new Link(worker)),
      clock: new ManualClock(),
      log: pino({ level: 'silent' }),
      timeoutMs: 250,
    },
    { name: 'gateway_request', rules: [open, closed] },
  );
}

afterEach(() => vi.useRealTimers());

describe('remote counter store', () => {
  it('counts on the coordinating process when it answers', async () => {
    const limiter = workerLimiter(false);
    expect(await limiter.check({ ip: 'a' })).toMatchObject({ action: 'allow', error: undefined });
    expect(await limiter.check({ ip: 'a' })).toMatchObject({ action: 'block', exceeded: true });
  });

  it('holds a check no longer than the store timeout when the coordinating process does not answer, then fails open, or closed per rule', async () => {
    vi.useFakeTimers();
    const limiter = workerLimiter(true);
    const settled: string[] = [];
    const openCheck = limiter.check({ ip: 'a' }).then((r) => (settled.push('open'), r));
    const deniedCheck = limiter.check({ ip: 'deny' }).then((r) => (settled.push('closed'), r));
    await vi.advanceTimersByTimeAsync(249);
    expect(settled).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(settled.sort()).toEqual(['closed', 'open']);
    expect(await openCheck).toMatchObject({
      action: 'allow',
      error: expect.objectContaining({ code: 'store_timeout' }),
    });
    expect(await deniedCheck).toMatchObject({ action: 'block', exceeded: false, rule: { name: 'closed' } });
  });
});
