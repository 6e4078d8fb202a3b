import { describe, expect, it } from 'vitest';
import { type IndexedSlice, SliceIndex } from './slice-index.ts';

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
    const index = indexOf(slice('a', 10), slice('b', 20));
    expect([index.size, index.bytes]).toEqual([2, 30]);
    index.add(slice('a', 5));
    expect([index.size, index.bytes]).toEqual([2, 25]);
    expect(index.get('a')?.bytes).toBe(5);
    expect(index.remove('b')?.key).toBe('b');
    expect([index.size, index.bytes]).toEqual([1, 5]);
    expect(index.remove('b')).toBeUndefined();
    expect([index.size, index.bytes]).toEqual([1, 5]);
    expect(index.get('b')).toBeUndefined();
  });

  it('offers the least recently used slices first, a read making one the newest', () => {
    const a = slice('a', 10);
    const index = indexOf(a, slice('b', 10), slice('c', 10));
    expect(keys(index.victims(15))).toEqual(['a', 'b']);
    index.touch(a);
    expect(keys(index.victims(15))).toEqual(['b', 'c']);
    expect(keys(index.all())).toEqual(['b', 'c', 'a']);
    // A re-added slice is the newest too.
    index.add(slice('b', 10));
    expect(keys(index.victims(10))).toEqual(['c']);
  });

  it('stops at the first slices that free enough, exactly enough included', () => {
    const index = indexOf(slice('a', 10), slice('b', 10), slice('c', 10));
    expect(keys(index.victims(10))).toEqual(['a']);
    expect(keys(index.victims(11))).toEqual(['a', 'b']);
    expect(keys(index.victims(30))).toEqual(['a', 'b', 'c']);
  });

  it('never offers a pinned slice, and offers nothing when the rest cannot free enough', () => {
    const pinned = { ...slice('a', 100), pins: 1 };
    const index = indexOf(pinned, slice('b', 10), slice('c', 10));
    expect(keys(index.victims(20))).toEqual(['b', 'c']);
    expect(index.victims(21)).toBeUndefined();
    pinned.pins = 0;
    expect(keys(index.victims(21))).toEqual(['a']);
  });

  it('asks for nothing when nothing needs freeing', () => {
    const index = indexOf({ ...slice('a', 10), pins: 1 });
    expect(index.victims(0)).toEqual([]);
    expect(index.victims(-5)).toEqual([]);
    expect(new SliceIndex().victims(1)).toBeUndefined();
  });

  it("lists a blob's slices and the blobs held", () => {
    const x = 'x'.repeat(64);
    const y = 'y'.repeat(64);
    const index = indexOf(slice('x0', 1, x), slice('y0', 1, y), slice('x1', 1, x));
    expect(keys(index.ofBlob(x))).toEqual(['x0', 'x1']);
    expect(index.ofBlob('z'.repeat(64))).toEqual([]);
    expect(index.blobs()).toEqual(new Set([x, y]));
    expect(new SliceIndex().blobs()).toEqual(new Set());
  });
});
