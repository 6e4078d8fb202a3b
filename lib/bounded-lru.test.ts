import { describe, expect, it } from 'vitest';
import { BoundedLru } from './bounded-lru.ts';

describe('BoundedLru', () => {
  it('holds both bounds under a stream of distinct keys, evicting the oldest first', () => {
    const evicted: number[] = [];
    const lru = new BoundedLru<number, string>({ maxEntries: 100, maxBytes: 1000 }, (key) => evicted.push(key));
    for (let i = 0; i < 2000; i++) {
      lru.set(i, `v${i}`, 1 + (i % 20));
      expect(lru.size).toBeLessThanOrEqual(100);
      expect(lru.bytes).toBeLessThanOrEqual(1000);
    }
    expect(lru.peek(1999)).toBe('v1999');
    expect(lru.peek(0)).toBeUndefined();
    // Evictions happen in insertion order (none of these keys was read again).
    expect(evicted).toEqual([...evicted].sort((a, b) => a - b));
    expect(evicted.length + lru.size).toBe(2000);
  });

  it('a read makes an entry the newest; bytes are accounted on replace and delete', () => {
    const lru = new BoundedLru<string, number>({ maxEntries: 2, maxBytes: 100 });
    lru.set('a', 1, 10);
    lru.set('b', 2, 10);
    expect(lru.get('a')).toBe(1);
    lru.set('c', 3, 10);
    expect(lru.peek('b')).toBeUndefined();
    expect([lru.peek('a'), lru.peek('c')]).toEqual([1, 3]);
    lru.set('a', 4, 50);
    expect(lru.bytes).toBe(60);
    expect(lru.delete('a')).toBe(true);
    expect(lru.bytes).toBe(10);
    lru.clear();
    expect([lru.size, lru.bytes]).toEqual([0, 0]);
  });

  it('keeps exact LRU order when the newest entry is read again, and after it is deleted or evicted', () => {
    const lru = new BoundedLru<string, number>({ maxEntries: 3, maxBytes: 100 });
    lru.set('a', 1, 1);
    lru.set('b', 2, 1);
    lru.set('c', 3, 1);
    expect(lru.get('c')).toBe(3); // already the newest: order a, b, c
    expect(lru.get('a')).toBe(1); // b, c, a
    expect(lru.get('a')).toBe(1);
    lru.set('d', 4, 1); // evicts b
    expect(lru.entries().map(([k]) => k)).toEqual(['c', 'a', 'd']);
    lru.delete('d'); // the newest goes: reading c must move it again
    expect(lru.get('c')).toBe(3);
    expect(lru.entries().map(([k]) => k)).toEqual(['a', 'c']);
    lru.set('e', 5, 1);
    lru.set('f', 6, 1); // evicts a
    expect(lru.get('c')).toBe(3);
    lru.set('g', 7, 1); // evicts e, not c
    expect(lru.entries().map(([k]) => k)).toEqual(['f', 'c', 'g']);
  });

  it('refuses an entry larger than the byte bound without evicting anything', () => {
    const lru = new BoundedLru<string, number>({ maxEntries: 10, maxBytes: 100 });
    lru.set('small', 1, 40);
    expect(lru.set('huge', 2, 101)).toBe(false);
    expect(lru.peek('small')).toBe(1);
    expect(lru.size).toBe(1);
    expect(new BoundedLru<string, number>({ maxEntries: 0, maxBytes: 100 }).set('x', 1, 1)).toBe(false);
  });

  it('fills both bounds exactly before it evicts', () => {
    const lru = new BoundedLru<string, number>({ maxEntries: 1, maxBytes: 100 });
    expect(lru.set('whole', 1, 100)).toBe(true);
    expect([lru.size, lru.bytes]).toEqual([1, 100]);
    expect(lru.set('next', 2, 1)).toBe(true);
    expect(lru.entries()).toEqual([['next', 2]]);
    const two = new BoundedLru<string, number>({ maxEntries: 5, maxBytes: 100 });
    two.set('a', 1, 60);
    two.set('b', 2, 40);
    expect([two.size, two.bytes]).toEqual([2, 100]);
  });

  it('answers whether a delete found the key', () => {
    const lru = new BoundedLru<string, number>({ maxEntries: 5, maxBytes: 100 });
    lru.set('a', 1, 1);
    expect(lru.delete('b')).toBe(false);
    expect(lru.delete('a')).toBe(true);
    expect(lru.delete('a')).toBe(false);
    expect([lru.size, lru.bytes]).toEqual([0, 0]);
  });
});
