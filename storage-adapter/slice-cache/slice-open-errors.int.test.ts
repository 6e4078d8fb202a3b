/**
 * Slice files that cannot be opened, on a real filesystem with `open` failing on demand (a module
 * mock: this file has a module graph of its own, vitest.config.ts's `own-graph` project, so the
 * cache is loaded with the mock and the mock reaches no other file).
 */
import { randomBytes } from 'node:crypto';
import * as fsPromises from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it, vi } from 'vitest';
import type { SliceDigests } from '../slice-digests.ts';
import { digestsOf, originOf } from '../../test/support/slice-digests.ts';
import { SliceCache } from './slice-cache.ts';

/**
 * Opening a slice file for reading: counted; when `code` is set it fails with that errno code (as
 * out of descriptors would), after `before` ran (what happens meanwhile elsewhere).
 */
const failing: { code: string | undefined; before?: (() => Promise<void>) | undefined; opens: number } = {
  code: undefined,
  opens: 0,
};

vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...actual,
    open: async (file: string, flags: string, ...rest: unknown[]) => {
      if (flags === 'r' && String(file).includes(`${path.sep}slices${path.sep}`)) {
        failing.opens++;
        if (failing.code) {
          const { code, before } = failing;
          failing.before = undefined;
          await before?.();
          throw Object.assign(new Error(`${code}: open '${file}'`), { code });
        }
      }
      return (actual.open as (...args: unknown[]) => Promise<fsPromises.FileHandle>)(file, flags, ...rest);
    },
  };
});

const SLICE = 64 * 1024;
let dir: string | undefined;
afterEach(async () => {
  failing.code = undefined;
  failing.before = undefined;
  failing.opens = 0;
  if (dir) await fsPromises.rm(dir, { recursive: true, force: true });
});

const sha = 'a'.repeat(64);
const blob = randomBytes(SLICE);
const d: SliceDigests = digestsOf(blob, SLICE);
const origin = originOf(blob);

async function openCache(at?: string): Promise<SliceCache> {
  dir = at ?? (await fsPromises.mkdtemp(path.join(os.tmpdir(), 'arkvory-slice-open-')));
  return SliceCache.open({
    dir,
    maxBytes: 16 * SLICE,
    maxFiles: 2 ** 32,
    minFreeBytes: 0,
    log: { info() {}, warn() {} },
  });
}

/** The blob's one slice filled from the origin and kept on disk. */
async function fill(cache: SliceCache): Promise<void> {
  const filled = cache.acquire(sha, d, 0, origin);
  if (filled.kind !== 'fill') throw new Error('expected a fill');
  await filled.fill.done;
  cache.release(filled);
  await vi.waitFor(() => expect(cache.holds(sha, d, 0) && cache.stats.fillsInFlight === 0).toBe(true));
}

function diskSource(cache: SliceCache) {
  const source = cache.acquire(sha, d, 0, origin);
  if (source.kind !== 'disk') throw new Error('expected a disk slice');
  return source;
}

it('a slice file that cannot be opened for want of descriptors stays indexed and counted; its open fails (its reader then takes it from the store)', async () => {
  const cache = await openCache();
  await fill(cache);

  failing.code = 'EMFILE';
  const source = cache.acquire(sha, d, 0, origin);
  if (source.kind !== 'disk') throw new Error('expected a disk slice');
  await expect(cache.openDisk(source, undefined)).rejects.toThrow('EMFILE');
  cache.release(source);
  expect(cache.holds(sha, d, 0)).toBe(true);
  expect(cache.stats.heldBytes).toBe(SLICE);

  failing.code = undefined;
  const again = cache.acquire(sha, d, 0, origin);
  if (again.kind !== 'disk') throw new Error('expected a disk slice');
  const opened = await cache.openDisk(again, undefined);
  if (!opened) throw new Error('expected the slice');
  const { buffer: bytes } = await opened.read(Buffer.alloc(SLICE), 0, SLICE, 0);
  expect(bytes.equals(blob)).toBe(true);
  cache.release(again);
  cache.close();
});

it('after a restart, concurrent first readers of a slice check it once and share its descriptor', async () => {
  const first = await openCache();
  await fill(first);
  first.close();
  const cache = await openCache(dir);
  const sources = Array.from({ length: 20 }, () => diskSource(cache));
  failing.opens = 0;
  const handles = await Promise.all(sources.map((s) => cache.openDisk(s, undefined)));
  expect(failing.opens).toBe(1);
  expect(new Set(handles).size).toBe(1);
  const { buffer } = await handles[0]!.read(Buffer.alloc(SLICE), 0, SLICE, 0);
  expect(buffer.equals(blob)).toBe(true);
  for (const s of sources) cache.release(s);
  cache.close();
});

it('a reader whose slice was removed and fetched again meanwhile leaves the new copy alone', async () => {
  const cache = await openCache();
  await fill(cache);
  const late = diskSource(cache);
  // While the late reader opens its (old) slice's file, the blob is purged and read again.
  failing.code = 'ENOENT';
  failing.before = async () => {
    await cache.removeBlobs([sha]);
    failing.code = undefined;
    await fill(cache);
  };
  expect(await cache.openDisk(late, undefined)).toBeUndefined();
  cache.release(late);
  expect(cache.holds(sha, d, 0)).toBe(true);
  expect(cache.stats.heldSlices).toBe(1);
  const fresh = diskSource(cache);
  expect(await cache.openDisk(fresh, undefined)).toBeDefined();
  cache.release(fresh);
  cache.close();
});
