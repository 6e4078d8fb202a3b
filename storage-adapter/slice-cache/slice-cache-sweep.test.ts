/**
 * What a coherence sweep sees (proxy/content/caches.ts): it asks which blobs the cache holds, keeps
 * those whose digests are still recorded and removes the rest. A blob whose slices are still being
 * filled (fetched and verified, its file not yet written) counts as held, so a sweep that runs
 * while its file is written stops it from being indexed after the sweep.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { openTestSliceCache, until } from '../../test/support/slice-cache-tests.ts';
import { digestsOf, originOf } from '../../test/support/slice-digests.ts';
import type { SliceCache } from './slice-cache.ts';

const SLICE = 64 * 1024;
const sha = 'b'.repeat(64);
const blob = randomBytes(SLICE);
const digests = digestsOf(blob, SLICE);
const origin = originOf(blob);

/** Reads the blob's one slice through the cache, which fills it from `origin`. */
async function readThrough(cache: SliceCache): Promise<void> {
  const filled = cache.acquire(sha, digests, 0, origin);
  if (filled.kind !== 'fill') throw new Error('expected a fill');
  await filled.fill.done;
  cache.release(filled);
}

describe('SliceCache: the blobs a sweep sees', () => {
  it('a blob whose only slice is being written counts as held; removing it then keeps the file from being indexed', async () => {
    // The slice file's sync waits until the test lets it go: the fill is verified, its file not done.
    let letGo!: () => void;
    const synced = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    let syncing = false;
    const cache = await openTestSliceCache(SLICE, {
      syncFile: async (handle) => {
        syncing = true;
        await synced;
        await handle.sync();
      },
    });
    try {
      await readThrough(cache);
      await until(() => syncing);
      expect(cache.holds(sha, digests, 0)).toBe(false);

      expect(cache.heldBlobs()).toEqual([sha]);
      expect(await cache.removeBlobs(cache.heldBlobs())).toBe(0);
      letGo();
      await until(() => cache.stats.fillsInFlight === 0);
      expect(cache.holds(sha, digests, 0)).toBe(false);
      expect(cache.heldBlobs()).toEqual([]);
      expect(cache.stats.heldSlices).toBe(0);
    } finally {
      letGo();
    }
  });

  it('a blob with slices on disk and none being filled is held once', async () => {
    const cache = await openTestSliceCache(SLICE);
    await readThrough(cache);
    await until(() => cache.holds(sha, digests, 0) && cache.stats.fillsInFlight === 0);
    expect(cache.heldBlobs()).toEqual([sha]);
    expect(await cache.removeBlobs(cache.heldBlobs())).toBe(1);
    expect(cache.heldBlobs()).toEqual([]);
  });
});
