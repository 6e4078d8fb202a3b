import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  banKey,
  counterBase,
  DEFAULT_KEY_PREFIX,
  counterKey,
  encodeValue,
  KEY_MEMO_MAX,
  MAX_RAW_VALUE_BYTES,
  RuleKeyMemo,
  UNKNOWN_VALUE,
  windowStartMs,
} from './keys.ts';

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

describe('encodeValue', () => {
  it('a missing value is _unknown_; an ordinary one is itself', () => {
    expect(encodeValue(undefined)).toBe(UNKNOWN_VALUE);
    expect(UNKNOWN_VALUE).toBe('_unknown_');
    expect(encodeValue('10.0.0.1')).toBe('10.0.0.1');
    expect(encodeValue('2001:db8::')).toBe('2001%3Adb8%3A%3A');
    expect(encodeValue('')).toBe('');
  });

  it('escapes every character that separates the parts of a key, and the escape character itself', () => {
    for (const [c, escaped] of [
      ['%', '%25'],
      ['{', '%7B'],
      ['}', '%7D'],
      [':', '%3A'],
      [',', '%2C'],
      ['=', '%3D'],
      ['#', '%23'],
      ['|', '%7C'],
    ] as const) {
      expect(encodeValue(c)).toBe(escaped);
      // Every occurrence, wherever it stands.
      expect(encodeValue(`a${c}b${c}`)).toBe(`a${escaped}b${escaped}`);
    }
    expect(encodeValue('a%7B')).toBe('a%257B');
  });

  it('no value can forge a separator, and two values never share an encoding', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 50 }),
        fc.string({ unit: 'binary', maxLength: 50 }),
        (a, b) => {
          const ea = encodeValue(a);
          expect(ea).not.toMatch(/[{}:,=|#]/);
          if (a !== b) expect(ea).not.toBe(encodeValue(b));
        },
      ),
      { numRuns: 2000 },
    );
    // Near misses of the escapes themselves.
    const values = ['%', '%25', '%2', '%%', ':', '%3A', '%3a', '_unknown_', '#', '%23'];
    expect(new Set(values.map(encodeValue)).size).toBe(values.length);
  });

  it(`values over ${MAX_RAW_VALUE_BYTES} UTF-8 bytes become # and the SHA-256 of the whole value`, () => {
    const at = 'a'.repeat(MAX_RAW_VALUE_BYTES);
    expect(encodeValue(at)).toBe(at);
    expect(encodeValue(`${at}b`)).toBe(`#${sha256(`${at}b`)}`);
    // Two long values sharing their first 200 bytes keep apart.
    expect(encodeValue(`${at}b`)).not.toBe(encodeValue(`${at}c`));
    // Escapes do not count toward the bound; the hash covers the raw value.
    const colons = ':'.repeat(MAX_RAW_VALUE_BYTES);
    expect(encodeValue(colons)).toBe('%3A'.repeat(MAX_RAW_VALUE_BYTES));
    // Counted in bytes, not characters: 66 three-byte characters are 198 bytes, 67 are 201.
    expect(encodeValue('€'.repeat(66))).toBe('€'.repeat(66));
    expect(encodeValue('€'.repeat(67))).toBe(`#${sha256('€'.repeat(67))}`);
    // 67 one-byte characters: more than 200 / 3 characters, still short in bytes.
    expect(encodeValue('a'.repeat(67))).toBe('a'.repeat(67));
  });
});

describe('key strings', () => {
  it('a counter base: prefix, limiter, then the rule and each characteristic in a hash tag', () => {
    expect(DEFAULT_KEY_PREFIX).toBe('arkvory:rl:');
    expect(counterBase('arkvory:rl:', 'gateway_request', 'by_ip', ['ip'], { ip: '10.0.0.1' })).toBe(
      'arkvory:rl:gateway_request:{by_ip|ip=10.0.0.1}',
    );
    expect(counterBase('p:', 'lim', 'two', ['ip', 'principal'], { ip: '::1', principal: 'a,b' })).toBe(
      'p:lim:{two|ip=%3A%3A1,principal=a%2Cb}',
    );
    // A characteristic the identifier lacks (or holds null) counts under _unknown_; numbers and
    // booleans as their text.
    expect(counterBase('p:', 'lim', 'r', ['ip', 'n', 'b', 'z'], { n: 5, b: false, z: null })).toBe(
      'p:lim:{r|ip=_unknown_,n=5,b=false,z=_unknown_}',
    );
    expect(counterBase('p:', 'lim', 'all', [], { ip: '1' })).toBe('p:lim:{all|}');
  });

  it('counter, distinct-value and ban keys of a base', () => {
    expect(counterKey('b', false, 60_000)).toBe('b:c:60000');
    expect(counterKey('b', true, 60_000)).toBe('b:d:60000');
    expect(banKey('b')).toBe('b:b');
  });

  it('windows are aligned to the period, before the epoch too', () => {
    expect(windowStartMs(0, 60_000)).toBe(0);
    expect(windowStartMs(59_999, 60_000)).toBe(0);
    expect(windowStartMs(60_000, 60_000)).toBe(60_000);
    expect(windowStartMs(1_700_000_012_345, 1000)).toBe(1_700_000_012_000);
    expect(windowStartMs(-1, 60_000)).toBe(-60_000);
    expect(windowStartMs(-60_000, 60_000)).toBe(-60_000);
    fc.assert(
      fc.property(fc.integer({ min: -1e12, max: 1e13 }), fc.integer({ min: 1, max: 1e8 }), (now, period) => {
        const start = windowStartMs(now, period);
        expect(start).toBeLessThanOrEqual(now);
        expect(now - start).toBeLessThan(period);
        expect(start % period === 0).toBe(true);
      }),
    );
  });
});

describe('RuleKeyMemo', () => {
  const rule = { name: 'by_ip', characteristics: ['ip'] };
  const fresh = (
    r: typeof rule & { countDistinct?: string },
    id: Record<string, string | undefined>,
    start: number,
  ) => {
    const base = counterBase('p:', 'lim', r.name, r.characteristics, id);
    return { counterKey: counterKey(base, r.countDistinct !== undefined, start), banKey: banKey(base) };
  };

  it('gives the very strings counterBase, counterKey and banKey build, and the same objects again', () => {
    const memo = new RuleKeyMemo();
    const first = memo.keys('p:', 'lim', rule, { ip: '10.0.0.1' }, 60_000);
    expect({ ...first }).toMatchObject(fresh(rule, { ip: '10.0.0.1' }, 60_000));
    const again = memo.keys('p:', 'lim', rule, { ip: '10.0.0.1' }, 60_000);
    expect(again).toBe(first);
    expect(again.counterKey).toBe(first.counterKey);
    // A new window: a new counter key, the same ban key.
    const next = memo.keys('p:', 'lim', rule, { ip: '10.0.0.1' }, 120_000);
    expect(next.counterKey).toBe('p:lim:{by_ip|ip=10.0.0.1}:c:120000');
    expect(next.banKey).toBe(first.banKey);
    // Another identifier, another rule object with the same name, a distinct-value rule.
    expect(memo.keys('p:', 'lim', rule, { ip: '10.0.0.2' }, 120_000).counterKey).toBe(
      'p:lim:{by_ip|ip=10.0.0.2}:c:120000',
    );
    const distinct = { ...rule, countDistinct: 'principal' };
    expect(memo.keys('p:', 'lim', distinct, { ip: '10.0.0.1' }, 120_000).counterKey).toBe(
      'p:lim:{by_ip|ip=10.0.0.1}:d:120000',
    );
  });

  it('several characteristics, odd values and a missing one give the fresh keys', () => {
    const memo = new RuleKeyMemo();
    const two = { name: 'two', characteristics: ['ip', 'p'] };
    const ids = [
      { ip: '10.0.0.1', p: 'a' },
      { ip: '10.0.0.1,p=a', p: undefined },
      { ip: '10.0.0.1', p: undefined },
      { ip: undefined, p: undefined },
      { ip: 'x'.repeat(300), p: '%' },
      // Values that would run together were they not kept apart.
      { ip: 'ab', p: 'c' },
      { ip: 'a', p: 'bc' },
      { ip: 'a,b', p: 'c' },
      { ip: 'a', p: 'b,c' },
    ];
    for (const start of [0, 60_000, 60_000])
      for (const id of ids) {
        expect({ ...memo.keys('p:', 'lim', two, id, start) }).toMatchObject(fresh(two, id, start));
        expect({ ...memo.keys('p:', 'lim', rule, id, start) }).toMatchObject(fresh(rule, id, start));
      }
  });

  it(`holds at most ${KEY_MEMO_MAX} identifiers per rule, then starts over`, () => {
    const memo = new RuleKeyMemo();
    const first = memo.keys('p:', 'lim', rule, { ip: 'first' }, 0);
    for (let i = 0; i < KEY_MEMO_MAX - 1; i++) memo.keys('p:', 'lim', rule, { ip: `ip-${i}` }, 0);
    // Full now: the first identifier is still held.
    expect(memo.keys('p:', 'lim', rule, { ip: 'first' }, 0)).toBe(first);
    // One more identifier clears the memo: the first one is built anew (equal strings, a new object).
    memo.keys('p:', 'lim', rule, { ip: 'one more' }, 0);
    const rebuilt = memo.keys('p:', 'lim', rule, { ip: 'first' }, 0);
    expect(rebuilt).not.toBe(first);
    expect({ ...rebuilt }).toMatchObject(fresh(rule, { ip: 'first' }, 0));
  });
});
