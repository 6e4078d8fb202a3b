import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ByteRange } from '../range.ts';
import { digestsOf as digestsAt } from '../../test/support/slice-digests.ts';
import type { SliceDigests } from '../slice-digests.ts';
import type { BlobReader } from '../store.ts';
import { type Fill, fillCursor, readFillInto } from './fill.ts';
import { type OriginRead, SliceCache, type SliceSource } from './slice-cache.ts';

const SLICE = 64 * 1024;
const quiet = { info() {}, warn() {} };

const digestsOf = (blob: Buffer): SliceDigests => digestsAt(blob, SLICE);

/**
 * The origin as the cache sees it: ranged reads of `served` (the bytes the store holds), each
 * recorded; lent chunks of an odd size (so chunks cross slice boundaries) or plain reads. From
 * `failAt` on every read fails; `cutFirstAt` stops only the first read there, with an error or by
 * ending its answer early.
 */
function origin(
  served: () => Buffer,
  options: { lends: boolean; failAt?: number; cutFirstAt?: { at: number; how: 'error' | 'end' } },
) {
  const opened: ByteRange[] = [];
  const read: OriginRead = async (range) => {
    opened.push(range);
    const cut = opened.length === 1 ? options.cutFirstAt : undefined;
    /** Whether the answer ends before `position`; throws where it fails. */
    const ended = (position: number): boolean => {
      if (options.failAt !== undefined && position >= options.failAt)
        throw Object.assign(new Error('the store went away'), { code: 'upstream_unreachable' });
      if (cut === undefined || position < cut.at) return false;
      if (cut.how === 'end') return true;
      throw Object.assign(new Error('the connection was reset'), { code: 'ECONNRESET' });
    };
    const reader: BlobReader = {
      sizeBytes: served().length,
      async read(buffer, offset, length, position) {
        if (ended(position)) return { bytesRead: 0 };
        const n = Math.min(length, 10_000, range.end + 1 - position);
        served().copy(buffer, offset, position, position + n);
        return { bytesRead: n };
      },
      async close() {},
    };
    if (options.lends)
      reader.chunks = async function* (r) {
        for (let position = r.start; position <= r.end; position += 10_000) {
          if (ended(position)) return;
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
  const cache = await SliceCache.open({ dir, maxBytes: 64 * SLICE, maxFiles: 2 ** 32, minFreeBytes: 0, log: quiet });
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

  it('an origin that keeps failing mid-run is read on twice, then fails the slice being filled and the rest, never the verified ones', async () => {
    const cache = await openCache();
    const blob = randomBytes(4 * SLICE);
    const d = digestsOf(blob);
    const failAt = 2 * SLICE + 20_000;
    const o = origin(() => blob, { lends: true, failAt });
    const sources = cache.acquireRun('c'.repeat(64), d, 0, 3, o.read);
    const fills = sources.map(fillOf);
    await Promise.all(fills.map((f) => f.done));
    expect(fills.map((f) => f.state)).toEqual(['verified', 'verified', 'failed', 'failed']);
    expect(fills[3]!.error).toBe(fills[2]!.error);
    await expect(bytesOf(fills[2]!)).rejects.toThrow('the store went away');
    // Each read on starts at the first byte the slice lacks (chunks of 10,000 from the span's start).
    const stopped = { start: Math.ceil(failAt / 10_000) * 10_000, end: 4 * SLICE - 1 };
    expect(o.opened).toEqual([{ start: 0, end: 4 * SLICE - 1 }, stopped, stopped]);
    expect(cache.stats.originResumes).toBe(2);
    for (const s of sources) cache.release(s);
  });

  for (const how of ['error', 'end'] as const)
    for (const lends of [true, false])
      it(`an origin answer that stops mid-slice once (${how === 'error' ? 'a reset' : 'ended early'}, ${lends ? 'lent chunks' : 'reads'}) is read on from its next byte: every slice verified, byte-exact`, async () => {
        const cache = await openCache();
        const blob = randomBytes(4 * SLICE);
        const d = digestsOf(blob);
        const at = 2 * SLICE + 20_000;
        const o = origin(() => blob, { lends, cutFirstAt: { at, how } });
        const sources = cache.acquireRun('d'.repeat(64), d, 0, 3, o.read);
        const fills = sources.map(fillOf);
        const bytes = await Promise.all(fills.map(bytesOf));
        expect(fills.map((f) => f.state)).toEqual(['verified', 'verified', 'verified', 'verified']);
        expect(Buffer.concat(bytes).equals(blob)).toBe(true);
        // Lent chunks stop at a chunk's start; reads where the slice's next read began.
        const from = lends ? Math.ceil(at / 10_000) * 10_000 : 2 * SLICE + Math.ceil(20_000 / 10_000) * 10_000;
        expect(o.opened).toEqual([
          { start: 0, end: 4 * SLICE - 1 },
          { start: from, end: 4 * SLICE - 1 },
        ]);
        expect(cache.stats.originResumes).toBe(1);
        expect(cache.stats.digestFailures.origin).toBe(0);
        for (const s of sources) cache.release(s);
      });
});

/** An origin whose pieces (SLICE / 4 bytes each) come one per `next()`; records closes. */
function pacedOrigin(blob: Buffer) {
  const state = { closed: 0, served: 0, wake: undefined as (() => void) | undefined };
  const read: OriginRead = async (range) => ({
    sizeBytes: blob.length,
    async read(buffer, offset, length, position) {
      await new Promise<void>((resolve) => (state.wake = resolve));
      const n = Math.min(length, SLICE / 4, range.end + 1 - position);
      blob.copy(buffer, offset, position, position + n);
      state.served += n;
      return { bytesRead: n };
    },
    async close() {
      state.closed++;
    },
  });
  const next = async () => {
    while (!state.wake) await new Promise((r) => setTimeout(r, 1));
    const wake = state.wake;
    state.wake = undefined;
    wake();
    await new Promise((r) => setTimeout(r, 1));
  };
  return { read, state, next };
}

describe('fills nobody reads any more', () => {
  it('stop when their last reader lets go: the store read is closed at once and nobody joins them', async () => {
    const cache = await openCache();
    const blob = randomBytes(4 * SLICE);
    const d = digestsOf(blob);
    const o = pacedOrigin(blob);
    const sources = cache.acquireRun('d'.repeat(64), d, 0, 3, o.read);
    await o.next();
    expect(o.state.served).toBe(SLICE / 4);
    for (const s of sources) cache.release(s);
    // Not at the store's next piece, which a silent store sends only at its timeout.
    await vi.waitFor(() => expect(o.state.closed).toBe(1));
    await o.next();
    // The piece that arrived after the readers left was the last one taken.
    expect(o.state.served).toBe(SLICE / 2);
    await vi.waitFor(() => expect(cache.stats.fillsInFlight).toBe(0));
    expect(o.state.closed).toBe(1);
    expect(cache.stats.abandonedFills).toBe(4);
    expect(sources.map((s) => fillOf(s).state)).toEqual(['failed', 'failed', 'failed', 'failed']);
    expect(cache.holds('d'.repeat(64), d, 0)).toBe(false);
    // A new reader starts a fill of its own, not one that was stopped.
    const again = cache.acquire('d'.repeat(64), d, 0, origin(() => blob, { lends: false }).read);
    expect((await bytesOf(fillOf(again))).equals(blob.subarray(0, SLICE))).toBe(true);
    cache.release(again);
  });

  it('go on while another reader holds one of the run; the rest of the run after it stops', async () => {
    const cache = await openCache();
    const blob = randomBytes(4 * SLICE);
    const d = digestsOf(blob);
    const o = pacedOrigin(blob);
    const first = cache.acquireRun('e'.repeat(64), d, 0, 3, o.read);
    // A second reader joins slice 1 only, then the first reader leaves.
    const joined = cache.acquire('e'.repeat(64), d, 1, o.read);
    expect(fillOf(joined)).toBe(fillOf(first[1]!));
    for (const s of first) cache.release(s);
    const read = bytesOf(fillOf(joined));
    for (let piece = 0; piece < 8; piece++) await o.next();
    expect((await read).equals(blob.subarray(SLICE, 2 * SLICE))).toBe(true);
    await vi.waitFor(() => expect(cache.stats.fillsInFlight).toBe(0));
    expect(first.map((s) => fillOf(s).state)).toEqual(['verified', 'verified', 'failed', 'failed']);
    expect(cache.stats.abandonedFills).toBe(2);
    // Slice 2 was never asked of the store.
    expect(o.state.served).toBe(2 * SLICE);
    expect(o.state.closed).toBe(1);
    cache.release(joined);
  });
});

describe('a kept descriptor of a slice whose file changed', () => {
  it('stays open for a reader reading through it; it closes with the last reader', async () => {
    const cache = await openCache();
    const blob = randomBytes(SLICE);
    const d = digestsOf(blob);
    const sha = 'f'.repeat(64);
    const filled = cache.acquire(sha, d, 0, origin(() => blob, { lends: false }).read);
    await fillOf(filled).done;
    cache.release(filled);
    await vi.waitFor(() => expect(cache.holds(sha, d, 0) && cache.stats.fillsInFlight === 0).toBe(true));
    const checked = cache.acquire(sha, d, 0, origin(() => blob, { lends: false }).read);
    if (checked.kind !== 'disk') throw new Error('expected a disk slice');
    await cache.openDisk(checked, undefined);
    cache.release(checked);
    // Reader a reads through the kept descriptor; the file's ctime then moves (same bytes).
    const a = cache.acquire(sha, d, 0, origin(() => blob, { lends: false }).read);
    const b = cache.acquire(sha, d, 0, origin(() => blob, { lends: false }).read);
    if (a.kind !== 'disk' || b.kind !== 'disk') throw new Error('expected disk slices');
    const kept = await cache.openDisk(a, undefined);
    if (!kept) throw new Error('expected the kept descriptor');
    await utimes(a.file, new Date(), new Date(Date.now() - 60_000));
    // Reader b finds the change: checked again from a fresh descriptor.
    const fresh = await cache.openDisk(b, undefined);
    if (!fresh) throw new Error('expected the slice, checked again');
    expect(fresh).not.toBe(kept);
    const again = Buffer.alloc(SLICE);
    expect((await fresh.read(again, 0, SLICE, 0)).bytesRead).toBe(SLICE);
    expect(again.equals(blob)).toBe(true);
    const out = Buffer.alloc(SLICE);
    expect((await kept.read(out, 0, SLICE, 0)).bytesRead).toBe(SLICE);
    expect(out.equals(blob)).toBe(true);
    cache.release(b);
    expect(kept.fd).toBeGreaterThanOrEqual(0);
    cache.release(a);
    await vi.waitFor(() => expect(kept.fd).toBe(-1));
  });
});
