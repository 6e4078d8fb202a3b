import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../clock.ts';
import type { PolicyError } from '../errors.ts';
import { ManualTimers, settle } from '../timers.ts';
import { AdmissionQueue, type AdmissionQueueOptions, type Release, type TransferKind } from './admission-queue.ts';

function setup(options: Partial<AdmissionQueueOptions> = {}) {
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const queue = new AdmissionQueue({ maxDownloads: 256, queueLength: 64, waitMs: 30_000, timers, ...options });
  return { queue, timers };
}

function track(promise: Promise<Release>) {
  const seen: { release: Release | null; error: unknown } = { release: null, error: undefined };
  promise.then(
    (release) => (seen.release = release),
    (err: unknown) => (seen.error = err),
  );
  return seen;
}

describe('AdmissionQueue', () => {
  it('defaults: 4 downloads and 1 upload per principal; the 5th download waits for a release', async () => {
    const { queue } = setup();
    const releases = await Promise.all([1, 2, 3, 4].map(() => queue.acquire('p', 'download')));
    const fifth = track(queue.acquire('p', 'download'));
    const upload = await queue.acquire('p', 'upload');
    const secondUpload = track(queue.acquire('p', 'upload'));
    await settle();
    expect(fifth.release).toBeNull();
    expect(secondUpload.release).toBeNull();
    expect(queue.snapshot()).toEqual({
      downloads: { active: 4, queued: 1, rejected: 0 },
      uploads: { active: 1, queued: 1, rejected: 0 },
      closed: false,
    });
    releases[0]!();
    upload();
    await settle();
    expect(fifth.release).not.toBeNull();
    expect(secondUpload.release).not.toBeNull();
    expect(queue.snapshot().downloads).toEqual({ active: 4, queued: 0, rejected: 0 });
  });

  it('caps downloads per principal at min(4, maxDownloads) by default', async () => {
    const { queue } = setup({ maxDownloads: 2 });
    await queue.acquire('p', 'download');
    await queue.acquire('p', 'download');
    const third = track(queue.acquire('p', 'download'));
    await settle();
    expect(third.release).toBeNull();
  });

  it('a principal with a free slot passes one blocked on its own cap (no head-of-line blocking)', async () => {
    const { queue } = setup({ maxDownloads: 10, maxDownloadsPerPrincipal: 1 });
    await queue.acquire('a', 'download');
    const aWaits = track(queue.acquire('a', 'download'));
    const b = track(queue.acquire('b', 'download'));
    await settle();
    expect(aWaits.release).toBeNull();
    expect(b.release).not.toBeNull();
  });

  it('the process-wide download cap is handed out round-robin over principals whose own slot is free', async () => {
    const { queue } = setup({ maxDownloads: 2, maxDownloadsPerPrincipal: 2 });
    const first = await queue.acquire('a', 'download');
    const second = await queue.acquire('a', 'download');
    const order: string[] = [];
    const waiters = ['a', 'a', 'b', 'c'].map((principal) =>
      queue.acquire(principal, 'download').then((release) => (order.push(principal), release)),
    );
    await settle();
    expect(queue.snapshot().downloads).toEqual({ active: 2, queued: 4, rejected: 0 });
    first();
    await settle();
    second();
    await settle();
    expect(order).toEqual(['a', 'b']);
    for (const release of await Promise.all(waiters.slice(0, 1).concat(waiters.slice(2, 3)))) release();
    await settle();
    expect(order).toEqual(['a', 'b', 'c', 'a']);
  });

  it('a released slot goes to a waiting principal under its cap, never to one at its cap', async () => {
    const { queue } = setup({ maxDownloads: 2, maxDownloadsPerPrincipal: 1 });
    const a = await queue.acquire('a', 'download');
    const b = await queue.acquire('b', 'download');
    // a waits for its own cap (and the full process); c only for the process-wide cap.
    const aAgain = track(queue.acquire('a', 'download'));
    const c = track(queue.acquire('c', 'download'));
    await settle();
    expect(queue.snapshot().downloads).toEqual({ active: 2, queued: 2, rejected: 0 });
    b();
    await settle();
    expect(aAgain).toEqual({ release: null, error: undefined });
    expect(c.release).toBeTypeOf('function');
    expect(queue.snapshot().downloads).toEqual({ active: 2, queued: 1, rejected: 0 });
    // With only a waiting, a free process-wide slot still does not lift its own cap.
    c.release!();
    await settle();
    expect(aAgain.release).toBeNull();
    expect(queue.snapshot().downloads).toEqual({ active: 1, queued: 1, rejected: 0 });
    a();
    await settle();
    expect(aAgain.release).toBeTypeOf('function');
    expect(queue.snapshot().downloads).toEqual({ active: 1, queued: 0, rejected: 0 });
  });

  it('bounds the queue per principal and kind: beyond it, busy with retry-after', async () => {
    const { queue } = setup({ maxDownloadsPerPrincipal: 1, queueLength: 2 });
    await queue.acquire('p', 'download');
    const waiting = [track(queue.acquire('p', 'download')), track(queue.acquire('p', 'download'))];
    const refused = await queue.acquire('p', 'download').catch((err: PolicyError) => err);
    expect(refused).toMatchObject({ code: 'busy', headers: { 'retry-after': '1' } });
    // Another principal has its own queue.
    await queue.acquire('q', 'download');
    const otherWaits = track(queue.acquire('q', 'download'));
    await settle();
    expect(otherWaits).toEqual({ release: null, error: undefined });
    expect(waiting.every((w) => w.release === null && w.error === undefined)).toBe(true);
    expect(queue.snapshot().downloads).toEqual({ active: 2, queued: 3, rejected: 1 });
  });

  it('bounds the wait: after waitMs the request is busy, and counted', async () => {
    const { queue, timers } = setup({ waitMs: 30_000 });
    await queue.acquire('p', 'upload');
    const waiting = track(queue.acquire('p', 'upload'));
    await timers.advance(29_999);
    expect(waiting.error).toBeUndefined();
    await timers.advance(1);
    expect(waiting.error).toMatchObject({ code: 'busy', headers: { 'retry-after': '1' } });
    expect(queue.snapshot().uploads).toEqual({ active: 1, queued: 0, rejected: 1 });
    expect(timers.size).toBe(0);
  });

  it('with queueLength 0 or waitMs 0 nothing waits', async () => {
    for (const options of [{ queueLength: 0 }, { waitMs: 0 }]) {
      const { queue } = setup(options);
      await queue.acquire('p', 'upload');
      await expect(queue.acquire('p', 'upload')).rejects.toMatchObject({ code: 'busy' });
    }
  });

  it('an aborted wait leaves the queue without taking a slot', async () => {
    const { queue, timers } = setup();
    const release = await queue.acquire('p', 'upload');
    const controller = new AbortController();
    const waiting = queue.acquire('p', 'upload', controller.signal);
    controller.abort(new Error('client went away'));
    await expect(waiting).rejects.toThrow('client went away');
    expect(timers.size).toBe(0);
    release();
    expect(queue.snapshot().uploads).toEqual({ active: 0, queued: 0, rejected: 0 });
    await expect(queue.acquire('p', 'upload', AbortSignal.abort(new Error('gone')))).rejects.toThrow('gone');
  });

  it('release is idempotent', async () => {
    const { queue } = setup({ maxDownloadsPerPrincipal: 1 });
    const release = await queue.acquire('p', 'download');
    const other = await queue.acquire('q', 'download');
    release();
    release();
    expect(queue.snapshot().downloads.active).toBe(1);
    other();
    expect(queue.snapshot().downloads.active).toBe(0);
  });

  it('close(): waiting requests get unavailable, new ones too; held slots still release', async () => {
    const { queue, timers } = setup();
    const release = await queue.acquire('p', 'upload');
    const waiting = queue.acquire('p', 'upload');
    queue.close();
    await expect(waiting).rejects.toMatchObject({ code: 'unavailable' });
    await expect(queue.acquire('q', 'download')).rejects.toMatchObject({ code: 'unavailable' });
    expect(timers.size).toBe(0);
    release();
    expect(queue.snapshot()).toEqual({
      downloads: { active: 0, queued: 0, rejected: 0 },
      uploads: { active: 0, queued: 0, rejected: 0 },
      closed: true,
    });
  });

  it('fence(): waiting requests get lease_lost at once, new ones too, tryAcquire admits none; held slots still release', async () => {
    const { queue, timers } = setup({ maxDownloadsPerPrincipal: 1 });
    const download = await queue.acquire('p', 'download');
    const upload = await queue.acquire('p', 'upload');
    const waiting = [queue.acquire('p', 'download'), queue.acquire('p', 'upload')];
    queue.fence();
    for (const w of waiting) await expect(w).rejects.toMatchObject({ code: 'lease_lost' });
    await expect(queue.acquire('q', 'download')).rejects.toMatchObject({ code: 'lease_lost' });
    expect(queue.tryAcquire('q', 'download')).toBeUndefined();
    expect(timers.size).toBe(0);
    download();
    upload();
    expect(queue.snapshot()).toEqual({
      downloads: { active: 0, queued: 0, rejected: 0 },
      uploads: { active: 0, queued: 0, rejected: 0 },
      closed: false,
    });
    expect(queue.lanes).toBe(0);
  });

  it('the snapshot holds aggregates only, never a principal id', async () => {
    const { queue } = setup();
    await queue.acquire('principal-secret-id', 'download');
    expect(JSON.stringify(queue.snapshot())).not.toContain('principal-secret-id');
  });

  it('refuses nonsense options, naming the option', () => {
    expect(() => new AdmissionQueue({ maxDownloads: 0 })).toThrow('maxDownloads: expected an integer ≥ 1, got 0');
    expect(() => new AdmissionQueue({ maxDownloads: 1, queueLength: -1 })).toThrow(/^queueLength: /);
    expect(() => new AdmissionQueue({ maxDownloads: 1, waitMs: -1 })).toThrow(/^waitMs: /);
    expect(() => new AdmissionQueue({ maxDownloads: 1, maxDownloadsPerPrincipal: 0 })).toThrow(
      /^maxDownloadsPerPrincipal: /,
    );
    expect(() => new AdmissionQueue({ maxDownloads: 1, maxUploadsPerPrincipal: 0 })).toThrow(
      /^maxUploadsPerPrincipal: /,
    );
  });

  it('refuses an unknown kind without keeping anything', async () => {
    const { queue } = setup();
    const bogus = 'bogus' as TransferKind;
    expect(queue.tryAcquire('p', bogus)).toBeUndefined();
    await expect(queue.acquire('p', bogus)).rejects.toThrow(
      new TypeError('kind: expected "download" or "upload", got bogus'),
    );
    expect(queue.lanes).toBe(0);
  });

  it('busy refusals say why', async () => {
    const { queue, timers } = setup({ maxDownloadsPerPrincipal: 1, queueLength: 1, waitMs: 2500 });
    await queue.acquire('p', 'download');
    const waiting = track(queue.acquire('p', 'download'));
    await expect(queue.acquire('p', 'download')).rejects.toThrow(
      'More than 1 downloads of this principal are waiting.',
    );
    await timers.advance(2500);
    expect((waiting.error as Error).message).toBe('Waited 3 s for a download slot.');
  });

  it('one release frees one slot: it goes to one waiting lane, never past the process-wide cap', async () => {
    const { queue, timers } = setup({ maxDownloads: 2, maxDownloadsPerPrincipal: 2 });
    const first = await queue.acquire('a', 'download');
    await queue.acquire('a', 'download');
    const b = track(queue.acquire('b', 'download'));
    const c = track(queue.acquire('c', 'download'));
    await settle();
    expect(timers.size).toBe(2);
    first();
    await settle();
    expect([b.release !== null, c.release !== null]).toEqual([true, false]);
    expect(queue.snapshot().downloads).toEqual({ active: 2, queued: 1, rejected: 0 });
    // The admitted request's wait timer is gone; only c's is left.
    expect(timers.size).toBe(1);
  });

  it('a lane keeps its turn while more of it wait, and loses it when its last waiter is served', async () => {
    const { queue, timers } = setup({ maxDownloads: 10, maxDownloadsPerPrincipal: 1 });
    const a = await queue.acquire('a', 'download');
    const second = track(queue.acquire('a', 'download'));
    const third = track(queue.acquire('a', 'download'));
    const controller = new AbortController();
    const aborted = queue.acquire('a', 'download', controller.signal).catch(() => 'aborted');
    controller.abort(new Error('gone'));
    expect(await aborted).toBe('aborted');
    a();
    await settle();
    expect(second.release).toBeTypeOf('function');
    expect(third.release).toBeNull();
    second.release!();
    await settle();
    expect(third.release).toBeTypeOf('function');
    // Its queue is empty now: further releases have nobody to hand a slot to, and nothing breaks.
    third.release!();
    await queue.acquire('b', 'download');
    expect(queue.snapshot().downloads).toEqual({ active: 1, queued: 0, rejected: 0 });
    expect(timers.size).toBe(0);
  });

  it('an admitted request leaves no listener on its signal and no timer behind', async () => {
    const { queue, timers } = setup({ maxDownloadsPerPrincipal: 1 });
    const first = await queue.acquire('p', 'download');
    const controller = new AbortController();
    const waiting = track(queue.acquire('p', 'download', controller.signal));
    await settle();
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    first();
    await settle();
    expect(waiting.release).toBeTypeOf('function');
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    expect(timers.size).toBe(0);
  });

  it('keeps no lane for a principal refused or timed out with nothing active, and keeps a waiting one', async () => {
    const { queue, timers } = setup({ maxDownloads: 1, waitMs: 1000 });
    const held = await queue.acquire('a', 'download');
    const upload = await queue.acquire('u', 'upload');
    expect(queue.lanes).toBe(2);
    // The process-wide cap is full: a new principal's tryAcquire is refused and leaves nothing.
    expect(queue.tryAcquire('z', 'download')).toBeUndefined();
    expect(queue.lanes).toBe(2);
    // z waits with nothing active: its lane stays while it waits, even through a refused tryAcquire.
    const waiting = queue.acquire('z', 'download').catch(() => 'busy');
    expect(queue.tryAcquire('z', 'download')).toBeUndefined();
    expect(queue.lanes).toBe(3);
    await timers.advance(1000);
    expect(await waiting).toBe('busy');
    expect(queue.lanes).toBe(2);
    // With waiting off, a refused new principal leaves nothing either.
    const { queue: noWait } = setup({ maxDownloads: 1, waitMs: 0 });
    await noWait.acquire('a', 'download');
    await expect(noWait.acquire('z', 'download')).rejects.toMatchObject({ code: 'busy' });
    expect(noWait.lanes).toBe(1);
    held();
    upload();
    expect(queue.lanes).toBe(0);
  });

  it('forgets a principal once it has nothing active or waiting, whatever the way out', async () => {
    const { queue, timers } = setup({ maxDownloadsPerPrincipal: 1, waitMs: 1000 });
    // Admitted and released.
    (await queue.acquire('a', 'download'))();
    queue.tryAcquire('b', 'upload')!();
    expect(queue.lanes).toBe(0);
    // Refused: tryAcquire while held, a full queue, waiting not allowed.
    const held = await queue.acquire('c', 'download');
    expect(queue.tryAcquire('d', 'download')).toBeTypeOf('function');
    expect(queue.lanes).toBe(2);
    held();
    expect(queue.lanes).toBe(1);
    const { queue: noWait } = setup({ waitMs: 0, maxDownloadsPerPrincipal: 1 });
    const only = await noWait.acquire('e', 'download');
    await expect(noWait.acquire('f', 'download')).resolves.toBeTypeOf('function');
    only();
    await expect(noWait.acquire('f', 'download')).rejects.toMatchObject({ code: 'busy' });
    expect(noWait.lanes).toBe(1);
    // A wait that times out, one that is aborted, and a waiter served after its principal released.
    const q = queue;
    const g = await q.acquire('g', 'download');
    const timedOut = q.acquire('g', 'download').catch(() => 'busy');
    await timers.advance(1000);
    expect(await timedOut).toBe('busy');
    const controller = new AbortController();
    const aborted = q.acquire('g', 'download', controller.signal).catch(() => 'aborted');
    controller.abort(new Error('gone'));
    expect(await aborted).toBe('aborted');
    const served = track(q.acquire('g', 'download'));
    g();
    await settle();
    served.release!();
    expect(q.tryAcquire('g', 'download')).toBeTypeOf('function');
    expect(q.lanes).toBe(2); // d's download and g's
  });

  it('tryAcquire admits only when a slot is free and nobody of the lane waits, and changes nothing otherwise', async () => {
    const { queue } = setup({ maxDownloadsPerPrincipal: 2 });
    const first = queue.tryAcquire('p', 'download');
    const second = queue.tryAcquire('p', 'download');
    expect(first).toBeTypeOf('function');
    expect(second).toBeTypeOf('function');
    expect(queue.tryAcquire('p', 'download')).toBeUndefined();
    expect(queue.snapshot().downloads).toEqual({ active: 2, queued: 0, rejected: 0 });
    const waiting = track(queue.acquire('p', 'download'));
    first!();
    await settle();
    // The freed slot went to the waiting request, not to a later tryAcquire.
    expect(waiting.release).toBeTypeOf('function');
    expect(queue.tryAcquire('p', 'download')).toBeUndefined();
    expect(queue.tryAcquire('q', 'download')).toBeTypeOf('function');
    queue.close();
    expect(queue.tryAcquire('r', 'download')).toBeUndefined();
  });

  it('spare: the slots a principal could take at once under both caps; none while anyone of the kind waits, or once closed or fenced', async () => {
    const { queue } = setup({ maxDownloads: 5, maxDownloadsPerPrincipal: 3, maxUploadsPerPrincipal: 2 });
    expect(queue.spare('p', 'download')).toBe(3);
    const p: Release[] = [queue.tryAcquire('p', 'download')!, queue.tryAcquire('p', 'download')!];
    expect(queue.spare('p', 'download')).toBe(1);
    // The process-wide cap binds before the principal's own.
    const q = [queue.tryAcquire('q', 'download')!, queue.tryAcquire('q', 'download')!];
    expect(queue.spare('q', 'download')).toBe(1);
    expect(queue.spare('r', 'download')).toBe(1);
    const last = queue.tryAcquire('r', 'download')!;
    expect(queue.spare('p', 'download')).toBe(0);
    expect(queue.spare('p', 'upload')).toBe(2);
    // Someone of the kind waits: a slot that frees is theirs, none is spare, whoever asks.
    const waiting = track(queue.acquire('s', 'download'));
    last();
    await settle();
    expect(waiting.release).toBeTypeOf('function');
    const next = track(queue.acquire('t', 'download'));
    p[0]!();
    expect(queue.spare('p', 'download')).toBe(0);
    await settle();
    expect(next.release).toBeTypeOf('function');
    for (const release of [p[1]!, ...q, waiting.release!, next.release!]) release();
    expect(queue.spare('p', 'download')).toBe(3);
    // p waits on its own cap: q could pass it, yet nothing is spare while a request waits.
    const own = [1, 2, 3].map(() => queue.tryAcquire('p', 'download')!);
    const fourth = track(queue.acquire('p', 'download'));
    expect(queue.spare('q', 'download')).toBe(0);
    own[0]!();
    await settle();
    expect(queue.spare('q', 'download')).toBe(2);
    for (const release of [...own, fourth.release!]) release();
    queue.fence();
    expect(queue.spare('p', 'download')).toBe(0);
    expect(setup().queue.spare('p', 'upload')).toBe(1);
    // An unknown kind has no slots, as tryAcquire admits none of it.
    expect(setup().queue.spare('p', 'sideways' as TransferKind)).toBe(0);
    const closed = setup().queue;
    closed.close();
    expect(closed.spare('p', 'upload')).toBe(0);
  });
});
