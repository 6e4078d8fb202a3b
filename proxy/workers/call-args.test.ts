/** A worker's call arguments, checked at the coordinating process before they reach the shared state. */
import { describe, expect, it } from 'vitest';
import {
  CallChecks,
  MalformedCallError,
  parseAdmit,
  parseCountersClear,
  parseCountersRun,
  parseCreateSession,
  parseHeldId,
  parseHold,
  parseSessionId,
  parseTake,
} from './call-args.ts';

const take = {
  direction: 'upload',
  principalId: 'p',
  weight: 1,
  ceilings: [{ key: 'group:g', rateBytesPerSec: 100 }],
  bytes: 64,
  opens: true,
  tag: 0,
};

const planned = {
  rule: { name: 'r' },
  action: 'limit',
  limit: 5,
  periodMs: 60_000,
  banMs: 0,
  windowEndMs: 1_700_000_060_000,
  counterKey: 'k',
  banKey: 'b',
  distinctValue: undefined,
};
const run = [
  { counting: [planned], skip: undefined },
  { nowMs: 1_700_000_000_000, cost: 1.5, mode: 'check' },
];

describe('parseTake', () => {
  it('passes a take as a worker sends it', () => {
    expect(parseTake(take, 64)).toEqual(take);
  });

  it.each([
    ['NaN bytes', { bytes: Number.NaN }],
    ['negative bytes', { bytes: -1 }],
    ['fractional bytes', { bytes: 1.5 }],
    ['bytes past the quantum', { bytes: 65 }],
    ['huge bytes', { bytes: 1e300 }],
    ['an unknown direction', { direction: 'sideways' }],
    ['an empty principal', { principalId: '' }],
    ['a zero weight', { weight: 0 }],
    ['a fractional weight', { weight: 1.5 }],
    ['an infinite tag', { tag: Number.POSITIVE_INFINITY }],
    ['a tag past a safe integer', { tag: 1e300 }],
    ['a negative tag', { tag: -1 }],
    ['opens not a boolean', { opens: 'yes' }],
    ['ceilings not a list', { ceilings: {} }],
    ['a ceiling of rate 0', { ceilings: [{ key: 'g', rateBytesPerSec: 0 }] }],
    ['a ceiling of NaN rate', { ceilings: [{ key: 'g', rateBytesPerSec: Number.NaN }] }],
    ['a ceiling without key', { ceilings: [{ rateBytesPerSec: 1 }] }],
  ])('refuses %s', (_, change) => {
    expect(() => parseTake({ ...take, ...change }, 64)).toThrow(MalformedCallError);
  });

  it('refuses what is no object', () => {
    for (const args of [undefined, null, 3, 'take', [take]])
      expect(() => parseTake(args, 64)).toThrow(MalformedCallError);
  });
});

describe('the admission, repository and release calls', () => {
  it('pass well-formed arguments', () => {
    expect(parseAdmit({ principalId: 'p', kind: 'download' })).toEqual({ principalId: 'p', kind: 'download' });
    expect(parseHold({ repository: 'r', max: 2 })).toEqual({ repository: 'r', max: 2 });
    expect(parseHeldId('release', 7)).toBe(7);
  });

  it.each([
    [() => parseAdmit({ principalId: 'p', kind: 'both' })],
    [() => parseAdmit({ principalId: 7, kind: 'upload' })],
    [() => parseAdmit(null)],
    [() => parseHold({ repository: 'r', max: Number.NaN })],
    [() => parseHold({ repository: 'r', max: 0 })],
    [() => parseHold({ repository: 'r', max: 1.5 })],
    [() => parseHold({ repository: 'r', max: Number.POSITIVE_INFINITY })],
    [() => parseHold({ repository: '', max: 1 })],
    [() => parseHold({ repository: 'x'.repeat(5000), max: 1 })],
    [() => parseHeldId('release', '7')],
    [() => parseHeldId('release', 0)],
    [() => parseHeldId('release', Number.NaN)],
  ])('refuses a malformed one (%#)', (parse) => {
    expect(parse).toThrow(MalformedCallError);
  });
});

describe('the rate-limit counter calls', () => {
  it('pass a plan and input as a worker sends them', () => {
    expect(parseCountersRun(run)).toEqual(run);
    expect(parseCountersClear(['a', 'b'])).toEqual(['a', 'b']);
  });

  it.each([
    ['a NaN cost', [run[0], { ...run[1], cost: Number.NaN }]],
    ['a negative cost', [run[0], { ...run[1], cost: -1 }]],
    ['an infinite cost', [run[0], { ...run[1], cost: Number.POSITIVE_INFINITY }]],
    ['a NaN time', [run[0], { ...run[1], nowMs: Number.NaN }]],
    ['an unknown mode', [run[0], { ...run[1], mode: 'write' }]],
    ['a NaN limit', [{ counting: [{ ...planned, limit: Number.NaN }] }, run[1]]],
    ['a negative ban', [{ counting: [{ ...planned, banMs: -5 }] }, run[1]]],
    ['a window end of NaN', [{ counting: [{ ...planned, windowEndMs: Number.NaN }] }, run[1]]],
    ['an empty key', [{ counting: [{ ...planned, counterKey: '' }] }, run[1]]],
    ['no rule', [{ counting: [{ ...planned, rule: undefined }] }, run[1]]],
    ['no plan', [undefined, run[1]]],
    ['one argument', [run[0]]],
  ])('refuses %s', (_, args) => {
    expect(() => parseCountersRun(args)).toThrow(MalformedCallError);
  });

  it('refuses keys to clear that are not strings, or too many', () => {
    expect(() => parseCountersClear([1])).toThrow(MalformedCallError);
    expect(() => parseCountersClear('k')).toThrow(MalformedCallError);
    expect(() => parseCountersClear(Array.from({ length: 2000 }, (_, i) => `k${i}`))).toThrow(MalformedCallError);
  });
});

describe('the console session calls', () => {
  const create = { principal: { id: 'p', name: 'P', disabledAtMs: null }, authorization: 'Bearer x' };

  it('pass a session to create and any string id', () => {
    expect(parseCreateSession(create)).toEqual(create);
    expect(parseSessionId('sessions.get', '')).toBe('');
  });

  it('refuse a malformed one', () => {
    expect(() => parseCreateSession({ ...create, authorization: 3 })).toThrow(MalformedCallError);
    expect(() => parseCreateSession({ ...create, principal: { ...create.principal, disabledAtMs: -1 } })).toThrow(
      MalformedCallError,
    );
    expect(() => parseCreateSession({ authorization: 'x' })).toThrow(MalformedCallError);
    expect(() => parseSessionId('sessions.delete', { id: 'x' })).toThrow(MalformedCallError);
  });
});

describe('CallChecks', () => {
  it('reports a malformed call once per worker and op, and fails each', () => {
    const logged: object[] = [];
    const checks = new CallChecks({ warn: (fields) => logged.push(fields) });
    const one = {};
    const other = {};
    const bad = () => parseHold({ repository: 'r', max: Number.NaN });
    for (let i = 0; i < 3; i++) expect(() => checks.parse(one, 'repository.hold', bad)).toThrow(MalformedCallError);
    expect(() => checks.parse(one, 'admit', () => parseAdmit(null))).toThrow(MalformedCallError);
    expect(() => checks.parse(other, 'repository.hold', bad)).toThrow(MalformedCallError);
    expect(logged).toEqual([
      expect.objectContaining({ op: 'repository.hold' }),
      expect.objectContaining({ op: 'admit' }),
      expect.objectContaining({ op: 'repository.hold' }),
    ]);
    expect(checks.parse(one, 'repository.hold', () => parseHold({ repository: 'r', max: 1 }))).toEqual({
      repository: 'r',
      max: 1,
    });
  });
});
