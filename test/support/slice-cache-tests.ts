/**
 * Slice caches for the slice cache's own tests: each in a directory of its own, closed once its
 * fills have ended and removed after every test, and a count of the sources its readers hold.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { vi } from 'vitest';
import { onTestEnd } from './file-end.ts';
import { SliceCache, type SliceCacheOptions, type SliceSource } from '../../storage-adapter/slice-cache/index.ts';

/**
 * Until `holds()`: verified slices are written behind their fills one at a time, at the disk's pace
 * (fsync each), which on a loaded machine can take longer than vi.waitFor's 1 s. No deadline of its
 * own: the test's (or hook's) timeout bounds a fill that never finishes.
 */
export async function until(holds: () => boolean): Promise<void> {
  while (!holds()) await new Promise((resolve) => setTimeout(resolve, 5));
}

const dirs: string[] = [];
const caches: SliceCache[] = [];
onTestEnd(async () => {
  for (const cache of caches.splice(0)) {
    await until(() => cache.stats.fillsInFlight === 0);
    cache.close();
  }
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/** A cache of 256 slices of `sliceBytes` in a fresh directory, with `options` over those. */
export async function openTestSliceCache(
  sliceBytes: number,
  options: Partial<SliceCacheOptions> = {},
): Promise<SliceCache> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-slice-cache-test-'));
  dirs.push(dir);
  const cache = await SliceCache.open({
    dir,
    maxBytes: 256 * sliceBytes,
    maxFiles: 2 ** 32,
    minFreeBytes: 0,
    log: { info() {}, warn() {} },
    ...options,
  });
  caches.push(cache);
  return cache;
}

/** The sources `counts` of the cache's readers, acquired and not yet released, and the most held at once. */
export function heldSources(cache: SliceCache, counts: (source: SliceSource) => boolean = () => true) {
  const out = new Set<SliceSource>();
  let peak = 0;
  const acquireRun = cache.acquireRun.bind(cache);
  vi.spyOn(cache, 'acquireRun').mockImplementation((...args) => {
    const sources = acquireRun(...args);
    for (const s of sources) if (counts(s)) out.add(s);
    peak = Math.max(peak, out.size);
    return sources;
  });
  const release = cache.release.bind(cache);
  vi.spyOn(cache, 'release').mockImplementation((source) => {
    out.delete(source);
    release(source);
  });
  return {
    get peak() {
      return peak;
    },
    held: (kind: SliceSource['kind']) => [...out].filter((s) => s.kind === kind).length,
  };
}
