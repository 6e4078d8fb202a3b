/**
 * What a coherence sweep sees (proxy/content/caches.ts): it asks which blobs the cache holds, keeps
 * those whose digests are still recorded and removes the rest. A blob whose slices are still being
 * filled (fetched and verified, its file not yet written) counts as held, so a sweep that runs
 * while its file is written stops it from being indexed after the sweep.
 */
import { createHash, randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { makeTempDir } from '../../test/harness/index.ts';
import type { SliceDigests } from '../slice-digests.ts';
import type { BlobReader } from '../store.ts';
import { SliceCache } from './slice-cache.ts';

const SLICE = 64 * 1024;
const sha = 'b'.repeat(64);
const blob = randomBytes(SLICE);
const digests: SliceDigests = {
  sizeBytes: SLICE,
  sliceBytes: SLICE,
  digests: createHash('sha256').update(blob).digest(),
};
const origin = async (): Promise<BlobReader> => ({
  sizeBytes: SLICE,
  async read(buffer, offset, length, position) {
    const n = Math.min(length, SLICE - position);
    blob.copy(buffer, offset, position, position + n);
    return { bytesRead: n };
  },
  async close() {},
});

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('SliceCache: the blobs a sweep sees', () => {
  it('a blob whose only slice is being written counts as held; removing it then keeps the file from being indexed', async () => {
    dir = await makeTempDir('arkvory-slice-sweep-');
    // The slice file's sync waits until the test lets it go: the fill is verified, its file not done.
    let letGo!: () => void;
    const synced = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    let syncing = false;
    const cache = await SliceCache.open({
      dir,
      maxBytes: 16 * SLICE,
      maxFiles: 2 ** 32,
      minFreeBytes: 0,
      log: { info() {}, warn() {} },
      syncFile: async (handle) => {
        syncing = true;
        await synced;
        await handle.sync();
      },
    });
    try {
      const filled = cache.acquire(sha, digests, 0, origin);
      if (filled.kind !== 'fill') throw new Error('expected a fill');
      await filled.fill.done;
      cache.release(filled);
      await vi.waitFor(() => expect(syncing).toBe(true));
      expect(cache.holds(sha, digests, 0)).toBe(false);

      expect(cache.heldBlobs()).toEqual([sha]);
      expect(await cache.removeBlobs(cache.heldBlobs())).toBe(0);
      letGo();
      await vi.waitFor(() => expect(cache.stats.fillsInFlight).toBe(0));
      expect(cache.holds(sha, digests, 0)).toBe(false);
      expect(cache.heldBlobs()).toEqual([]);
      expect(cache.stats.heldSlices).toBe(0);
    } finally {
      letGo();
      cache.close();
    }
  });

  it('a blob with slices on disk and none being filled is held once', async () => {
    dir = await makeTempDir('arkvory-slice-sweep-');
    const cache = await SliceCache.open({
      dir,
      maxBytes: 16 * SLICE,
      maxFiles: 2 ** 32,
      minFreeBytes: 0,
      log: { info() {}, warn() {} },
    });
    try {
      const filled = cache.acquire(sha, digests, 0, origin);
      if (filled.kind !== 'fill') throw new Error('expected a fill');
      await filled.fill.done;
      cache.release(filled);
      await vi.waitFor(() => expect(cache.holds(sha, digests, 0) && cache.stats.fillsInFlight === 0).toBe(true));
      expect(cache.heldBlobs()).toEqual([sha]);
      expect(await cache.removeBlobs(cache.heldBlobs())).toBe(1);
      expect(cache.heldBlobs()).toEqual([]);
    } finally {
      cache.close();
    }
  });
});
