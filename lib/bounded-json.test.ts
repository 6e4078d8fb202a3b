import { describe, expect, it } from 'vitest';
import { JsonTooDeepError, MAX_JSON_DEPTH, nestsDeeperThan, parseBoundedJson } from './bounded-json.ts';

const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

describe('nestsDeeperThan', () => {
  it('counts arrays and objects inside one another, not side by side', () => {
    expect(nestsDeeperThan('{"a":[1]}', 2)).toBe(false);
    expect(nestsDeeperThan('{"a":[1]}', 1)).toBe(true);
    expect(nestsDeeperThan('[[1],[2],{"b":3}]', 2)).toBe(false);
    expect(nestsDeeperThan('"plain"', 0)).toBe(false);
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH)).toBe(false);
    expect(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)).toBe(true);
  });

  it('skips brackets inside strings, escaped quotes and backslashes included', () => {
    expect(nestsDeeperThan(`{"a":"${'['.repeat(100)}"}`, 1)).toBe(false);
    expect(nestsDeeperThan(`{"a\\"[[[":"\\\\","b":"\\"{{{"}`, 1)).toBe(false);
    // The string ends after an escaped backslash: the brackets after it count.
    expect(nestsDeeperThan('["\\\\",[[]]]', 2)).toBe(true);
  });

  it('reads a megabyte of brackets in one pass, without recursion', () => {
    expect(nestsDeeperThan(nested(512 * 1024), MAX_JSON_DEPTH)).toBe(true);
    expect(nestsDeeperThan(`[${'[1],'.repeat(200_000)}[]]`, 2)).toBe(false);
  });
});

describe('parseBoundedJson', () => {
  it('parses what nests within the bound, with the reviver given', () => {
    expect(parseBoundedJson('{"a":[1,{"b":2}]}')).toEqual({ a: [1, { b: 2 }] });
    expect(parseBoundedJson('{"a":1}', (_k, v) => (v === 1 ? 2 : v))).toEqual({ a: 2 });
  });

  it('refuses deeper nesting before parsing, with its own error; malformed text is a SyntaxError', () => {
    // Deep enough to overflow a recursive walk of the parsed value (JSON.stringify, a reviver).
    expect(() => parseBoundedJson(`{"ttl_s":${nested(100_000)}}`)).toThrow(JsonTooDeepError);
    expect(() => parseBoundedJson(nested(3), undefined, 2)).toThrow(/deeper than 2 levels/);
    expect(() => parseBoundedJson('{"a":')).toThrow(SyntaxError);
  });
});
