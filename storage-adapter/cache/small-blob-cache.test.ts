import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ArtifactStore } from '../store.ts';
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
});
