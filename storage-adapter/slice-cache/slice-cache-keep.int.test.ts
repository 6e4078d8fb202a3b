/**
 * A slice larger than the write-behind bound (64 MiB; ARKVORY_CACHE_SLICE_BYTES allows up to
 * 256 MiB) is still kept when nothing else waits to be written: a second read comes from disk.
 */
import { createHash } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir } from '../../test/harness/index.ts';
import type { BlobReader } from '../store.ts';
import { SliceCache } from './slice-cache.ts';

const MiB = 1024 * 1024;
let dir: string | undefined;

afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('SliceCache: a slice over the write-behind bound', () => {
  it('a 65 MiB slice is kept on its first read and served from disk on the second', async () => {
    const slice = 65 * MiB;
    const digests = {
      sizeBytes: slice,
      sliceBytes: slice,
      digests: createHash('sha256').update(Buffer.alloc(slice)).digest(),
    };
    const sha256 = 'cd'.repeat(32);
    dir = await makeTempDir('arkvory-slice-keep-');
    const cache = await SliceCache.open({
      dir,
      maxBytes: 2 ** 40,
      maxFiles: 2 ** 32,
      minFreeBytes: 0,
      log: { info() {}, warn() {} },
    });
    let originReads = 0;
    // The store's side of a fill: zeros, as the digest says.
    const origin = async (): Promise<BlobReader> => {
      originReads++;
      return {
        sizeBytes: slice,
        async read(buffer, offset, length) {
          buffer.fill(0, offset, offset + length);
          return { bytesRead: length };
        },
        async close() {},
      };
    };
    try {
      const first = cache.acquire(sha256, digests, 0, origin);
      expect(first.kind).toBe('fill');
      if (first.kind === 'fill') await first.fill.done;
      cache.release(first);
      for (let i = 0; i < 500 && !cache.holds(sha256, digests, 0); i++) await new Promise((r) => setTimeout(r, 10));
      expect(cache.holds(sha256, digests, 0)).toBe(true);
      const second = cache.acquire(sha256, digests, 0, origin);
      expect(second.kind).toBe('disk');
      cache.release(second);
      expect(originReads).toBe(1);
    } finally {
      cache.close();
    }
  });
});
