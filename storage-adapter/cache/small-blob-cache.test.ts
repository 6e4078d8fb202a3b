import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import type { ArtifactStore, BlobReader } from '../store.ts';
import { bufferReader, SmallBlobCache, withSmallBlobCache } from './small-blob-cache.ts';

describe('SmallBlobCache', () => {
  it('holds at most maxBytes under a stream of distinct blobs and never an object above maxObjectBytes', () => {
    const cache = new SmallBlobCache({ maxBytes: 64 * 1024, maxObjectBytes: 8 * 1024 });
    for (let i = 0; i < 500; i++) {
      const sha = i.toString(16).padStart(64, '0');
      cache.set(sha, randomBytes(1 + ((i * 977) % (10 * 1024))));
      expect(cache.stats().bytes).toBeLessThanOrEqual(64 * 1024);
    }
    const big = 'f'.repeat(64);
    cache.set(big, randomBytes(8 * 1024 + 1));
    expect(cache.get(big)).toBeUndefined();
    expect(cache.stats()).toMatchObject({ cache: 'blob', misses: 1, hits: 0 });
    expect(cache.stats().entries).toBeGreaterThan(5);
  });

  it('a reader over cached bytes reads, streams one view per range, and ends at the size', async () => {
    const bytes = randomBytes(1000);
    const reader = bufferReader(bytes);
    const into = Buffer.alloc(300);
    expect((await reader.read(into, 0, 300, 900)).bytesRead).toBe(100);
    expect(into.subarray(0, 100)).toEqual(bytes.subarray(900));
    expect((await reader.read(into, 0, 10, 1000)).bytesRead).toBe(0);
    const chunks: Buffer[] = [];
    for await (const c of reader.chunks!({ start: 10, end: 19 }, new AbortController().signal)) chunks.push(c);
    expect(Buffer.concat(chunks)).toEqual(bytes.subarray(10, 20));
    expect(reader.bytes).toBe(bytes);
  });

  it('cachedBlob answers a held blob at once with one shared reader, and a miss with undefined (no store call)', async () => {
    const bytes = randomBytes(100);
    const sha = 'a'.repeat(64);
    const cache = new SmallBlobCache({ maxBytes: 1024, maxObjectBytes: 512 });
    let opens = 0;
    const inner = {
      kind: 'fs',
      openBlob: async () => {
        opens++;
        return bufferReader(bytes);
      },
    } as unknown as ArtifactStore;
    const store = withSmallBlobCache(inner, cache);
    expect(store.cachedBlob!(sha)).toBeUndefined();
    expect(opens).toBe(0);
    cache.set(sha, bytes);
    const first = store.cachedBlob!(sha);
    expect(first?.bytes).toBe(bytes);
    expect(store.cachedBlob!(sha)).toBe(first);
    expect(await store.openBlob(sha)).toBe(first);
    expect(opens).toBe(0);
  });

  it('reads a blob whole for the cache only as long as the store may take, then relays it uncached', async () => {
    const bytes = randomBytes(64 * 1024);
    const sha = createHash('sha256').update(bytes).digest('hex');
    const cache = new SmallBlobCache({ maxBytes: 1024 * 1024, maxObjectBytes: 256 * 1024 });
    // A store trickling the blob: its first half at once, then 1 KiB every 30 ms (each piece well
    // within its silence bound, so nothing times out): a second for the whole. Its time passes on
    // the clock the cache measures its bound on, so nothing waits for real.
    const clock = new ManualClock();
    let opens = 0;
    const inner = {
      kind: 'http',
      openBlob: async () => {
        opens++;
        return {
          sizeBytes: bytes.length,
          async read(buffer: Buffer, offset: number, length: number, position: number) {
            const slow = position >= bytes.length / 2;
            if (slow) clock.advance(30);
            const n = Math.max(0, Math.min(length, slow ? 1024 : 4096, bytes.length - position));
            bytes.copy(buffer, offset, position, position + n);
            return { bytesRead: n };
          },
          async close() {},
        };
      },
    } as unknown as ArtifactStore;
    const store = withSmallBlobCache(inner, cache, { readWholeMs: 50, clock });
    const started = clock.monotonicMs();
    // The first request reads the blob for the cache; the second joins that read.
    const readers = await Promise.all([store.openBlob(sha), store.openBlob(sha)]);
    // Both answer at the first check past the bound (two slow pieces: 60 ms), not once the trickle ends.
    expect(clock.monotonicMs() - started).toBe(60);
    const readAll = async (reader: BlobReader) => {
      const out = Buffer.alloc(bytes.length);
      for (let at = 0; at < out.length; ) at += (await reader.read(out, at, out.length - at, at)).bytesRead;
      await reader.close();
      return out;
    };
    for (const out of await Promise.all(readers.map(readAll))) expect(out.equals(bytes)).toBe(true);
    // Not kept: its bytes were relayed, never checked whole.
    expect(cache.stats().entries).toBe(0);
    expect(opens).toBe(2);
  });
});
