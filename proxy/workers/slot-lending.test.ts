/**
 * Admission slots lent to workers (slot-lending.ts, ready-slots.ts): an instance of two workers on
 * in-memory channels and one hand-moved clock. A worker admits with a lent slot without a call; both
 * caps stay exact; a request that cannot be admitted at once gets the slots other workers hold unused;
 * slots unused through an interval, or held by a worker that closes or is fenced, go back; the
 * instance counts as active only the slots in use.
 */
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { AdmissionQueue, type Release } from '../../policy/admission/index.ts';
import { ManualClock } from '../../policy/clock.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { admissionOptions } from '../gates/transfers.ts';
import { channelPair } from '../../test/support/ipc-channel.ts';
import { IDLE_GOVERNORS as governors, roundTrip, track, unpacedConfig } from '../../test/support/worker-fixtures.ts';
import { Link } from './link.ts';
import { PolicyHost } from './policy-host.ts';
import { READY_SWEEP_MS, ReadySlots } from './ready-slots.ts';
import { createRemoteTransfers } from './remote-transfers.ts';
import { LEND_AT_MOST, READY, RECALL } from './slot-lending.ts';

/** A lease a test fences by hand. */
function fencibleLease() {
  const listeners: Array<(reason: string) => void> = [];
  let fencedReason: string | undefined;
  const lease = {
    owner: 'test',
    get fencedReason() {
      return fencedReason;
    },
    isPermitted: () => fencedReason === undefined,
    onFenced: (listener: (reason: string) => void) => listeners.push(listener),
    snapshot: () => null,
  } as unknown as LeaseStanding;
  const fence = (reason: string) => {
    fencedReason = reason;
    for (const listener of listeners) listener(reason);
  };
  return { lease, fence };
}

/** Two workers and their coordinating process, which lends slots to two. */
function instance(admission: Parameters<typeof unpacedConfig>[0]) {
  const config = unpacedConfig(admission);
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const queue = new AdmissionQueue({ ...admissionOptions(config), timers });
  const primaryLease = fencibleLease();
  const host = new PolicyHost({ admission: queue, governors, lease: primaryLease.lease, lendTo: 2 });
  const worker = () => {
    const channels = channelPair();
    host.attach(new Link(channels.primary));
    const lease = fencibleLease();
    const transfers = createRemoteTransfers(config, clock, lease.lease, new Link(channels.worker), timers);
    /** Calls and notes this worker sent, by op. */
    const sent = (op: string) => sentBy(channels.writes.worker, op);
    const told = (op: string) => sentBy(channels.writes.primary, op);
    return { transfers, sent, told, fence: lease.fence };
  };
  const active = () => host.snapshot().admission.downloads.active;
  return { queue, host, timers, a: worker(), b: worker(), active };
}

/** The messages of `op` among `writes` (each a message or a turn's batch). */
function sentBy(writes: unknown[], op: string): unknown[] {
  const messages = writes.flatMap((w) => {
    const m = w as { arkvory: string; messages?: unknown[] };
    return m.arkvory === 'batch' ? m.messages! : [m];
  });
  return messages.filter((m) => (m as { op?: string }).op === op);
}

describe('admission slots lent to the workers', () => {
  it('a worker admits with the slots lent beside its admission, without a call; the instance counts only those in use', async () => {
    const { queue, host, a, active } = instance({ maxDownloads: 64, maxDownloadsPerPrincipal: 32 });
    const first = await a.transfers.admit('p', 'download');
    // Half of what was spare after it (31), shared by two workers: 7.
    expect(queue.snapshot().downloads.active).toBe(8);
    const lent: Release[] = [];
    for (let i = 0; i < 7; i++) lent.push(a.transfers.tryAdmit('p', 'download')!);
    expect(lent.every((release) => typeof release === 'function')).toBe(true);
    expect(a.transfers.tryAdmit('p', 'download')).toBeUndefined();
    // Another principal's request is the coordinating process's to admit.
    expect(a.transfers.tryAdmit('q', 'download')).toBeUndefined();
    expect(a.sent('admit')).toHaveLength(1);
    await roundTrip();
    expect(active()).toBe(8);
    for (const release of [first, ...lent]) release();
    await roundTrip();
    // The lent ones are held ready, not active; the asked one went back.
    expect(queue.snapshot().downloads.active).toBe(7);
    expect(active()).toBe(0);
    expect(host.heldSlots).toBe(7);
    // The next seven are admitted from them, still without a call.
    for (let i = 0; i < 7; i++) expect(await a.transfers.admit('p', 'download')).toBeTypeOf('function');
    expect(a.sent('admit')).toHaveLength(1);
    // The worker says what it holds unused once per turn, not once per request.
    expect(a.sent(READY).length).toBeLessThanOrEqual(4);
  });

  it('lends at most its bound, never while a request of the kind waits, and nothing when half of the spare slots is less than one per worker', async () => {
    const big = instance({ maxDownloads: 1024, maxDownloadsPerPrincipal: 1024 });
    await big.a.transfers.admit('p', 'download');
    expect(big.queue.snapshot().downloads.active).toBe(1 + LEND_AT_MOST);
    // The defaults' 4 a principal: nothing to lend.
    const small = instance({ maxDownloads: 64, maxDownloadsPerPrincipal: 4 });
    await small.a.transfers.admit('p', 'download');
    expect(small.queue.snapshot().downloads.active).toBe(1);
    expect(small.a.transfers.tryAdmit('p', 'download')).toBeUndefined();
  });

  it('a request another worker cannot have at once gets a slot one worker holds unused; both caps hold throughout', async () => {
    const { queue, a, b, active } = instance({ maxDownloads: 16, maxDownloadsPerPrincipal: 16 });
    const inUse: Release[] = [await a.transfers.admit('p', 'download')];
    // a holds 3 lent slots unused (15 spare, a quarter of it).
    expect(queue.snapshot().downloads.active).toBe(4);
    // b takes what is left, asking (and borrowing) until one does not come at once.
    let waiting: ReturnType<typeof track> | undefined;
    for (let i = 0; i < 16 && waiting === undefined; i++) {
      const local = b.transfers.tryAdmit('q', 'download');
      if (local) {
        inUse.push(local);
        continue;
      }
      const asked = track(b.transfers.admit('q', 'download'));
      await roundTrip();
      expect(queue.snapshot().downloads.active).toBeLessThanOrEqual(16);
      if (asked.seen === 'granted') inUse.push(asked.value as Release);
      else waiting = asked;
    }
    expect(waiting?.seen).toBe('waiting');
    // a was told, gave back its three, and the waiting request has one of them.
    expect(a.told(RECALL)).toHaveLength(1);
    await roundTrip();
    expect(waiting?.seen).toBe('granted');
    expect(queue.snapshot().downloads.active).toBeLessThanOrEqual(16);
    expect(a.transfers.tryAdmit('p', 'download')).toBeUndefined();
    // Recalled, a's slot in use goes back as it ends rather than being held again.
    const before = queue.snapshot().downloads.active;
    inUse[0]!();
    await roundTrip();
    expect(queue.snapshot().downloads.active).toBe(before - 1);
    for (const release of [...inUse.slice(1), waiting!.value as Release]) release();
    await roundTrip();
    expect(active()).toBe(0);
  });

  it('slots unused through a whole interval go back, those needed in it stay', async () => {
    const { queue, timers, a, active } = instance({ maxDownloads: 64, maxDownloadsPerPrincipal: 32 });
    (await a.transfers.admit('p', 'download'))();
    await roundTrip();
    expect(queue.snapshot().downloads.active).toBe(7);
    // Two of the seven are in use at once during the first interval: five were not needed.
    const two = [a.transfers.tryAdmit('p', 'download')!, a.transfers.tryAdmit('p', 'download')!];
    for (const release of two) release();
    await timers.advance(READY_SWEEP_MS);
    await roundTrip();
    expect(queue.snapshot().downloads.active).toBe(2);
    expect(active()).toBe(0);
    // Unused through the next: none left, no timer left.
    await timers.advance(READY_SWEEP_MS);
    await roundTrip();
    expect(queue.snapshot().downloads.active).toBe(0);
    expect(timers.size).toBe(0);
  });

  it('a worker that closes or is fenced gives back what it holds unused and admits nothing from it', async () => {
    const { queue, a, b, timers } = instance({ maxDownloads: 64, maxDownloadsPerPrincipal: 32 });
    (await a.transfers.admit('p', 'download'))();
    const held = await b.transfers.admit('p', 'download');
    await roundTrip();
    expect(queue.snapshot().downloads.active).toBe(7 + 6 + 1);
    a.fence('the lease permit expired before a renewal was confirmed');
    expect(a.transfers.tryAdmit('p', 'download')).toBeUndefined();
    b.transfers.close();
    await roundTrip();
    // b's slot in use goes back when its transfer ends.
    expect(queue.snapshot().downloads.active).toBe(1);
    held();
    await roundTrip();
    expect(queue.snapshot().downloads.active).toBe(0);
    expect(timers.size).toBe(0);
  });
});

describe('a recall read in the same batch as the answer that lent the slots', () => {
  it('gives those slots back too', async () => {
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const channel = new EventEmitter() as EventEmitter & { sent: unknown[] };
    const sent: unknown[] = [];
    const link = new Link({
      send(message, callback) {
        sent.push(message);
        callback(null);
        return true;
      },
      on: (event, listener) => channel.on(event, listener),
    });
    const config = unpacedConfig({ maxDownloadsPerPrincipal: 32 });
    const transfers = createRemoteTransfers(config, clock, fencibleLease().lease, link, timers);
    const admitted = transfers.admit('p', 'download');
    await roundTrip();
    const call = sentBy(sent, 'admit')[0] as { id: number };
    channel.emit('message', {
      arkvory: 'batch',
      messages: [
        { arkvory: 'answer', id: call.id, value: { id: 10, lent: [11, 12] } },
        { arkvory: 'note', op: RECALL, args: 'download' },
      ],
    });
    expect(await admitted).toBeTypeOf('function');
    await roundTrip();
    expect(sentBy(sent, 'release').map((m) => (m as { args: number }).args)).toEqual([11, 12]);
    expect(transfers.tryAdmit('p', 'download')).toBeUndefined();
    transfers.close();
  });
});

describe('ReadySlots', () => {
  function slots() {
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const given: number[] = [];
    const reports: unknown[] = [];
    const turns: Array<() => void> = [];
    const ready = new ReadySlots({
      giveBack: (id) => given.push(id),
      report: (counts) => reports.push({ ...counts }),
      timers,
      later: (callback) => turns.push(callback),
    });
    const endTurn = () => {
      for (const callback of turns.splice(0)) callback();
    };
    return { ready, given, reports, endTurn, timers };
  }

  it('takes by principal and kind, last put first; reports the counts once per turn, and only a change', () => {
    const { ready, reports, endTurn } = slots();
    ready.add('p', 'download', [1, 2]);
    ready.add('p', 'upload', [3]);
    expect(ready.take('q', 'download')).toBeUndefined();
    expect(ready.take('p', 'download')).toBe(2);
    endTurn();
    expect(reports).toEqual([{ download: 1, upload: 1 }]);
    ready.put('p', 'download', 2);
    endTurn();
    expect(reports).toEqual([
      { download: 1, upload: 1 },
      { download: 2, upload: 1 },
    ]);
    // Taken and put back within a turn: nothing changed, nothing reported.
    expect(ready.take('p', 'download')).toBe(2);
    ready.put('p', 'download', 2);
    endTurn();
    expect(reports).toHaveLength(2);
    expect(ready.counts).toEqual({ download: 2, upload: 1 });
  });

  it('a recall gives back every slot of its kind, and each one in use as it ends, until more are lent', () => {
    const { ready, given } = slots();
    ready.add('p', 'download', [1, 2, 3]);
    ready.add('p', 'upload', [4]);
    const inUse = ready.take('p', 'download')!;
    ready.recall('download');
    expect(given.sort()).toEqual([1, 2]);
    expect(ready.take('p', 'download')).toBeUndefined();
    ready.put('p', 'download', inUse);
    expect(given).toContain(inUse);
    expect(ready.counts).toEqual({ download: 0, upload: 1 });
    ready.add('p', 'download', [5]);
    ready.put('p', 'download', ready.take('p', 'download')!);
    expect(ready.counts.download).toBe(1);
  });

  it('closed, it gives back what it holds and every slot lent or ended after, and leaves no timer', () => {
    const { ready, given, timers } = slots();
    ready.add('p', 'download', [1, 2]);
    const inUse = ready.take('p', 'download')!;
    expect(timers.size).toBe(1);
    ready.close();
    ready.put('p', 'download', inUse);
    ready.add('p', 'download', [3]);
    expect(given.sort()).toEqual([1, 2, 3]);
    expect(ready.take('p', 'download')).toBeUndefined();
    expect(timers.size).toBe(0);
  });
});
