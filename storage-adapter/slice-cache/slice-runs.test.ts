import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ByteRange } from '../range.ts';
import { type SliceDigests, sliceCount } from '../slice-digests.ts';
import type { BlobReader } from '../store.ts';
import { type Fill, fillCursor, readFillInto } from './fill.ts';
import { type OriginRead, SliceCache, type SliceSource } from './slice-cache.ts';

const SLICE = 64 * 1024;
const quiet = { info() {}, warn() {} };

function digestsOf(blob: Buffer): SliceDigests {
  const parts: Buffer[] = [];
  for (let i = 0; i < sliceCount(blob.length, SLICE); i++)
    parts.push(
      createHash('sha256')
        .update(blob.subarray(i * SLICE, (i + 1) * SLICE))
        .digest(),
    );
  return { sizeBytes: blob.length, sliceBytes: SLICE, digests: Buffer.concat(parts) };
}

/**
 * The origin as the cache sees it: ranged reads of `served` (the bytes the store holds), each
 * recorded; lent chunks of an odd size (so chunks cross slice boundaries) or plain reads.
 */
function origin(served: () => Buffer, options: { lends: boolean; failAt?: number }) {
  const opened: ByteRange[] = [];
  const read: OriginRead = async (range) => {
    opened.push(range);
    const check = (position: number) => {
      if (options.failAt !== undefined && position >= options.failAt)
        throw Object.assign(new Error('the store went away'), { code: 'upstream_unreachable' });
    };
    const reader: BlobReader = {
      sizeBytes: served().length,
      async read(buffer, offset, length, position) {
        check(position);
        const n = Math.min(length, 10_000, range.end + 1 - position);
        served().copy(buffer, offset, position, position + n);
        return { bytesRead: n };
      },
      async close() {},
    };
    if (options.lends)
      reader.chunks = async function* (r) {
        for (let position = r.start; position <= r.end; position += 10_000) {
          check(position);
          yield Buffer.from(served().subarray(position, Math.min(position + 10_000, r.end + 1)));
        }
      };
    return reader;
  };
  return { read, opened };
}

async function bytesOf(fill: Fill): Promise<Buffer> {
  const out = Buffer.alloc(fill.sliceLength);
  const cursor = fillCursor(fill);
  for (let at = 0; at < out.length; )
    at += await readFillInto(fill, cursor, at, out.length - 1, out, at, out.length - at);
  return out;
}

const opened: Array<{ dir: string; cache: SliceCache }> = [];
afterEach(async () => {
  for (const { dir, cache } of opened.splice(0)) {
    // Verified slices are written behind their fills: done once no fill is left.
    while (cache.stats.fillsInFlight > 0) await new Promise((r) => setTimeout(r, 5));
    cache.close();
    await rm(dir, { recursive: true, force: true });
  }
});

async function openCache(): Promise<SliceCache> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-slice-runs-'));
  const cache = await SliceCache.open({ dir, maxBytes: 64 * SLICE, minFreeBytes: 0, log: quiet });
  opened.push({ dir, cache });
  return cache;
}

const fillOf = (s: SliceSource) => {
  if (s.kind !== 'fill') throw new Error('expected a fill');
  return s.fill;
};

describe('a run of slices filled from one origin read', () => {
  for (const lends of [true, false])
    it(`fetches consecutive missing slices with one ranged read, split exactly (${lends ? 'lent chunks' : 'reads'})`, async () => {
      const cache = await openCache();
      const blob = randomBytes(4 * SLICE + 123);
      const d = digestsOf(blob);
      const o = origin(() => blob, { lends });
      const sources = cache.acquireRun('a'.repeat(64), d, 1, 4, o.read);
      expect(o.opened).toEqual([{ start: SLICE, end: blob.length - 1 }]);
      for (const [i, s] of sources.entries())
        expect((await bytesOf(fillOf(s))).equals(blob.subarray((i + 1) * SLICE, (i + 2) * SLICE))).toBe(true);
      for (const s of sources) cache.release(s);
      expect(cache.stats.originBytes).toBe(blob.length - SLICE);
      // Slices held (filling, or on disk by now) are not fetched again: only slice 0 is.
      await Promise.all(sources.map((s) => fillOf(s).done));
      const again = cache.acquireRun('a'.repeat(64), d, 0, 4, o.read);
      expect(o.opened.slice(1)).toEqual([{ start: 0, end: SLICE - 1 }]);
      for (const s of again) cache.release(s);
    });

  it('a slice that fails its digest is fetched once more on its own; the run goes on after it', async () => {
    const cache = await openCache();
    const blob = randomBytes(3 * SLICE);
    const d = digestsOf(blob);
    const damaged = Buffer.from(blob);
    damaged.writeUInt8(damaged.readUInt8(SLICE + 5) ^ 1, SLICE + 5);
    const o = origin(() => blob, { lends: false });
    const first = origin(() => damaged, { lends: false });
    // The run reads the damaged bytes; the single retry the right ones.
    const read: OriginRead = (range) => (range.start === 0 ? first.read(range) : o.read(range));
    const sources = cache.acquireRun('b'.repeat(64), d, 0, 2, read);
    // Read once settled (a reader that had bytes of the failed attempt is cut: fill.test.ts).
    await Promise.all(sources.map((s) => fillOf(s).done));
    const bytes = await Promise.all(sources.map((s) => bytesOf(fillOf(s))));
    expect(Buffer.concat(bytes).equals(blob)).toBe(true);
    expect(first.opened).toEqual([{ start: 0, end: 3 * SLICE - 1 }]);
    expect(o.opened).toEqual([{ start: SLICE, end: 2 * SLICE - 1 }]);
    expect(cache.stats.digestFailures.origin).toBe(1);
    for (const s of sources) cache.release(s);
  });

  it('an origin failure mid-run fails the slice being filled and the rest, never the verified ones', async () => {
    const cache = await openCache();
    const blob = randomBytes(4 * SLICE);
    const d = digestsOf(blob);
    const o = origin(() => blob, { lends: true, failAt: 2 * SLICE + 20_000 });
    const sources = cache.acquireRun('c'.repeat(64), d, 0, 3, o.read);
    const fills = sources.map(fillOf);
    await Promise.all(fills.map((f) => f.done));
    expect(fills.map((f) => f.state)).toEqual(['verified', 'verified', 'failed', 'failed']);
    expect(fills[3]!.error).toBe(fills[2]!.error);
    await expect(bytesOf(fills[2]!)).rejects.toThrow('the store went away');
    for (const s of sources) cache.release(s);
  });
});
