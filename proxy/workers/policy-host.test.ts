/**
 * What the coordinating process holds for a worker that is gone: a call the worker sent just before
 * it died may still be read from the IPC pipe after its exit was handled (`detach`); it must grant
 * nothing, or the slot stays taken with nobody to release it.
 */
import { EventEmitter } from 'node:events';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { AdmissionQueue } from '../../policy/admission/index.ts';
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
