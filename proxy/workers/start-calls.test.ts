/**
 * A starting worker's calls to its coordinating process over its link, on an in-memory channel pair
 * and hand-moved timers: its place in the instance (`hello`), the instance's lease, and the wait to
 * listen (`ready`) each fail `coordinator_unanswered` when the coordinating process does not answer
 * (stopped, stuck), instead of holding the start forever; a `ready` that rightly waits long for the
 * other workers does not fail while the coordinating process answers its pings.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { channelPair } from '../../test/support/ipc-channel.ts';
import { PERMITTED_LEASE as own, roundTrip, track } from '../../test/support/worker-fixtures.ts';
import { joinInstanceLease, type LeaseView } from './instance-lease.ts';
import { Link } from './link.ts';
import { PING, START_CALL_DEADLINE_MS, START_PING_INTERVAL_MS } from './start-calls.ts';
import { type Hello, joinOver, workerInstance } from './worker-instance.ts';

const HELLO: Hello = { index: 1, workers: 2, joinsServing: true };
const LEASE: LeaseView = { owner: 'test', fencedReason: undefined, sharedDownloads: null };

/** A starting worker and its coordinating process; `ready` is answered when the test says so. */
function starting() {
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const channels = channelPair();
  const primary = new Link(channels.primary);
  const allReady = Promise.withResolvers<void>();
  let pings = 0;
  primary.handle('hello', () => HELLO);
  primary.handle('lease', () => LEASE);
  primary.handle('ready', () => allReady.promise);
  primary.handle(PING, () => {
    pings++;
  });
  const link = new Link(channels.worker);
  return { clock, timers, channels, link, allReady, pings: () => pings };
}

describe('a starting worker whose coordinating process does not answer', () => {
  it('fails its hello at the start deadline, not before, with coordinator_unanswered', async () => {
    const { clock, timers, channels, link } = starting();
    channels.stop();
    const joined = track(joinOver(link, clock, timers), 'joined');
    await timers.advance(START_CALL_DEADLINE_MS - 1);
    expect(joined.seen).toBe('waiting');
    await timers.advance(1);
    expect(joined.seen).toBe('coordinator_unanswered');
    expect((joined.error as Error).message).toMatch(/coordinating process .* "hello" within 5 s/);
    expect(timers.size).toBe(0);
  });

  it('fails its read of the instance’s lease at the start deadline', async () => {
    const { timers, channels, link } = starting();
    channels.stop();
    const joined = track(joinInstanceLease(link, own, timers), 'joined');
    await timers.advance(START_CALL_DEADLINE_MS - 1);
    expect(joined.seen).toBe('waiting');
    await timers.advance(1);
    expect(joined.seen).toBe('coordinator_unanswered');
    expect(timers.size).toBe(0);
  });

  it('joins at once when the coordinating process answers', async () => {
    const { clock, timers, link } = starting();
    const joined = track(joinOver(link, clock, timers), 'joined');
    const lease = track(joinInstanceLease(link, own, timers), 'joined');
    await roundTrip();
    expect(joined).toMatchObject({ seen: 'joined', value: { index: 1, workers: 2, joinsServing: true } });
    expect(lease.seen).toBe('joined');
    expect(timers.size).toBe(0);
  });

  it('waits to listen as long as the other workers take while the coordinating process answers its pings', async () => {
    const { clock, timers, link, allReady, pings } = starting();
    const worker = workerInstance(link, HELLO, clock, timers);
    const ready = track(worker.ready(), 'ready');
    // A minute of other workers starting (a database wait): far past the deadline.
    for (let s = 0; s < 60; s++) {
      await timers.advance(1000);
      await roundTrip();
    }
    expect(ready.seen).toBe('waiting');
    expect(pings()).toBeGreaterThanOrEqual(60_000 / (START_PING_INTERVAL_MS + START_CALL_DEADLINE_MS));
    allReady.resolve();
    await roundTrip();
    expect(ready.seen).toBe('ready');
    // No ping goes on once it may listen.
    expect(timers.size).toBe(0);
    const seen = pings();
    await timers.advance(10 * START_PING_INTERVAL_MS);
    expect(pings()).toBe(seen);
  });

  it('fails its wait to listen within a ping interval and the deadline of the coordinating process stopping', async () => {
    const { clock, timers, channels, link } = starting();
    const worker = workerInstance(link, HELLO, clock, timers);
    const ready = track(worker.ready(), 'ready');
    for (let s = 0; s < 10; s++) {
      await timers.advance(1000);
      await roundTrip();
    }
    expect(ready.seen).toBe('waiting');
    // No ping is in flight: the next one, due within an interval, goes unanswered.
    channels.stop();
    await timers.advance(START_CALL_DEADLINE_MS);
    expect(ready.seen).toBe('waiting');
    await timers.advance(START_PING_INTERVAL_MS);
    expect(ready.seen).toBe('coordinator_unanswered');
    expect((ready.error as Error).message).toMatch(/coordinating process .* "ping" within 5 s/);
    expect(timers.size).toBe(0);
  });
});
