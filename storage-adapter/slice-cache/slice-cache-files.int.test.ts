/**
 * ARKVORY_CACHE_MAX_FILES through the real cache on a real directory: tiny slices far under the
 * byte bound still evict the least recently used once the file bound is reached; slices left on disk
 * beyond lower bounds (a smaller ARKVORY_CACHE_MAX_BYTES, more workers sharing it) are evicted at open.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir } from '../../test/harness/index.ts';
import type { SliceDigests } from '../slice-digests.ts';
import type { BlobReader } from '../store.ts';
import { SliceCache } from './slice-cache.ts';

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A blob of a few bytes: one slice, whose file is one inode. */
function tinyBlob(i: number) {
  const body = Buffer.from(`tiny blob ${i}`);
  const sha256 = createHash('sha256').update(body).digest('hex');
  const digests: SliceDigests = {
    sizeBytes: body.length,
    sliceBytes: 65536,
    digests: createHash('sha256').update(body).digest(),
  };
  const origin = async (): Promise<BlobReader> => ({
    sizeBytes: body.length,
    async read(buffer, offset, length, position) {
      const n = body.copy(buffer, offset, position, position + length);
      return { bytesRead: n };
    },
    async close() {},
  });
  return { sha256, digests, origin };
}

describe('SliceCache: the file bound', () => {
  it('keeps at most maxFiles slice files, evicting the least recently used, with the byte bound far away', async () => {
    dir = await makeTempDir('arkvory-slice-files-');
    const cache = await SliceCache.open({
      dir,
      maxBytes: 2 ** 30,
      maxFiles: 3,
      minFreeBytes: 0,
      log: { info() {}, warn() {} },
    });
    const blobs = [0, 1, 2, 3].map(tinyBlob);
    try {
      for (const blob of blobs) {
        const source = cache.acquire(blob.sha256, blob.digests, 0, blob.origin);
        if (source.kind === 'fill') await source.fill.done;
        cache.release(source);
        for (let i = 0; i < 500 && !cache.holds(blob.sha256, blob.digests, 0); i++)
          await new Promise((r) => setTimeout(r, 10));
        expect(cache.holds(blob.sha256, blob.digests, 0)).toBe(true);
      }
      expect(cache.stats).toMatchObject({ heldSlices: 3, evictions: 1 });
      expect(cache.holds(blobs[0]!.sha256, blobs[0]!.digests, 0)).toBe(false);
      const files = (await readdir(path.join(dir, 'slices'), { recursive: true, withFileTypes: true })).filter((e) =>
        e.isFile(),
      );
      expect(files.map((e) => e.name.slice(0, 64)).sort()).toEqual(
        blobs
          .slice(1)
          .map((b) => b.sha256)
          .sort(),
      );
    } finally {
      cache.close();
    }
  });

  it('evicts at open what is held beyond the bounds it opens with', async () => {
    dir = await makeTempDir('arkvory-slice-files-');
    const slices = ['a', 'b', 'c', 'd'].map((c) => path.join(dir!, 'slices', `${c}${c}`, `${c.repeat(64)}-65536-0`));
    for (const file of slices) {
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, Buffer.alloc(65536));
    }
    const onDisk = async () =>
      (await readdir(path.join(dir!, 'slices'), { recursive: true, withFileTypes: true })).filter((e) => e.isFile())
        .length;
    const open = (maxBytes: number, maxFiles: number) =>
      SliceCache.open({ dir: dir!, maxBytes, maxFiles, minFreeBytes: 0, log: { info() {}, warn() {} } });
    const byBytes = await open(3 * 65536, 100);
    byBytes.close();
    expect(byBytes.stats).toMatchObject({ heldSlices: 3, heldBytes: 3 * 65536, evictions: 1 });
    expect(await onDisk()).toBe(3);
    const byFiles = await open(2 ** 30, 1);
    byFiles.close();
    expect(byFiles.stats).toMatchObject({ heldSlices: 1, heldBytes: 65536, evictions: 2 });
    expect(await onDisk()).toBe(1);
  });
});
