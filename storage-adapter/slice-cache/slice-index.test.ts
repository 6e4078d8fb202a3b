import { describe, expect, it } from 'vitest';
import { diskBytes, excessOver, type IndexedSlice, SliceIndex } from './slice-index.ts';

/** One filesystem block: sizes below are whole blocks, so what is counted is what is asked. */
const B = 4096;

function slice(key: string, bytes: number, sha256 = 'a'.repeat(64)): IndexedSlice {
  return { key, sha256, bytes, signature: undefined, pins: 0, handle: undefined };
}

function indexOf(...slices: IndexedSlice[]): SliceIndex {
  const index = new SliceIndex();
  for (const s of slices) index.add(s);
  return index;
}

const keys = (slices: readonly IndexedSlice[] | undefined) => slices?.map((s) => s.key);

describe('SliceIndex', () => {
  it('counts the bytes of what it holds; adding a key again replaces it', () => {
    const index = indexOf(slice('a', 10 * B), slice('b', 20 * B));
    expect([index.size, index.bytes]).toEqual([2, 30 * B]);
    index.add(slice('a', 5 * B));
    expect([index.size, index.bytes]).toEqual([2, 25 * B]);
    expect(index.get('a')?.bytes).toBe(5 * B);
    expect(index.remove('b')?.key).toBe('b');
    expect([index.size, index.bytes]).toEqual([1, 5 * B]);
    expect(index.remove('b')).toBeUndefined();
    expect([index.size, index.bytes]).toEqual([1, 5 * B]);
    expect(index.get('b')).toBeUndefined();
  });

  it('offers the least recently used slices first, a read making one the newest', () => {
    const a = slice('a', 10 * B);
    const index = indexOf(a, slice('b', 10 * B), slice('c', 10 * B));
    expect(keys(index.victims(15 * B))).toEqual(['a', 'b']);
    index.touch(a);
    expect(keys(index.victims(15 * B))).toEqual(['b', 'c']);
    expect(keys(index.all())).toEqual(['b', 'c', 'a']);
    // A re-added slice is the newest too.
    index.add(slice('b', 10 * B));
    expect(keys(index.victims(10 * B))).toEqual(['c']);
  });

  it('stops at the first slices that free enough, exactly enough included', () => {
    const index = indexOf(slice('a', 10 * B), slice('b', 10 * B), slice('c', 10 * B));
    expect(keys(index.victims(10 * B))).toEqual(['a']);
    expect(keys(index.victims(11 * B))).toEqual(['a', 'b']);
    expect(keys(index.victims(30 * B))).toEqual(['a', 'b', 'c']);
  });

  it('never offers a pinned slice, and offers nothing when the rest cannot free enough', () => {
    const pinned = { ...slice('a', 100 * B), pins: 1 };
    const index = indexOf(pinned, slice('b', 10 * B), slice('c', 10 * B));
    expect(keys(index.victims(20 * B))).toEqual(['b', 'c']);
    expect(index.victims(21 * B)).toBeUndefined();
    pinned.pins = 0;
    expect(keys(index.victims(21 * B))).toEqual(['a']);
  });

  it('counts what a slice takes on disk: whole blocks', () => {
    expect([diskBytes(1), diskBytes(B), diskBytes(B + 1), diskBytes(0)]).toEqual([B, B, 2 * B, 0]);
    // 141 one-byte slices take 141 blocks, not 141 bytes.
    const index = indexOf(...Array.from({ length: 141 }, (_, i) => slice(`t${i}`, 1)));
    expect(index.bytes).toBe(141 * B);
    expect(index.victims(2 * B)?.length).toBe(2);
    index.remove('t0');
    expect(index.bytes).toBe(140 * B);
  });

  it('frees files as well as bytes: enough slices for both, whatever their size', () => {
    const index = indexOf(slice('a', 1), slice('b', 1), slice('c', 10 * B), slice('d', 1));
    expect(keys(index.victims(0, 2))).toEqual(['a', 'b']);
    expect(keys(index.victims(B, 2))).toEqual(['a', 'b']);
    expect(keys(index.victims(3 * B, 2))).toEqual(['a', 'b', 'c']);
    expect(keys(index.victims(0, 4))).toEqual(['a', 'b', 'c', 'd']);
    expect(index.victims(0, 5)).toBeUndefined();
    expect(keys(index.victims(-1, 0))).toEqual([]);
  });

  it('asks for nothing when nothing needs freeing', () => {
    const index = indexOf({ ...slice('a', 10 * B), pins: 1 });
    expect(index.victims(0)).toEqual([]);
    expect(index.victims(-5 * B)).toEqual([]);
    expect(new SliceIndex().victims(1 * B)).toBeUndefined();
  });

  it("lists a blob's slices and the blobs held", () => {
    const x = 'x'.repeat(64);
    const y = 'y'.repeat(64);
    const index = indexOf(slice('x0', 1 * B, x), slice('y0', 1 * B, y), slice('x1', 1 * B, x));
    expect(keys(index.ofBlob(x))).toEqual(['x0', 'x1']);
    expect(index.ofBlob('z'.repeat(64))).toEqual([]);
    expect(index.blobs()).toEqual(new Set([x, y]));
    expect(new SliceIndex().blobs()).toEqual(new Set());
  });

  it("finds a blob's slices without looking at every other blob's: a purge of many blobs is linear", () => {
    // One slice per blob, as a cache of small blobs holds them; each slice counts how often its
    // blob is read. A sweep removing n blobs asks for each one's slices and removes them.
    const n = 2000;
    let reads = 0;
    const slices = Array.from({ length: n }, (_, i) => {
      const s = slice(`k${i}`, 1 * B);
      const sha256 = i.toString(16).padStart(64, '0');
      Object.defineProperty(s, 'sha256', {
        get: () => {
          reads++;
          return sha256;
        },
      });
      return s;
    });
    const index = indexOf(...slices);
    for (let i = 0; i < n; i++)
      for (const found of index.ofBlob(i.toString(16).padStart(64, '0'))) index.remove(found.key);
    expect(index.size).toBe(0);
    expect(index.blobs()).toEqual(new Set());
    // Reading every slice's blob for each blob asked about would be n² (4 000 000) reads.
    expect(reads).toBeLessThanOrEqual(4 * n);
  });

  it("keeps a blob's slices in step as slices are replaced and removed", () => {
    const x = 'x'.repeat(64);
    const y = 'y'.repeat(64);
    const index = indexOf(slice('x0', 1 * B, x), slice('x1', 1 * B, x), slice('y0', 1 * B, y));
    index.add(slice('x0', 2 * B, x));
    expect(keys(index.ofBlob(x))?.sort()).toEqual(['x0', 'x1']);
    index.remove('x1');
    index.remove('x0');
    expect(index.ofBlob(x)).toEqual([]);
    expect(index.blobs()).toEqual(new Set([y]));
    expect(index.remove('x0')).toBeUndefined();
  });
});

describe('excessOver: what must be evicted before one more slice file fits', () => {
  const bounds = { maxBytes: 100 * B, maxFiles: 10, minFreeBytes: 5 * B };
  const none = { bytes: 0, files: 0 };
  it.each([
    ['room for both', { bytes: 50 * B, files: 5 }, none, 1000 * B, B, { bytes: -49 * B, files: -4 }],
    ['the byte bound reached', { bytes: 100 * B, files: 5 }, none, 1000 * B, B, { bytes: B, files: -4 }],
    // 9 files of a few bytes each: far under the byte bound, yet the tenth file is the last.
    [
      'the file bound reached by tiny slices',
      { bytes: 9 * B, files: 9 },
      none,
      1000 * B,
      1,
      { bytes: -90 * B, files: 0 },
    ],
    ['past the file bound', { bytes: 10 * B, files: 10 }, none, 1000 * B, 1, { bytes: -89 * B, files: 1 }],
    [
      'reserved files count',
      { bytes: 10 * B, files: 12 },
      { bytes: 2 * B, files: 2 },
      1000 * B,
      1,
      { bytes: -89 * B, files: 3 },
    ],
    // Reserved bytes are not written yet: statfs does not see them.
    [
      'the free-space floor',
      { bytes: 10 * B, files: 1 },
      { bytes: 2 * B, files: 1 },
      7 * B,
      B,
      { bytes: B, files: -8 },
    ],
  ])('%s', (_, used, reserved, freeBytes, sliceBytes, expected) => {
    expect(excessOver(bounds, used, reserved, freeBytes, sliceBytes)).toEqual(expected);
  });

  it('gives up on a slice larger than the byte bound, not on one exactly as large', () => {
    expect(excessOver(bounds, none, none, 1000 * B, 100 * B + 1)).toBeUndefined();
    expect(excessOver(bounds, none, none, 1000 * B, 100 * B)).toEqual({ bytes: 0, files: -9 });
  });

  it('gives up when no file may be kept at all, not when one may', () => {
    expect(excessOver({ ...bounds, maxFiles: 0 }, none, none, 1000 * B, B)).toBeUndefined();
    expect(excessOver({ ...bounds, maxFiles: 1 }, none, none, 1000 * B, B)).toEqual({ bytes: -99 * B, files: 0 });
  });
});
