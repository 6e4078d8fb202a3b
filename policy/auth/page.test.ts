import { describe, expect, it } from 'vitest';
import { decodeCursor, encodeCursor, PAGE_DEFAULT_LIMIT, PAGE_MAX_LIMIT, pageLimit, pageOf } from './page.ts';

describe('pagination', () => {
  it('takes the default, a number or its text, and refuses anything out of range', () => {
    expect(pageLimit(undefined)).toBe(PAGE_DEFAULT_LIMIT);
    expect(pageLimit('')).toBe(PAGE_DEFAULT_LIMIT);
    expect(pageLimit('5')).toBe(5);
    expect(pageLimit(PAGE_MAX_LIMIT)).toBe(PAGE_MAX_LIMIT);
    for (const bad of [0, -1, 1.5, PAGE_MAX_LIMIT + 1, '1e3', '9007199254740993', 'ten', [], {}])
      expect(() => pageLimit(bad), JSON.stringify(bad)).toThrow(/limit must be an integer from 1 to 1000/);
  });

  it('round-trips a cursor and refuses one it did not make', () => {
    const cursor = encodeCursor(['name with "quotes"', '2']);
    expect(decodeCursor(cursor, 2)).toEqual(['name with "quotes"', '2']);
    expect(decodeCursor(undefined, 1)).toBeUndefined();
    for (const bad of [cursor.slice(1), 'not base64!', encodeCursor(['a']), 'A'.repeat(2000), 42])
      expect(() => decodeCursor(bad, 2)).toThrow(/cursor is not one this listing gave/);
  });

  it('refuses a well-formed cursor holding what its columns cannot: a NUL, a value off its shape', () => {
    expect(() => decodeCursor(encodeCursor(['a\u0000b']), 1)).toThrow(/cursor is not one this listing gave/);
    const microseconds = [/^[0-9]{1,19}$/];
    expect(decodeCursor(encodeCursor(['1733370000000000', 'k']), 2, microseconds)).toEqual(['1733370000000000', 'k']);
    for (const bad of [
      ['abc', 'k'],
      ['', 'k'],
      ['1'.repeat(20), 'k'],
    ])
      expect(() => decodeCursor(encodeCursor(bad), 2, microseconds), JSON.stringify(bad)).toThrow(
        /cursor is not one this listing gave/,
      );
  });

  it('gives a next cursor only when a row past the page was fetched', () => {
    expect(pageOf(['a', 'b'], 2, (x) => [x])).toEqual({ items: ['a', 'b'], nextCursor: null });
    const page = pageOf(['a', 'b', 'c'], 2, (x) => [x]);
    expect(page.items).toEqual(['a', 'b']);
    expect(decodeCursor(page.nextCursor, 1)).toEqual(['b']);
  });
});
