/**
 * The bound on the slice cache's fill memory: slices it cannot keep on disk stay in memory while
 * their readers send them, so a cache disk that refuses every write and many slow clients must
 * not hold more than `maxMemoryBytes` of them, whatever the number of downloads.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { heldSources, openTestSliceCache, until } from '../../test/support/slice-cache-tests.ts';
import { digestsOf as digestsAt } from '../../test/support/slice-digests.ts';
import type { ByteRange } from '../range.ts';
import type { ArtifactStore, BlobReader } from '../store.ts';
import { withSliceCache } from './cached-store.ts';
import type { DigestDirectory } from './digest-directory.ts';
import type { SliceCache } from './slice-cache.ts';

const SLICE = 64 * 1024;
const BOUND = 4 * SLICE;

/** A cache whose every slice file write fails (a full disk): every fill is relayed from memory. */
function fullDiskCache(): Promise<SliceCache> {
  return openTestSliceCache(SLICE, {
    maxMemoryBytes: BOUND,
    syncFile: async () => {
      throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
    },
  });
}

/** Fill sources acquired and not yet released: the slices held in memory (nothing is on disk). */
function heldFills(cache: SliceCache) {
  return heldSources(cache, (s) => s.kind === 'fill' && s.started);
}

/**
 * Blobs by name (the sha256 stands for the name: the cache only keys on it); the readers' waits for
 * fill memory are measured on `timers` and its clock, moved by hand.
 */
function storeOf(
  cache: SliceCache,
  blobs: Map<string, Buffer>,
  storageTimeoutMs: number,
  timers: ManualTimers,
  clock: ManualClock,
): ArtifactStore {
  const read = (sha: string, range: ByteRange): BlobReader => {
    const blob = blobs.get(sha)!;
    return {
      sizeBytes: blob.length,
      async read(buffer, offset, length, position) {
        const n = Math.max(0, Math.min(length, range.end + 1 - position));
        blob.copy(buffer, offset, position, position + n);
        return { bytesRead: n };
      },
      async close() {},
    };
  };
  const inner = { openBlob: async (sha: string, ranges: readonly ByteRange[]) => read(sha, ranges[0]!) };
  const digests = { get: async (sha: string) => digestsAt(blobs.get(sha)!, SLICE) } as unknown as DigestDirectory;
  return withSliceCache(inner as unknown as ArtifactStore, cache, digests, {
    readaheadSlices: 4,
    storageTimeoutMs,
    clock,
    timers,
  });
}

const shaOf = (i: number) => i.toString(16).padStart(64, '0');

function manualTime() {
  const clock = new ManualClock();
  return { clock, timers: new ManualTimers(clock) };
}

/**
 * A download holding the whole bound (its slice and the readahead that fits), and a second one of the
 * same blob that read what is held and now waits for room for its next slice; `settled` says whether
 * that read ended yet.
 */
async function waitingForRoom(storageTimeoutMs: number, client?: AbortSignal) {
  const cache = await fullDiskCache();
  const { clock, timers } = manualTime();
  const blobs = new Map([[shaOf(1), randomBytes(8 * SLICE)] as const]);
  const store = storeOf(cache, blobs, storageTimeoutMs, timers, clock);
  const whole = [{ start: 0, end: 8 * SLICE - 1 }];
  const first = await store.openBlob(shaOf(1), whole);
  const one = Buffer.alloc(1);
  await first.read(one, 0, 1, 0);
  expect(cache.stats.memoryBytes).toBe(BOUND);
  // A second one shares the slices in memory at no cost, up to the end of what is held…
  const second = await store.openBlob(shaOf(1), whole);
  const head = Buffer.alloc(BOUND);
  for (let at = 0; at < head.length; ) at += (await second.read(head, at, head.length - at, at)).bytesRead;
  expect(head.equals(blobs.get(shaOf(1))!.subarray(0, BOUND))).toBe(true);
  // …then waits for room for its next slice: its bound is the one timer set.
  let settled = false;
  const waiting = second.read(one, 0, 1, BOUND, client);
  waiting.then(
    () => (settled = true),
    () => (settled = true),
  );
  await until(() => timers.size === 1);
  return { cache, timers, first, second, waiting, settled: () => settled };
}

describe('slices held in memory by a cache that cannot write', () => {
  it('stay within the bound however many slow downloads run; past it a download is answered 503 with Retry-After', async () => {
    const cache = await fullDiskCache();
    const fills = heldFills(cache);
    const blobs = new Map(Array.from({ length: 8 }, (_, i) => [shaOf(i), randomBytes(8 * SLICE)] as const));
    const { clock, timers } = manualTime();
    const store = storeOf(cache, blobs, 200, timers, clock);
    // Eight slow clients: each opens its download, reads one byte and stalls.
    const one = Buffer.alloc(1);
    const opening = Promise.allSettled(
      [...blobs.keys()].map(async (sha) => {
        const reader = await store.openBlob(sha, [{ start: 0, end: 8 * SLICE - 1 }]);
        await reader.read(one, 0, 1, 0);
        return reader;
      }),
    );
    // Seven wait for room, each until its bound.
    await until(() => timers.size === 7);
    await timers.advance(200);
    const outcomes = await opening;
    await until(() => cache.stats.fillsInFlight === 0);
    expect(cache.stats.relayedFills).toBeGreaterThan(0);
    expect(fills.peak * SLICE).toBeLessThanOrEqual(BOUND);
    expect(cache.stats.memoryBytes).toBeLessThanOrEqual(BOUND);
    const served = outcomes.filter((o) => o.status === 'fulfilled').map((o) => o.value);
    const refused = outcomes.filter((o) => o.status === 'rejected').map((o) => o.reason);
    expect(served).toHaveLength(1);
    for (const err of refused)
      expect(err).toMatchObject({ code: 'slice_cache_memory_full', headers: { 'Retry-After': '5' } });
    // The served one goes on to its end, with no readahead past the bound, every byte right.
    const [reader] = served as [BlobReader];
    const blob = blobs.get(shaOf(0))!;
    const rest = Buffer.alloc(blob.length);
    for (let at = 0; at < rest.length; ) at += (await reader.read(rest, at, rest.length - at, at)).bytesRead;
    expect(rest.equals(blob)).toBe(true);
    expect(fills.peak * SLICE).toBeLessThanOrEqual(BOUND);
    await reader.close();
    await until(() => cache.stats.fillsInFlight === 0);
    expect(cache.stats.memoryBytes).toBe(0);
  });

  it('a reader waiting for room holds nothing and stops waiting when its client leaves', async () => {
    // A long wait: only the client's leaving ends it here.
    const client = new AbortController();
    const { cache, timers, first, second, waiting, settled } = await waitingForRoom(30_000, client.signal);
    await timers.advance(29_999);
    expect(settled()).toBe(false);
    expect(cache.stats.memoryBytes).toBe(BOUND);
    client.abort(new Error('client gone'));
    await expect(waiting).rejects.toThrow('client gone');
    // Nothing of the wait is left: its timer went with it.
    expect(timers.size).toBe(0);
    await second.close();
    await first.close();
    await until(() => cache.stats.fillsInFlight === 0);
    expect(cache.stats.memoryBytes).toBe(0);
  });

  it('a reader waiting for room waits the store timeout, not a moment less, then its response is cut with slice_cache_memory_full', async () => {
    const { cache, timers, first, second, waiting, settled } = await waitingForRoom(5_000);
    await timers.advance(4_999);
    expect(settled()).toBe(false);
    await timers.advance(1);
    await expect(waiting).rejects.toMatchObject({
      code: 'slice_cache_memory_full',
      headers: { 'Retry-After': '5' },
    });
    await second.close();
    await first.close();
    await until(() => cache.stats.fillsInFlight === 0);
    expect(cache.stats.memoryBytes).toBe(0);
  });
});
