/**
 * What the coordinating process holds for a worker that is gone: a call the worker sent just before
 * it died may still be read from the IPC pipe after its exit was handled (`detach`); it must grant
 * nothing, or the slot stays taken with nobody to release it.
 */
import { EventEmitter } from 'node:events';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { AdmissionQueue } from '../../policy/admission/index.ts';
import { createBandwidthGovernors } from '../../policy/bandwidth/index.ts';
import { ManualClock } from '../../policy/clock.ts';
import { buildPlan } from '../../policy/rate-limit/evaluate.ts';
import { createMemoryCounterStore } from '../../policy/rate-limit/memory-counter-store.ts';
import { defineRule } from '../../policy/rate-limit/rules.ts';
import { T0 } from '../../test/conformance/counter-store.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import { Link } from './link.ts';
import { IDLE_GOVERNORS as governors, PERMITTED_LEASE as lease } from '../../test/support/worker-fixtures.ts';
import { PolicyHost } from './policy-host.ts';

/** The coordinating process's end of a worker's channel: messages in by `emit`, sends recorded (a batch's one by one). */
class FakeChannel extends EventEmitter {
  readonly sent: unknown[] = [];
  send(message: unknown, callback: (err: Error | null) => void): boolean {
    const { arkvory, messages } = message as { arkvory: string; messages?: unknown[] };
    this.sent.push(...(arkvory === 'batch' ? messages! : [message]));
    callback(null);
    return true;
  }
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await nextTurn();
}

function setup() {
  const admission = new AdmissionQueue({ maxDownloads: 4, maxDownloadsPerPrincipal: 1 });
  const host = new PolicyHost({ admission, governors, lease });
  const channel = new FakeChannel();
  const link = new Link(channel);
  host.attach(link);
  return { admission, host, channel, link };
}

const admit = { arkvory: 'call', id: 1, op: 'admit', args: { principalId: 'p', kind: 'download' } };

describe('PolicyHost and a worker that is gone', () => {
  it('grants a live worker its admission and counts it held', async () => {
    const { admission, host, channel } = setup();
    channel.emit('message', admit);
    await settle();
    expect(admission.snapshot().downloads.active).toBe(1);
    expect(host.heldSlots).toBe(1);
    expect(channel.sent).toEqual([{ arkvory: 'answer', id: 1, value: expect.any(Number) }]);
  });

  it('a fenced instance refuses the admission a worker waits for with lease_lost, at once', async () => {
    const fenced: Array<(reason: string) => void> = [];
    const standing = { ...lease, onFenced: (l: (reason: string) => void) => fenced.push(l) } as LeaseStanding;
    const admission = new AdmissionQueue({ maxDownloads: 4, maxDownloadsPerPrincipal: 1 });
    const host = new PolicyHost({ admission, governors, lease: standing });
    const channel = new FakeChannel();
    host.attach(new Link(channel));
    channel.emit('message', admit);
    channel.emit('message', { ...admit, id: 2 });
    await settle();
    expect(admission.snapshot().downloads).toMatchObject({ active: 1, queued: 1 });
    for (const l of fenced) l('the lease permit expired before a renewal was confirmed');
    await settle();
    expect(channel.sent).toContainEqual({
      arkvory: 'failure',
      id: 2,
      error: expect.objectContaining({ code: 'lease_lost' }),
    });
    expect(admission.snapshot().downloads).toMatchObject({ active: 1, queued: 0 });
    admission.close();
  });

  it('grants nothing for a call read after the worker was detached', async () => {
    const { admission, host, channel, link } = setup();
    host.detach(link);
    channel.emit('message', admit);
    await settle();
    expect(admission.snapshot().downloads.active).toBe(0);
    expect(host.heldSlots).toBe(0);
    expect(channel.sent).toEqual([]);
    // Another worker's request of the same principal finds the slot free.
    expect(admission.tryAcquire('p', 'download')).toBeDefined();
  });
});

describe("PolicyHost and a worker's malformed calls", () => {
  function host() {
    const admission = new AdmissionQueue({ maxDownloads: 4, maxDownloadsPerPrincipal: 1 });
    const clock = new ManualClock();
    const governors = createBandwidthGovernors(
      { clock },
      {
        downloadBytesPerSec: 0,
        downloadBytesPerSecPerPrincipal: 0,
        uploadBytesPerSec: 1_000_000,
        uploadBytesPerSecPerPrincipal: 0,
      },
    );
    const counters = createMemoryCounterStore();
    const warned: object[] = [];
    const policy = new PolicyHost({ admission, governors, lease, counters, log: { warn: (f) => warned.push(f) } });
    const channel = new FakeChannel();
    const link = new Link(channel);
    policy.attach(link);
    return { admission, counters, policy, channel, link, warned };
  }

  const failed = (id: number) => ({
    arkvory: 'failure',
    id,
    error: expect.objectContaining({ code: 'malformed_call' }),
  });

  it('refuses a repository transfer with no bound (NaN), a bad admission and a take past its place, holding nothing', async () => {
    const { admission, policy, channel, warned } = host();
    channel.emit('message', {
      arkvory: 'call',
      id: 1,
      op: 'repository.hold',
      args: { repository: 'r', max: Number.NaN },
    });
    channel.emit('message', { arkvory: 'call', id: 2, op: 'admit', args: { principalId: 'p', kind: 'sideways' } });
    const take = { direction: 'upload', principalId: 'p', weight: 1, ceilings: [], bytes: 1, opens: true, tag: 1e300 };
    channel.emit('message', { arkvory: 'call', id: 3, op: 'take', args: take });
    channel.emit('message', { arkvory: 'call', id: 4, op: 'repository.hold', args: { repository: 'r', max: -1 } });
    await settle();
    expect(channel.sent).toHaveLength(4);
    expect(channel.sent).toEqual(expect.arrayContaining([failed(1), failed(2), failed(3), failed(4)]));
    expect(policy.heldSlots).toBe(0);
    expect(admission.snapshot().downloads.active).toBe(0);
    // One line per op for this worker, however many calls.
    expect(warned).toEqual([
      expect.objectContaining({ op: 'repository.hold' }),
      expect.objectContaining({ op: 'admit' }),
      expect.objectContaining({ op: 'take' }),
    ]);
    // The repository's bound of one still holds: the NaN call took no transfer.
    channel.emit('message', { arkvory: 'call', id: 5, op: 'repository.hold', args: { repository: 'r', max: 1 } });
    channel.emit('message', { arkvory: 'call', id: 6, op: 'repository.hold', args: { repository: 'r', max: 1 } });
    await settle();
    expect(channel.sent).toHaveLength(6);
    expect(channel.sent.slice(4)).toEqual(
      expect.arrayContaining([
        { arkvory: 'answer', id: 5, value: expect.any(Number) },
        { arkvory: 'failure', id: 6, error: expect.objectContaining({ code: 'busy' }) },
      ]),
    );
  });

  it('survives a malformed release note and a call op sent as a note, and handles the rest of the batch', async () => {
    // A note has nobody to answer: a handler that throws, or whose promise fails, must neither
    // escape the channel's message event (taking the coordinating process and every worker down)
    // nor cost the messages written with it.
    const { admission, policy, channel, warned } = host();
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => rejections.push(reason);
    process.on('unhandledRejection', onRejection);
    try {
      expect(() =>
        channel.emit('message', {
          arkvory: 'batch',
          messages: [
            { arkvory: 'note', op: 'release', args: 'not an id' },
            { arkvory: 'note', op: 'admit', args: { principalId: 'p', kind: 'sideways' } },
            { arkvory: 'call', id: 1, op: 'admit', args: { principalId: 'p', kind: 'download' } },
          ],
        }),
      ).not.toThrow();
      await settle();
    } finally {
      process.off('unhandledRejection', onRejection);
    }
    expect(rejections).toEqual([]);
    expect(channel.sent).toEqual([{ arkvory: 'answer', id: 1, value: expect.any(Number) }]);
    expect(policy.heldSlots).toBe(1);
    expect(admission.snapshot().downloads.active).toBe(1);
    expect(warned).toEqual([expect.objectContaining({ op: 'release' }), expect.objectContaining({ op: 'admit' })]);
  });

  it('refuses a call whose id is still being answered, so a gone worker leaves no admission behind', async () => {
    // The second admit, waiting behind the first under the same id, was no longer cancelled when its
    // worker went (the first's answer had dropped the id's cancel), and the slot it was granted then
    // stayed counted with nobody to release it.
    const { admission, policy, channel, link } = host();
    const args = { principalId: 'p', kind: 'download' };
    channel.emit('message', {
      arkvory: 'batch',
      messages: [
        { arkvory: 'call', id: 1, op: 'admit', args },
        { arkvory: 'call', id: 1, op: 'admit', args },
      ],
    });
    await settle();
    policy.detach(link);
    await settle();
    expect(admission.snapshot().downloads).toMatchObject({ active: 0, queued: 0 });
    expect(policy.heldSlots).toBe(0);
  });

  it('refuses a rate-limit count of NaN, leaving the counter as it was', async () => {
    const { counters, channel } = host();
    const rule = defineRule({ name: 'r', action: 'limit', characteristics: ['ip'], limit: 5, periodS: 60 });
    const plan = buildPlan('p:', 'l', [rule], { ip: 'a' }, T0);
    await counters.run(plan, { nowMs: T0, cost: 2, mode: 'check' });
    channel.emit('message', {
      arkvory: 'call',
      id: 1,
      op: 'counters.run',
      args: [plan, { nowMs: T0, cost: Number.NaN, mode: 'check' }],
    });
    await settle();
    expect(channel.sent).toEqual([failed(1)]);
    const [outcome] = await counters.run(plan, { nowMs: T0, cost: 0, mode: 'peek' });
    expect(outcome!.count).toBe(2);
  });
});
