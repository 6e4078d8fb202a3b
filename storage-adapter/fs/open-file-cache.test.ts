/** The open-file cache on real files in a temp directory; time is a manual clock. */
import { mkdtemp, open, readlink, rm, writeFile, readdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OpenFileCache, type OpenFile } from './open-file-cache.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-ofc-'));
  for (let i = 0; i < 20; i++) await writeFile(path.join(dir, `f${i}`), Buffer.alloc(i + 1, i));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/**
 * Descriptors of this process that point into the temp directory. A descriptor the cache lets go is
 * closed asynchronously (FileHandle.close() on libuv's pool), so checks that one is gone poll this
 * (`settled`) rather than read it once: CI, busy with the whole suite, once read it mid-close.
 */
const settled = (check: () => Promise<number>) => expect.poll(check, { timeout: 2000, interval: 20 });

async function openInDir(): Promise<number> {
  let n = 0;
  for (const fd of await readdir('/proc/self/fd')) {
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
    if (target.startsWith(dir + path.sep)) n++;
  }
  return n;
}

function opener(name: string, counter: { opens: number }): () => Promise<OpenFile> {
  return async () => {
    counter.opens++;
    const handle = await open(path.join(dir, name), 'r');
    return { handle, sizeBytes: (await handle.stat()).size };
  };
}

class Clock {
  now = 0;
  monotonicMs(): number {
    return this.now;
  }
}

describe('OpenFileCache', () => {
  it('reuses one descriptor, shares concurrent opens, and reads stay correct', async () => {
    const cache = new OpenFileCache({ maxEntries: 4, idleMs: 1000, clock: new Clock() });
    const counter = { opens: 0 };
    const leases = await Promise.all(Array.from({ length: 8 }, () => cache.acquire('f5', opener('f5', counter))));
    expect(counter.opens).toBe(1);
    const buffer = Buffer.alloc(6);
    const { bytesRead } = await leases[0]!.file.handle.read(buffer, 0, 6, 0);
    expect(buffer.subarray(0, bytesRead)).toEqual(Buffer.alloc(6, 5));
    for (const lease of leases) await lease.release();
    await (await cache.acquire('f5', opener('f5', counter))).release();
    expect(counter.opens).toBe(1);
    expect(cache.stats()).toMatchObject({ cache: 'open_file', hits: 1, misses: 8, entries: 1, bytes: 6 });
    await cache.close();
    expect(await openInDir()).toBe(0);
  });

  it('holds its bound under distinct keys, and an evicted descriptor in use closes on release', async () => {
    const cache = new OpenFileCache({ maxEntries: 3, idleMs: 1000, clock: new Clock() });
    const counter = { opens: 0 };
    const held = await cache.acquire('f0', opener('f0', counter));
    for (let i = 1; i < 20; i++) {
      const lease = await cache.acquire(`f${i}`, opener(`f${i}`, counter));
      await lease.release();
      expect(cache.stats().entries).toBeLessThanOrEqual(3);
      // The held one (evicted long ago) plus at most the 3 cached.
      await settled(openInDir).toBeLessThanOrEqual(4);
    }
    const buffer = Buffer.alloc(1);
    expect((await held.file.handle.read(buffer, 0, 1, 0)).bytesRead).toBe(1);
    expect(await openInDir()).toBe(4);
    await held.release();
    await settled(openInDir).toBe(3);
    await cache.close();
    expect(await openInDir()).toBe(0);
  });

  it('closes descriptors idle for idleMs, never one in use', async () => {
    const clock = new Clock();
    const cache = new OpenFileCache({ maxEntries: 10, idleMs: 1000, clock });
    const counter = { opens: 0 };
    await (await cache.acquire('f1', opener('f1', counter))).release();
    const busy = await cache.acquire('f2', opener('f2', counter));
    clock.now = 999;
    cache.sweep();
    expect(cache.stats().entries).toBe(2);
    clock.now = 5000;
    cache.sweep();
    expect(cache.stats().entries).toBe(1);
    await busy.release();
    clock.now = 5999;
    cache.sweep();
    expect(cache.stats().entries).toBe(1);
    clock.now = 6000;
    cache.sweep();
    expect(cache.stats().entries).toBe(0);
    await settled(openInDir).toBe(0);
    await (await cache.acquire('f1', opener('f1', counter))).release();
    expect(counter.opens).toBe(3);
    await cache.close();
  });

  it('drops on forget or recheck a descriptor whose name leads elsewhere; one in use closes on release, one whose check fails is kept', async () => {
    const cache = new OpenFileCache({ maxEntries: 10, idleMs: 1000, clock: new Clock() });
    const counter = { opens: 0 };
    const current = new Map<string, () => Promise<boolean>>([
      ['f4', async () => true],
      ['f5', async () => false],
      ['f6', () => Promise.reject(new Error('EIO'))],
    ]);
    const checked = (name: string) => async () => ({
      ...(await opener(name, counter)()),
      isCurrent: current.get(name),
    });
    for (const name of ['f4', 'f6', 'f7']) await (await cache.acquire(name, checked(name))).release();
    const held = await cache.acquire('f5', checked('f5'));
    expect(await openInDir()).toBe(4);
    await cache.recheck();
    // f5 no longer the file under its name: out of the table, but open for the reader holding it.
    expect(cache.stats().entries).toBe(3);
    expect(await openInDir()).toBe(4);
    await held.release();
    await settled(openInDir).toBe(3);
    cache.forget('f7');
    await settled(openInDir).toBe(2);
    for (const name of ['f4', 'f5', 'f6', 'f7']) await (await cache.acquire(name, checked(name))).release();
    // f4 and f6 were kept (hits); f5 and f7 opened again.
    expect(counter.opens).toBe(6);
    await cache.close();
    expect(await openInDir()).toBe(0);
  });

  it('an open in flight when its name is forgotten serves the reader that asked, and is not kept for later ones', async () => {
    const cache = new OpenFileCache({ maxEntries: 4, idleMs: 1000, clock: new Clock() });
    const counter = { opens: 0 };
    let opened!: () => void;
    const gate = new Promise<void>((resolve) => {
      opened = resolve;
    });
    const open = opener('f7', counter);
    // The old file is opened, then an upload puts other bytes under the name and forgets it.
    const first = cache.acquire('f7', async () => {
      const file = await open();
      await gate;
      return file;
    });
    await expect.poll(() => counter.opens).toBe(1);
    cache.forget('f7');
    opened();
    const lease = await first;
    const later = await cache.acquire('f7', open);
    expect(counter.opens).toBe(2);
    expect(later.file.handle).not.toBe(lease.file.handle);
    await later.release();
    await lease.release();
    expect(cache.stats().entries).toBe(1);
    await cache.close();
    await settled(openInDir).toBe(0);
  });

  it('with 0 entries it still works and leaves nothing open', async () => {
    const cache = new OpenFileCache({ maxEntries: 0, idleMs: 1000, clock: new Clock() });
    const counter = { opens: 0 };
    const a = await cache.acquire('f3', opener('f3', counter));
    await a.release();
    await settled(openInDir).toBe(0);
    expect(cache.stats().entries).toBe(0);
  });

  it('a failed open is not cached and the next acquire tries again', async () => {
    const cache = new OpenFileCache({ maxEntries: 4, idleMs: 1000, clock: new Clock() });
    const counter = { opens: 0 };
    await expect(cache.acquire('missing', opener('missing', counter))).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(cache.acquire('missing', opener('missing', counter))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(counter.opens).toBe(2);
    expect(cache.stats().entries).toBe(0);
  });
});
