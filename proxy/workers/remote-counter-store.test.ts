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

const TIMEOUT_MS = 250;

function deafInstance() {
  const channels = channelPair();
  channels.stop();
  const counters = createMemoryCounterStore();
  const primary = new Link(channels.primary);
  primary.handle('counters.run', (args) => counters.run(...(args as Parameters<CounterStore['run']>)));
  primary.handle('counters.clear', (args) => counters.clear(args as string[]));
  const link = new Link(channels.worker);
  const limiter = createLimiter(
    {
      store: remoteCounterStore(link, TIMEOUT_MS),
      clock: new ManualClock(),
      log: pino({ level: 'silent' }),
      timeoutMs: TIMEOUT_MS,
    },
    { name: 'gateway_request', rules: [open, closed] },
  );
  return { channels, link, limiter };
}

function workerLimiter(deaf: boolean) {
  const instance = deafInstance();
  if (!deaf) instance.channels.resume();
  return instance.limiter;
}

/** Every message a channel end wrote, batches unpacked. */
function messages(writes: unknown[]): Array<{ arkvory: string; id?: number; op?: string }> {
  return writes.flatMap((w) => {
    const envelope = w as { arkvory: string; messages?: unknown[] };
    return (envelope.arkvory === 'batch' ? envelope.messages! : [envelope]) as Array<{ arkvory: string }>;
  });
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
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS - 1);
    expect(settled).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(settled.sort()).toEqual(['closed', 'open']);
    expect(await openCheck).toMatchObject({
      action: 'allow',
      error: expect.objectContaining({ code: 'store_timeout' }),
    });
    expect(await deniedCheck).toMatchObject({ action: 'block', exceeded: false, rule: { name: 'closed' } });
  });

  it('gives a call up at the store timeout: it is cancelled on the coordinating process and nothing of it stays on the worker’s link', async () => {
    vi.useFakeTimers();
    const { channels, link, limiter } = deafInstance();
    const checks = Array.from({ length: 50 }, (_, i) => limiter.check({ ip: `c${i}` }));
    const cleared = limiter.clear({ ip: 'c0' });
    await vi.advanceTimersByTimeAsync(1);
    expect(link.waiting).toBe(51);
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS - 1);
    for (const result of await Promise.all(checks))
      expect(result).toMatchObject({ action: 'allow', error: { code: 'store_timeout' } });
    await cleared;
    // The cancels leave in the next turn's write.
    await vi.advanceTimersByTimeAsync(1);
    // A coordinating process stopped for long leaves no call behind on the worker for each request.
    expect(link.waiting).toBe(0);
    const sent = messages(channels.writes.worker);
    const calls = sent.filter((m) => m.arkvory === 'call').map((m) => m.id);
    expect(calls).toHaveLength(51);
    expect(sent.filter((m) => m.arkvory === 'cancel').map((m) => m.id)).toEqual(calls);

    // Running again, it answers what was asked meanwhile: the answers find nothing waiting.
    channels.resume();
    for (let turn = 0; turn < 10; turn++) await vi.advanceTimersByTimeAsync(1);
    expect(messages(channels.writes.primary).filter((m) => m.arkvory === 'answer')).toHaveLength(51);
    expect(link.waiting).toBe(0);
  });
});
