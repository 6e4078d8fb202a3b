import { describe, expect, it } from 'vitest';
import {
  CURSORS,
  type CursorShape,
  decodeCursor,
  encodeCursor,
  PAGE_DEFAULT_LIMIT,
  PAGE_MAX_LIMIT,
  pageLimit,
  pageOf,
} from './page.ts';

describe('pagination', () => {
  it('takes the default, a number or its text, and refuses anything out of range', () => {
    expect(pageLimit(undefined)).toBe(PAGE_DEFAULT_LIMIT);
    expect(pageLimit('')).toBe(PAGE_DEFAULT_LIMIT);
    expect(pageLimit('5')).toBe(5);
    expect(pageLimit(PAGE_MAX_LIMIT)).toBe(PAGE_MAX_LIMIT);
    for (const bad of [0, -1, 1.5, PAGE_MAX_LIMIT + 1, '1e3', '9007199254740993', 'ten', [], {}])
      expect(() => pageLimit(bad), JSON.stringify(bad)).toThrow(/limit must be an integer from 1 to 1000/);
  });

  const pair: CursorShape = { listing: 'grants', arity: 2 };
  const forged = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

  it('round-trips a cursor and refuses one no listing gave as not valid', () => {
    const cursor = encodeCursor(pair, ['name with "quotes"', '2']);
    expect(decodeCursor(cursor, pair)).toEqual(['name with "quotes"', '2']);
    expect(decodeCursor(undefined, CURSORS.principals)).toBeUndefined();
    for (const bad of [
      cursor.slice(1),
      'not base64!',
      'A'.repeat(2000),
      42,
      encodeCursor(pair, ['a']),
      forged(['a', 'b']),
      forged({ l: 'no such listing', k: ['a', 'b'] }),
      forged({ l: 'grants', k: 'ab' }),
      forged(null),
    ])
      expect(() => decodeCursor(bad, pair), JSON.stringify(bad)).toThrow(
        /^cursor is not valid: no listing gave it; start without it$/,
      );
  });

  it("refuses another listing's cursor, naming the listing it was made for", () => {
    const principals = encodeCursor(CURSORS.principals, ['alice']);
    expect(decodeCursor(principals, CURSORS.principals)).toEqual(['alice']);
    // Same shape of key, another listing: not taken as a place in this one.
    expect(() => decodeCursor(principals, CURSORS.repositories)).toThrow(
      'cursor was made for the principals listing, not this one (repositories); start without it',
    );
    expect(() => decodeCursor(principals, CURSORS.keys)).toThrow(/made for the principals listing/);
  });

  it('refuses a well-formed cursor holding what its columns cannot: a NUL, a value off its shape', () => {
    const one: CursorShape = { listing: 'principals', arity: 1 };
    expect(() => decodeCursor(encodeCursor(one, ['a\u0000b']), one)).toThrow(/cursor is not valid/);
    const microseconds = CURSORS.keys;
    expect(decodeCursor(encodeCursor(microseconds, ['1733370000000000', 'k']), microseconds)).toEqual([
      '1733370000000000',
      'k',
    ]);
    for (const bad of [
      ['abc', 'k'],
      ['', 'k'],
      ['1'.repeat(19), 'k'],
    ])
      expect(() => decodeCursor(encodeCursor(microseconds, bad), microseconds), JSON.stringify(bad)).toThrow(
        /cursor is not valid/,
      );
  });

  it('gives a next cursor only when a row past the page was fetched', () => {
    const one = CURSORS.repositories;
    expect(pageOf(['a', 'b'], 2, one, (x) => [x])).toEqual({ items: ['a', 'b'], nextCursor: null });
    const page = pageOf(['a', 'b', 'c'], 2, one, (x) => [x]);
    expect(page.items).toEqual(['a', 'b']);
    expect(decodeCursor(page.nextCursor, one)).toEqual(['b']);
  });
});
