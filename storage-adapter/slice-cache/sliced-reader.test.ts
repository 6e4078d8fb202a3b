import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import type { ByteRange } from '../range.ts';
import { heldSources, openTestSliceCache, until } from '../../test/support/slice-cache-tests.ts';
import { digestsOf as digestsAt } from '../../test/support/slice-digests.ts';
import type { SliceDigests } from '../slice-digests.ts';
import type { ArtifactStore, BlobReader } from '../store.ts';
import { withSliceCache } from './cached-store.ts';
import type { DigestDirectory } from './digest-directory.ts';
import type { OriginRead, SliceCache, SliceSource } from './slice-cache.ts';

const SLICE = 64 * 1024;
const SHA = 'c'.repeat(64);

const digestsOf = (blob: Buffer): SliceDigests => digestsAt(blob, SLICE);

/** Ranged reads of `served()`, each open recorded. */
function originOf(served: () => Buffer) {
  const opened: ByteRange[] = [];
  const read: OriginRead = async (range) => {
    opened.push(range);
    return {
      sizeBytes: served().length,
      async read(buffer, offset, length, position) {
        const n = Math.max(0, Math.min(length, range.end + 1 - position));
        served().copy(buffer, offset, position, position + n);
        return { bytesRead: n };
      },
      async close() {},
    } satisfies BlobReader;
  };
  return { read, opened };
}

function openCache(): Promise<SliceCache> {
  return openTestSliceCache(SLICE);
}

/** The cache with its sources counted: acquired and not yet released, by kind. */
function counted(cache: SliceCache) {
  return heldSources(cache);
}

function storeOver(cache: SliceCache, blob: Buffer, readaheadSlices: number): ArtifactStore {
  const d = digestsOf(blob);
  const origin = originOf(() => blob);
  const inner = { openBlob: (_sha: string, ranges: readonly ByteRange[]) => origin.read(ranges[0]!) };
  const digests = { get: async () => d } as unknown as DigestDirectory;
  return withSliceCache(inner as unknown as ArtifactStore, cache, digests, {
    readaheadSlices,
    storageTimeoutMs: 30_000,
  });
}

describe('a read through the slice cache', () => {
  it('of ranges in descending order holds its window, not a slice per range read', async () => {
    const cache = await openCache();
    const blob = randomBytes(20 * SLICE);
    const sources = counted(cache);
    const ranges = Array.from({ length: 20 }, (_, i) => ({ start: (19 - i) * SLICE, end: (19 - i) * SLICE }));
    const reader = await storeOver(cache, blob, 2).openBlob(SHA, ranges);
    const one = Buffer.alloc(1);
    for (const range of ranges) {
      expect((await reader.read(one, 0, 1, range.start)).bytesRead).toBe(1);
      expect(one[0]).toBe(blob[range.start]);
    }
    // The window: the slice being read and the readahead (nothing ahead within a one-byte range).
    expect(sources.peak).toBeLessThanOrEqual(3);
    await reader.close();
  });

  it('by a slow client gives back the fills it holds once their slices are on disk', async () => {
    const cache = await openCache();
    const blob = randomBytes(5 * SLICE);
    const sources = counted(cache);
    const reader = await storeOver(cache, blob, 4).openBlob(SHA, [{ start: 0, end: blob.length - 1 }]);
    const one = Buffer.alloc(1);
    await reader.read(one, 0, 1, 0);
    expect(sources.held('fill')).toBe(5);
    // A fill is over once its file is written and indexed: then all five are held.
    await until(() => cache.stats.fillsInFlight === 0);
    expect(cache.stats.heldSlices).toBe(5);
    // The client reads its next byte much later: by then every slice of its window is a file.
    await reader.read(one, 0, 1, 1);
    expect(one[0]).toBe(blob[1]);
    // Its window is pinned files now (a descriptor each at most), no fill's memory.
    expect(sources.held('fill')).toBe(0);
    expect(sources.held('disk')).toBe(5);
    const rest = Buffer.alloc(blob.length - 2);
    for (let at = 0; at < rest.length; ) at += (await reader.read(rest, at, rest.length - at, 2 + at)).bytesRead;
    expect(rest.equals(blob.subarray(2))).toBe(true);
    await reader.close();
  });
});

describe('acquiring slices', () => {
  it('past the record of a blob fails, and leaves no fill behind for the next reader to join', async () => {
    const cache = await openCache();
    const blob = randomBytes(2 * SLICE);
    const d = digestsOf(blob);
    const origin = originOf(() => blob);
    expect(() => cache.acquireRun(SHA, d, 0, 2, origin.read)).toThrow(RangeError);
    await until(() => cache.stats.fillsInFlight === 0);
    const next = cache.acquire(SHA, d, 0, origin.read);
    if (next.kind !== 'fill') throw new Error('expected a fill');
    expect(next.started).toBe(true);
    await next.fill.done;
    expect(next.fill.state).toBe('verified');
    cache.release(next);
  });

  it('a slice that failed its digest is not fetched again once nobody reads it', async () => {
    const cache = await openCache();
    const blob = randomBytes(2 * SLICE);
    const d = digestsOf(blob);
    const damaged = Buffer.from(blob);
    damaged[5] = (damaged[5]! + 1) % 256;
    const origin = originOf(() => damaged);
    const [first, second] = cache.acquireRun(SHA, d, 0, 1, origin.read) as [SliceSource, SliceSource];
    // The reader wants slice 1 only: slice 0 is fetched in the same run but nobody waits for it.
    cache.release(first);
    if (second.kind !== 'fill') throw new Error('expected a fill');
    await second.fill.done;
    await until(() => cache.stats.fillsInFlight === 0);
    expect(second.fill.state).toBe('verified');
    expect(cache.stats.digestFailures.origin).toBe(1);
    expect(origin.opened).toEqual([{ start: 0, end: 2 * SLICE - 1 }]);
    expect(cache.stats.abandonedFills).toBe(1);
    cache.release(second);
  });
});

describe('a small response through the slice cache', () => {
  it('waits for its slice check before its status line only as long as the store may take, then goes on as a larger one', async () => {
    const cache = await openCache();
    const blob = randomBytes(2 * SLICE);
    const d = digestsOf(blob);
    // A store trickling the slice: its first half at once, the rest only once let go (each piece
    // within the store's silence bound, so nothing times out).
    let letGo!: () => void;
    const held = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    const inner = {
      openBlob: async (_sha: string, [range]: readonly ByteRange[]) =>
        ({
          sizeBytes: blob.length,
          async read(buffer, offset, length, position) {
            if (position >= range!.start + SLICE / 2) await held;
            const n = Math.max(0, Math.min(length, SLICE / 4, range!.end + 1 - position));
            blob.copy(buffer, offset, position, position + n);
            return { bytesRead: n };
          },
          async close() {},
        }) satisfies BlobReader,
    };
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const store = withSliceCache(
      inner as unknown as ArtifactStore,
      cache,
      { get: async () => d } as unknown as DigestDirectory,
      { readaheadSlices: 0, storageTimeoutMs: 50, clock, timers },
    );
    let opened = false;
    const opening = store.openBlob(SHA, [{ start: 10, end: 19 }]).finally(() => {
      opened = true;
    });
    // It waits for the check on its one timer: not a moment less than the bound, not once more.
    // The store lets go whatever the outcome: the cache is closed only once its fills ended.
    try {
      await until(() => timers.size === 1);
      await timers.advance(49);
      expect(opened).toBe(false);
      await timers.advance(1);
      expect(opened).toBe(true);
    } finally {
      letGo();
    }
    const reader = await opening;
    // Its bytes are still withheld until the slice is verified: the last one comes after the check.
    const out = Buffer.alloc(10);
    for (let at = 0; at < 10; ) at += (await reader.read(out, at, 10 - at, 10 + at)).bytesRead;
    expect(out.equals(blob.subarray(10, 20))).toBe(true);
    await reader.close();
  });
});
