/**
 * A worker's reads of its instance (the worker list, the lease, the transfer counters, the /metrics
 * sum) over its link, on an in-memory channel pair and hand-moved timers: a coordinating process
 * that does not answer fails each read `unavailable` at its deadline, the worker keeps showing what
 * it read last, and the answer that arrives once the coordinating process runs again is ignored.
 */
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import { ManualTimers, settle } from '../../policy/timers.ts';
import type { Config } from '../config/config.ts';
import { joinInstanceLease, type LeaseView } from './instance-lease.ts';
import { METRICS_DEADLINE_MS, READ_DEADLINE_MS } from './instance-reads.ts';
import { type Channel, Link } from './link.ts';
import type { PolicySnapshot } from './policy-host.ts';
import { createRemoteTransfers } from './remote-transfers.ts';
import { type WorkerView, workerInstance } from './worker-instance.ts';

/**
 * Two ends of a channel delivered as IPC does (a copy, on a later turn). While the coordinating
 * process is `stopped`, what the worker sends waits in the pipe; `resume` delivers it in order.
 */
function channelPair() {
  const a = new EventEmitter();
  const b = new EventEmitter();
  const pipe: unknown[] = [];
  let stopped = false;
  const end = (self: EventEmitter, other: EventEmitter, held: boolean): Channel => ({
    send(message, callback) {
      const copy = structuredClone(message);
      if (held && stopped) pipe.push(copy);
      else setImmediate(() => other.emit('message', copy));
      callback(null);
      return true;
    },
    on(event, listener) {
      self.on(event, listener);
      return self;
    },
  });
  return {
    worker: end(a, b, true),
    primary: end(b, a, false),
    stop: () => (stopped = true),
    resume: () => {
      stopped = false;
      for (const message of pipe.splice(0)) setImmediate(() => b.emit('message', message));
    },
  };
}

const own = {
  owner: 'test',
  fencedReason: undefined,
  isPermitted: () => true,
  onFenced: () => {},
  snapshot: () => null,
} as unknown as LeaseStanding;

const config = {
  bandwidth: {
    downloadBytesPerSec: 0,
    downloadBytesPerSecPerPrincipal: 0,
    uploadBytesPerSec: 0,
    uploadBytesPerSecPerPrincipal: 0,
  },
  admission: { maxDownloads: 8, maxDownloadsPerPrincipal: 1, maxUploadsPerPrincipal: 1, queueLength: 4, waitMs: 1000 },
} as unknown as Config;

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

/** Lets a round trip over the link run: each side's write and its delivery are turns of their own. */
async function roundTrip(): Promise<void> {
  for (let i = 0; i < 6; i++) await settle();
}

/** What became of a call so far, its rejection handled from the start (none goes unhandled). */
function track(promise: Promise<unknown>): { seen: string; error?: unknown; value?: unknown } {
  const state: { seen: string; error?: unknown; value?: unknown } = { seen: 'waiting' };
  promise.then(
    (value) => Object.assign(state, { seen: 'answered', value }),
    (error: unknown) => Object.assign(state, { seen: (error as { code?: string }).code ?? String(error), error }),
  );
  return state;
}

describe('a worker’s reads of its instance when the coordinating process does not answer', () => {
  it('the worker list, the lease and the transfer counters are unavailable at the read deadline; what was read last stays, a late answer is ignored', async () => {
    const { timers, channels, answers, worker, lease, transfers } = await instance();
    const refreshAll = () => [worker.refresh(), lease.refresh(), transfers.refresh()].map(track);
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
    const asked = track(worker.metrics());
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
    const again = track(worker.metrics());
    await roundTrip();
    expect(again).toMatchObject({ seen: 'answered', value: { body: 'second' } });
  });
});
