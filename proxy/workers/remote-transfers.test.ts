/**
 * A worker's admission and repository transfers over its link, on an in-memory channel pair and a
 * hand-moved clock shared by both sides: a coordinating process that does not answer (stopped, busy)
 * holds a request no longer than the instance's wait bound plus a margin (an admission) or a short
 * deadline (a repository transfer), then the request is 503 `unavailable`, and what the coordinating
 * process grants once it answers again goes back at once.
 */
import { describe, expect, it } from 'vitest';
import { AdmissionQueue } from '../../policy/admission/index.ts';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { createBandwidthGovernors } from '../../policy/bandwidth/index.ts';
import { admissionOptions, governorCeilings } from '../gates/transfers.ts';
import { Link } from './link.ts';
import {
  IDLE_GOVERNORS as governors,
  PERMITTED_LEASE as lease,
  roundTrip,
  type Tracked,
  track,
  unpacedConfig,
} from '../../test/support/worker-fixtures.ts';
import { channelPair } from '../../test/support/ipc-channel.ts';
import { PolicyHost } from './policy-host.ts';
import { ADMISSION_DEADLINE_MARGIN_MS, createRemoteTransfers, HOLD_DEADLINE_MS } from './remote-transfers.ts';
import { PING } from './start-calls.ts';
import { TAKE_CHECK_DEADLINE_MS, TAKE_CHECK_INTERVAL_MS } from './take-watch.ts';

const config = unpacedConfig();

/** A configuration whose download ceiling paces: 1 MiB/s, its burst 1 MiB. */
const paced = { ...config, bandwidth: { ...config.bandwidth, downloadBytesPerSec: 1_048_576 } } as typeof config;

/**
 * An instance of one worker: the coordinating process's host and the worker's transfers, on one
 * clock; with `configured`, governors of its own built from it (else the shared unpaced ones).
 */
function instance(options: { configured?: typeof config; maxLateCalls?: number } = {}) {
  const cfg = options.configured ?? config;
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const channels = channelPair();
  const admission = new AdmissionQueue({ ...admissionOptions(cfg), timers });
  const instanceGovernors = options.configured
    ? createBandwidthGovernors({ clock, timers }, governorCeilings(cfg))
    : governors;
  const host = new PolicyHost({ admission, governors: instanceGovernors, lease });
  const primary = new Link(channels.primary);
  host.attach(primary);
  // As the supervisor does on every worker's link.
  primary.handle(PING, () => undefined);
  const link = new Link(channels.worker, options.maxLateCalls ? { maxLateCalls: options.maxLateCalls } : {});
  const silences: number[] = [];
  const transfers = createRemoteTransfers(cfg, clock, lease, link, timers, (takes) => silences.push(takes));
  return { timers, channels, admission, host, link, transfers, governors: instanceGovernors, silences };
}

/** The call still waits 1 ms before `deadlineMs`, and is 503 `unavailable` (retry after 1 s) at it, no timer left. */
async function expectUnavailableAt(timers: ManualTimers, asked: Tracked, deadlineMs: number): Promise<void> {
  await timers.advance(deadlineMs - 1);
  expect(asked.seen).toBe('waiting');
  await timers.advance(1);
  expect(asked.seen).toBe('unavailable');
  expect(asked.error).toMatchObject({ headers: { 'retry-after': '1' } });
  expect(timers.size).toBe(0);
}

describe('a worker’s transfers when the coordinating process does not answer', () => {
  it('an admission is 503 unavailable at the wait bound plus the margin, and the slot granted later goes back at once', async () => {
    const { timers, channels, admission, host, transfers } = instance();
    channels.stop();
    await expectUnavailableAt(
      timers,
      track(transfers.admit('p', 'download')),
      config.admission.waitMs + ADMISSION_DEADLINE_MARGIN_MS,
    );

    // The coordinating process goes on: it grants the call it reads first, then reads the cancel.
    channels.resume();
    await roundTrip();
    expect(admission.snapshot().downloads).toMatchObject({ active: 0, queued: 0 });
    expect(host.heldSlots).toBe(0);
    const again = track(transfers.admit('p', 'download'));
    await roundTrip();
    expect(again.seen).toBe('granted');
  });

  it('calls given up on are awaited up to a bound: past it an admission or a repository’s transfer is 503 unavailable at once, and the late answers free it', async () => {
    const { timers, channels, admission, host, link, transfers } = instance({ maxLateCalls: 3 });
    // Stopped with its pipe taking writes (the socket buffers): no write waits, nothing is answered.
    channels.stop();
    const given = ['p1', 'p2', 'p3'].map((p) => track(transfers.admit(p, 'download')));
    await timers.advance(config.admission.waitMs + ADMISSION_DEADLINE_MARGIN_MS);
    expect(given.map((g) => g.seen)).toEqual(['unavailable', 'unavailable', 'unavailable']);
    expect(link.late).toBe(3);

    // Past the bound a call that would be awaited late is not sent: refused before any clock moves.
    const sent = channels.writes.worker.length;
    const admit = track(transfers.admit('p4', 'download'));
    const hold = track(Promise.resolve(transfers.holdRepository('r', 1)));
    await roundTrip();
    expect(admit).toMatchObject({ seen: 'unavailable', error: { headers: { 'retry-after': '1' } } });
    expect(hold).toMatchObject({ seen: 'unavailable', error: { headers: { 'retry-after': '1' } } });
    expect(channels.writes.worker).toHaveLength(sent);
    expect(timers.size).toBe(0);
    expect(link.late).toBe(3);

    // The coordinating process goes on: it grants the calls it reads, the worker hands each back.
    channels.resume();
    await roundTrip();
    expect(link.late).toBe(0);
    expect(host.heldSlots).toBe(0);
    expect(admission.snapshot().downloads).toMatchObject({ active: 0, queued: 0 });
    const again = track(transfers.admit('p4', 'download'));
    await roundTrip();
    expect(again.seen).toBe('granted');
  });

  it('an admission the instance keeps waiting gets its own 429 busy at its wait bound, before the worker’s deadline', async () => {
    const { timers, admission, transfers } = instance();
    const first = track(transfers.admit('p', 'download'));
    await roundTrip();
    expect(first.seen).toBe('granted');
    const second = track(transfers.admit('p', 'download'));
    await roundTrip();
    expect(admission.snapshot().downloads.queued).toBe(1);
    await timers.advance(config.admission.waitMs);
    await roundTrip();
    expect(second.seen).toBe('busy');
    expect(timers.size).toBe(0);
  });

  it('a repository transfer is 503 unavailable after its deadline, and the one granted later goes back at once', async () => {
    const { timers, channels, transfers } = instance();
    channels.stop();
    await expectUnavailableAt(timers, track(Promise.resolve(transfers.holdRepository('r', 1))), HOLD_DEADLINE_MS);

    channels.resume();
    await roundTrip();
    // The repository's one transfer is free again: a leaked hold would make this busy.
    const again = track(Promise.resolve(transfers.holdRepository('r', 1)));
    await roundTrip();
    expect(again.seen).toBe('granted');
  });
});

describe('a worker’s paced streams', () => {
  it('a new weight holds from the next stream on: the takes of a stream opened before the change do not set the old one again', async () => {
    const { transfers, governors: instanceGovernors } = instance({ configured: paced });
    const weight = () => instanceGovernors.download.activeWeightSum(1000);

    // A long download opened at weight 1; then an admin sets the principal's weight to 3.
    const before = transfers.meter('download', 'p', 1);
    await before.take(1000);
    expect(weight()).toBe(1);
    const after = transfers.meter('download', 'p', 3);
    await after.take(1000);
    expect(weight()).toBe(3);
    // The older stream goes on, as on a gateway of one process, under the principal's weight now.
    await before.take(1000);
    expect(weight()).toBe(3);
    await after.take(1000);
    expect(weight()).toBe(3);
  });
});

describe('a worker’s paced streams in fair order', () => {
  it('a small response goes before the waiting quantum of a big transfer of the same principal, as on a gateway of one process', async () => {
    const { timers, transfers } = instance({ configured: paced });

    // The big transfer spends the burst and waits for its next quantum.
    const big = transfers.meter('download', 'p', 1);
    await big.take(65_536);
    const next = track(big.take(65_536));
    await roundTrip();
    expect(next.seen).toBe('waiting');
    // A small response of the same principal has taken nothing: its 4 KiB are in the bucket now.
    const small = track(transfers.meter('download', 'p', 1).take(4096));
    await roundTrip();
    expect(small.seen).toBe('granted');
    expect(next.seen).toBe('waiting');
    await timers.advance(1000);
    await roundTrip();
    expect(next.seen).toBe('granted');
  });
});

describe('a worker’s paced streams through a changed ceiling', () => {
  it('a lowered repository ceiling holds every stream through it: one begun before the change does not raise it again', async () => {
    const { timers, transfers, governors: instanceGovernors } = instance({ configured: config });
    let granted = 0;
    let running = true;
    const saturate = async (rate: number) => {
      const meter = transfers.meter('download', 'p', 1, [{ key: 'repository:r', rateBytesPerSec: rate }]);
      while (running) {
        await meter.take(meter.quantumBytes);
        granted += meter.quantumBytes;
      }
    };
    // A download at the old ceiling of 10 MiB/s; the admin lowers it to 1 MiB/s; another starts.
    const old = saturate(10 * 1_048_576);
    await timers.advance(1000);
    await roundTrip();
    const lowered = saturate(1_048_576);
    await roundTrip();
    const from = granted;
    for (let ms = 0; ms < 10_000; ms += 10) {
      await timers.advance(10);
      await roundTrip();
    }
    // 10 s at 1 MiB/s and at most what the bucket held (capped at 1 MiB, the old burst, when lowered).
    expect(granted - from).toBeLessThanOrEqual(10 * 1_048_576 + 1_048_576 + 2 * 65_536);
    running = false;
    instanceGovernors.download.close();
    await Promise.allSettled([old, lowered]);
  });
});

/** Moves the hand-moved clock `ms` in steps of 10 ms, each followed by a round trip over the link. */
async function run(timers: ManualTimers, ms: number): Promise<void> {
  for (let at = 0; at < ms; at += 10) {
    await timers.advance(10);
    await roundTrip();
  }
}

describe('a worker’s paced takes when the coordinating process does not answer', () => {
  it('shared profile: an unpaced upload quantum is the coordinating process’s too, so one standing still past the lease permit grants none', async () => {
    // The writer of two gateways with no upload ceiling: what the lease permits is known only to the
    // coordinating process, which checks it before each grant.
    const shared = {
      ...config,
      shared: { slots: 2, slot: 0, downloadBytesPerSec: 1_048_576, downloadBytesPerSecPerPrincipal: 0 },
    } as typeof config;
    const { timers, channels, transfers } = instance({ configured: shared });
    const meter = transfers.meter('upload', 'p', 1);
    await meter.take(65_536);
    channels.stop();
    // Past the 8 s permit: a new quantum must not pass on the worker's word alone.
    await run(timers, 9000);
    const asked = track(meter.take(65_536));
    await run(timers, TAKE_CHECK_INTERVAL_MS + TAKE_CHECK_DEADLINE_MS);
    expect(asked.seen).toBe('unavailable');
    expect(transfers.unanswered).toEqual({ download: 0, upload: 1 });
  });

  it('a waiting take fails 503 unavailable once a check goes unanswered, within the interval plus the deadline, once logged and counted', async () => {
    const { timers, channels, transfers, silences } = instance({ configured: paced });
    const meter = transfers.meter('download', 'p', 1);
    await meter.take(65_536);
    channels.stop();
    const asked = [track(meter.take(65_536)), track(transfers.meter('download', 'q', 1).take(4096))];
    await run(timers, TAKE_CHECK_INTERVAL_MS + TAKE_CHECK_DEADLINE_MS - 10);
    expect(asked.map((a) => a.seen)).toEqual(['waiting', 'waiting']);
    expect(meter.waiting).toBe(true);
    await run(timers, 10);
    expect(asked.map((a) => a.seen)).toEqual(['unavailable', 'unavailable']);
    expect(asked[0]!.error).toMatchObject({ headers: { 'retry-after': '1' } });
    expect(meter.waiting).toBe(false);
    expect(transfers.unanswered).toEqual({ download: 2, upload: 0 });
    expect(silences).toEqual([2]);

    // Resumed, the instance paces again; nothing more fails and no check is left waiting.
    channels.resume();
    await run(timers, 100);
    const again = track(transfers.meter('download', 'p', 1).take(4096));
    await run(timers, TAKE_CHECK_INTERVAL_MS * 5);
    expect(again.seen).toBe('granted');
    expect(silences).toEqual([2]);
    await run(timers, TAKE_CHECK_INTERVAL_MS);
    expect(timers.size).toBe(0);
  });

  it('a take a healthy governor holds far longer than the deadline waits for its bytes: the coordinating process answers each check', async () => {
    const { timers, transfers, governors: instanceGovernors, channels } = instance({ configured: paced });
    const meter = transfers.meter('download', 'p', 1);
    await meter.take(65_536);
    // No refill at all: the take waits for as long as the ceiling says, here until it is set again.
    instanceGovernors.download.setRate(0);
    const held = track(meter.take(65_536));
    await run(timers, 10 * (TAKE_CHECK_INTERVAL_MS + TAKE_CHECK_DEADLINE_MS));
    expect(held.seen).toBe('waiting');
    expect(transfers.unanswered).toEqual({ download: 0, upload: 0 });
    // One check a second, each answered: not one per take or per turn.
    const pings = channels.writes.worker.filter((m) => JSON.stringify(m).includes(`"op":"${PING}"`));
    expect(pings.length).toBeGreaterThanOrEqual(29);
    expect(pings.length).toBeLessThanOrEqual(31);
    instanceGovernors.download.setRate(1_048_576);
    await run(timers, 100);
    expect(held.seen).toBe('granted');
  });
});
