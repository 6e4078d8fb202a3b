/**
 * A worker's reads of its instance (the worker list, the lease, the transfer counters, the /metrics
 * sum) over its link, on an in-memory channel pair and hand-moved timers: a coordinating process
 * that does not answer fails each read `unavailable` at its deadline, the worker keeps showing what
 * it read last, and the answer that arrives once the coordinating process runs again is ignored.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { joinInstanceLease, type LeaseView } from './instance-lease.ts';
import { METRICS_DEADLINE_MS, READ_DEADLINE_MS } from './instance-reads.ts';
import { Link } from './link.ts';
import { channelPair } from '../../test/support/ipc-channel.ts';
import { PERMITTED_LEASE as own, roundTrip, track, unpacedConfig } from '../../test/support/worker-fixtures.ts';
import type { PolicySnapshot } from './policy-host.ts';
import { createRemoteTransfers } from './remote-transfers.ts';
import { type WorkerView, workerInstance } from './worker-instance.ts';

const config = unpacedConfig({ maxDownloads: 8, queueLength: 4, waitMs: 1000 });

/** What the coordinating process answers; a test changes it to tell a late answer from an early one. */
interface Answers {
  workers: WorkerView[];
  lease: LeaseView;
  snapshot: PolicySnapshot;
  metrics: { contentType: string; body: string };
}

function serving(restarts: number): WorkerView[] {
  return [{ index: 0, state: 'serving', restarts }];
}

function policySnapshot(active: number): PolicySnapshot {
  const counters = { active, queued: 0, rejected: 0 };
  return {
    admission: { downloads: counters, uploads: counters, closed: false },
    download: {},
    upload: {},
  } as unknown as PolicySnapshot;
}

function sharedLease(slot: number): LeaseView {
  return {
    owner: 'test',
    fencedReason: undefined,
    sharedDownloads: { slot, slots: 2, active: true, leaseSeconds: 10 },
  };
}

/** A worker and its coordinating process, which answers every read from `answers`. */
async function instance() {
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const channels = channelPair();
  const answers: Answers = {
    workers: serving(0),
    lease: sharedLease(0),
    snapshot: policySnapshot(0),
    metrics: { contentType: 'text/plain', body: 'first' },
  };
  const primary = new Link(channels.primary);
  for (const op of ['workers', 'lease', 'snapshot', 'metrics'] as const) primary.handle(op, () => answers[op]);
  const link = new Link(channels.worker);
  const worker = workerInstance(link, { index: 0, workers: 1, joinsServing: false }, clock, timers);
  const lease = await joinInstanceLease(link, own, timers);
  const transfers = createRemoteTransfers(config, clock, lease, link, timers);
  return { timers, channels, answers, worker, lease, transfers };
}

describe('a worker’s reads of its instance when the coordinating process does not answer', () => {
  it('the worker list, the lease and the transfer counters are unavailable at the read deadline; what was read last stays, a late answer is ignored', async () => {
    const { timers, channels, answers, worker, lease, transfers } = await instance();
    const refreshAll = () => [worker.refresh(), lease.refresh(), transfers.refresh()].map((p) => track(p, 'answered'));
    const first = refreshAll();
    await roundTrip();
    expect(first.map((r) => r.seen)).toEqual(['answered', 'answered', 'answered']);

    channels.stop();
    answers.workers = serving(5);
    answers.lease = sharedLease(1);
    answers.snapshot = policySnapshot(7);
    const asked = refreshAll();
    await timers.advance(READ_DEADLINE_MS - 1);
    expect(asked.map((r) => r.seen)).toEqual(['waiting', 'waiting', 'waiting']);
    await timers.advance(1);
    expect(asked.map((r) => r.seen)).toEqual(['unavailable', 'unavailable', 'unavailable']);
    for (const { error } of asked) {
      expect((error as Error).message).toMatch(/coordinating process/);
      expect(error).toMatchObject({ headers: { 'retry-after': '1' } });
    }
    expect(timers.size).toBe(0);

    // The coordinating process runs again: its answers to the calls given up on change nothing.
    channels.resume();
    await roundTrip();
    expect(worker.workerViews).toEqual(serving(0));
    expect(lease.snapshot()).toMatchObject({ slot: 0 });
    expect(transfers.admission.snapshot().downloads).toMatchObject({ active: 0 });

    const again = refreshAll();
    await roundTrip();
    expect(again.map((r) => r.seen)).toEqual(['answered', 'answered', 'answered']);
    expect(worker.workerViews).toEqual(serving(5));
    expect(lease.snapshot()).toMatchObject({ slot: 1 });
    expect(transfers.admission.snapshot().downloads).toMatchObject({ active: 7 });
  });

  it('the /metrics sum is unavailable at its own deadline, which leaves the coordinating process its 2 s per worker', async () => {
    const { timers, channels, answers, worker } = await instance();
    channels.stop();
    const asked = track(worker.metrics(), 'answered');
    await timers.advance(METRICS_DEADLINE_MS - 1);
    expect(asked.seen).toBe('waiting');
    await timers.advance(1);
    expect(asked.seen).toBe('unavailable');
    expect((asked.error as Error).message).toMatch(/coordinating process/);
    expect(timers.size).toBe(0);

    answers.metrics = { contentType: 'text/plain', body: 'second' };
    channels.resume();
    await roundTrip();
    // The next scrape is a call of its own, answered with the figures of now.
    const again = track(worker.metrics(), 'answered');
    await roundTrip();
    expect(again).toMatchObject({ seen: 'answered', value: { body: 'second' } });
  });
});
