/**
 * Counter key naming. Pure.
 *
 *   <prefix><limiter>:{<rule>|<char>=<value>,…}:c:<windowStartMs>   counter (INCRBY/INCRBYFLOAT) or
 *   <prefix><limiter>:{<rule>|<char>=<value>,…}:d:<windowStartMs>   distinct-value set (SADD)
 *   <prefix><limiter>:{<rule>|<char>=<value>,…}:b                   ban (value: ban end, ms)
 *
 * The `{…}` hash tag puts a counter and its ban in one Redis Cluster slot. Values are escaped so
 * that no value can forge a separator, and values over 200 bytes are replaced by `#` + their
 * SHA-256 (the whole value is hashed, so two long values sharing a prefix never share a counter;
 * `#` is escaped in raw values, so a hash never equals a raw value). A missing value is `_unknown_`.
 */
import { createHash } from 'node:crypto';
import { valueOf, type Identifier } from './match.ts';

export const DEFAULT_KEY_PREFIX = 'arkvory:rl:';
export const UNKNOWN_VALUE = '_unknown_';
export const MAX_RAW_VALUE_BYTES = 200;

const ESCAPES: Record<string, string> = {
  '%': '%25',
  '{': '%7B',
  '}': '%7D',
  ':': '%3A',
  ',': '%2C',
  '=': '%3D',
  '#': '%23',
  '|': '%7C',
};

const SPECIAL = /[%{}:,=#|]/;

export function encodeValue(value: string | undefined): string {
  if (value === undefined) return UNKNOWN_VALUE;
  // A UTF-16 unit is at most 3 UTF-8 bytes, so short strings need no byte count.
  // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent: the first test only skips counting the bytes of a value that cannot exceed the bound (length × 3 is never exactly 200)
  if (value.length * 3 > MAX_RAW_VALUE_BYTES && Buffer.byteLength(value, 'utf8') > MAX_RAW_VALUE_BYTES)
    return `#${createHash('sha256').update(value, 'utf8').digest('hex')}`;
  return SPECIAL.test(value) ? value.replace(/[%{}:,=#|]/g, (c) => ESCAPES[c]!) : value;
}

/** `<prefix><limiter>:{<rule>|<characteristics>}`: the part every key of one counter shares. */
export function counterBase(
  prefix: string,
  limiter: string,
  ruleName: string,
  characteristics: readonly string[],
  identifier: Identifier,
): string {
  let tag = `${ruleName}|`;
  for (let i = 0; i < characteristics.length; i++) {
    const c = characteristics[i]!;
    tag += `${i ? ',' : ''}${encodeValue(c)}=${encodeValue(valueOf(identifier, c))}`;
  }
  return `${prefix}${limiter}:{${tag}}`;
}

/** Aligned fixed window: [floor(now / period) * period, + period). */
export function windowStartMs(nowMs: number, periodMs: number): number {
  return nowMs - (((nowMs % periodMs) + periodMs) % periodMs);
}

export function counterKey(base: string, distinct: boolean, startMs: number): string {
  return `${base}:${distinct ? 'd' : 'c'}:${startMs}`;
}

export function banKey(base: string): string {
  return `${base}:b`;
}

interface RuleKeys {
  readonly base: string;
  readonly banKey: string;
  windowStartMs: number;
  counterKey: string;
}

/**
 * Per rule and limiter, past this many distinct identifiers the memo starts over (a bound, not an
 * LRU); ids longer than MAX_RAW_VALUE_BYTES are never kept, so it holds a few MB at most.
 */
export const KEY_MEMO_MAX = 10_000;

/**
 * The key strings of a rule for an identifier, kept while the window lasts, so a caller that comes
 * back (the same principal, the same address) is counted under the very same string objects. A Map
 * keyed by them (the memory store, the metrics) then finds its entry without hashing a string built
 * for this call, which would be the memory store's main cost on small requests. Same
 * strings as counterBase/counterKey/banKey build; bounded per rule by KEY_MEMO_MAX.
 */
export class RuleKeyMemo {
  readonly #byRule = new WeakMap<object, Map<string, RuleKeys>>();

  keys(
    prefix: string,
    limiter: string,
    rule: {
      readonly name: string;
      readonly characteristics: readonly string[];
      readonly countDistinct?: string | undefined;
    },
    identifier: Identifier,
    startMs: number,
  ): { readonly counterKey: string; readonly banKey: string } {
    const c = rule.characteristics;
    // One characteristic (the usual rule): its raw value names the identifier; several: their
    // encoded values, which cannot contain the separator.
    // Stryker disable ConditionalExpression: equivalent: the encoded form names one value as uniquely, it only costs more
    const id =
      c.length === 1 ? valueOf(identifier, c[0]!) : c.map((k) => encodeValue(valueOf(identifier, k))).join(',');
    // Stryker restore ConditionalExpression
    const distinct = rule.countDistinct !== undefined;
    // A long value (a repository name is the client's to choose, up to the request head's size) is
    // not kept: the memo holds KEY_MEMO_MAX ids per rule, so raw ids of 16 KB would hold 160 MB.
    // Its keys name it by its hash anyway.
    if (id === undefined || id.length > MAX_RAW_VALUE_BYTES) {
      const base = counterBase(prefix, limiter, rule.name, c, identifier);
      return { counterKey: counterKey(base, distinct, startMs), banKey: banKey(base) };
    }
    let memo = this.#byRule.get(rule);
    if (!memo) this.#byRule.set(rule, (memo = new Map()));
    const known = memo.get(id);
    if (known) {
      // Stryker disable next-line ConditionalExpression: equivalent in value: the key built again is an equal string; the test keeps the window's one string object, which is what makes the memo pay
      if (known.windowStartMs !== startMs) {
        known.windowStartMs = startMs;
        known.counterKey = counterKey(known.base, distinct, startMs);
      }
      return known;
    }
    if (memo.size >= KEY_MEMO_MAX) memo.clear();
    const base = counterBase(prefix, limiter, rule.name, c, identifier);
    const keys = {
      base,
      banKey: banKey(base),
      windowStartMs: startMs,
      counterKey: counterKey(base, distinct, startMs),
    };
    memo.set(id, keys);
    return keys;
  }
}
