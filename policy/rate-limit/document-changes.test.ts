import { describe, expect, it } from 'vitest';
import {
  bypassesIn,
  describeBypass,
  refuseBypassRules,
  seededDocuments,
  weakening,
  withoutPublished,
  withPublished,
} from './document-changes.ts';
import { RateLimitError } from './errors.ts';
import type { LimiterRules, RuleSpec } from './rules.ts';

const limit = (name: string, more: Partial<RuleSpec> = {}): RuleSpec => ({
  name,
  action: 'limit',
  characteristics: ['ip'],
  limit: 10,
  period_s: 60,
  ...more,
});
const doc = (file: RuleSpec[], published: RuleSpec[], defaults: RuleSpec[]): LimiterRules => ({
  file_rules: { rules: file },
  published_rules: { rules: published },
  default_rules: { rules: defaults },
});
/** A reader that accepts documents that are objects and refuses the rest. */
const accept = (_limiter: string, raw: unknown) =>
  typeof raw === 'object' && raw !== null ? (raw as LimiterRules) : undefined;

describe('seededDocuments (file and default tiers from this process)', () => {
  const seed = (
    current: Map<string, unknown>,
    fileRules: Map<string, RuleSpec[]>,
    defaults: Record<string, RuleSpec[]>,
    replaceFileTier = true,
  ) =>
    seededDocuments(current, {
      limiters: ['a', 'b', 'c', 'd'],
      fileRules,
      defaults: (l) => defaults[l] ?? [],
      replaceFileTier,
      accept,
    });

  it('writes a limiter that has a stored document, file rules or default rules, and no other', () => {
    const next = seed(new Map([['a', doc([], [], [])]]), new Map([['b', [limit('f')]]]), { c: [limit('d')] });
    expect([...next.keys()]).toEqual(['a', 'b', 'c']);
    expect(next.get('b')).toEqual(doc([limit('f')], [], []));
    expect(next.get('c')).toEqual(doc([], [], [limit('d')]));
  });

  it('replaces the file and default tiers and keeps the published one', () => {
    const stored = doc([limit('old file')], [limit('published')], [limit('old default')]);
    const next = seed(new Map([['a', stored]]), new Map([['a', [limit('new file')]]]), { a: [limit('new default')] });
    expect(next.get('a')).toEqual(doc([limit('new file')], [limit('published')], [limit('new default')]));
  });

  it("keeps the stored file tier when this process's file was invalid", () => {
    const stored = doc([limit('last good file')], [limit('published')], []);
    const next = seed(new Map([['a', stored]]), new Map([['a', [limit('ignored')]]]), { a: [limit('default')] }, false);
    expect(next.get('a')).toEqual(doc([limit('last good file')], [limit('published')], [limit('default')]));
  });

  it('leaves a document it cannot read alone: overwriting it would lose its published tier', () => {
    const next = seed(new Map([['a', 'garbage']]), new Map([['a', [limit('f')]]]), { a: [limit('d')] });
    expect(next.has('a')).toBe(false);
  });

  it('copies the rule lists it is given', () => {
    const file = [limit('f')];
    const defaults = [limit('d')];
    const next = seed(new Map(), new Map([['a', file]]), { a: defaults });
    file.push(limit('later'));
    defaults.push(limit('later'));
    expect(next.get('a')).toEqual(doc([limit('f')], [], [limit('d')]));
  });
});

describe('withPublished and withoutPublished (the published tier)', () => {
  const base = () => doc([], [], [limit('default')]);

  it('upserts by name into the published tier, other tiers kept; a missing document starts from the base', () => {
    const unreadable: string[] = [];
    const stored = doc([limit('file')], [limit('x', { limit: 1 }), limit('y')], []);
    const next = withPublished(
      new Map<string, unknown>([['a', stored]]),
      new Map([
        ['a', [limit('x', { limit: 2 }), limit('z')]],
        ['b', [limit('new')]],
      ]),
      { base, read: accept, onUnreadable: (l) => unreadable.push(l) },
    );
    expect(next.get('a')).toEqual(doc([limit('file')], [limit('x', { limit: 2 }), limit('y'), limit('z')], []));
    expect(next.get('b')).toEqual(doc([], [limit('new')], [limit('default')]));
    expect(unreadable).toEqual([]);
  });

  it('an unreadable document is reported and replaced by the base', () => {
    const unreadable: string[] = [];
    const next = withPublished(new Map([['a', 'garbage']]), new Map([['a', [limit('p')]]]), {
      base,
      read: accept,
      onUnreadable: (l) => unreadable.push(l),
    });
    expect(unreadable).toEqual(['a']);
    expect(next.get('a')).toEqual(doc([], [limit('p')], [limit('default')]));
  });

  it('removes one published rule by name and nothing else', () => {
    const stored = doc([limit('x')], [limit('x'), limit('y')], [limit('x')]);
    expect(withoutPublished(new Map([['a', stored]]), 'a', 'x', accept)).toEqual(
      new Map([['a', doc([limit('x')], [limit('y')], [limit('x')])]]),
    );
  });

  it('unknown_rule when the limiter has no published rule of that name, or no readable document', () => {
    const stored = doc([limit('x')], [limit('y')], [limit('x')]);
    for (const current of [new Map([['a', stored]]), new Map(), new Map([['a', 'garbage']])]) {
      expect(() => withoutPublished(current, 'a', 'x', accept)).toThrow(
        new RateLimitError('unknown_rule', 'limiter "a" has no published rule "x"'),
      );
      try {
        withoutPublished(current, 'a', 'x', accept);
      } catch (err) {
        expect((err as RateLimitError).code).toBe('unknown_rule');
      }
    }
    // A limiter with no stored document is not read at all (a reader logs what it cannot read).
    const read: string[] = [];
    expect(() =>
      withoutPublished(new Map(), 'a', 'x', (l, raw) => {
        read.push(l);
        return accept(l, raw);
      }),
    ).toThrow('limiter "a" has no published rule "x"');
    expect(read).toEqual([]);
  });
});

describe('weakening (a published rule replacing the default rule of its name)', () => {
  const base = limit('r', { limit: 10, period_s: 60, ban_for_s: 300, on_store_error: 'deny', match: { path: 'x' } });

  it('as strict or stricter on every count is no weakening', () => {
    expect(weakening(base, base)).toBeUndefined();
    expect(weakening(base, { ...base, limit: 5, period_s: 120, ban_for_s: 600 })).toBeUndefined();
    expect(weakening(limit('r', { action: 'log' }), limit('r'))).toBeUndefined();
    // A skip can only be replaced by something as binding or more.
    expect(weakening({ name: 'r', action: 'skip' }, limit('r', { limit: 1_000_000 }))).toBeUndefined();
  });

  it('names each way a replacement is weaker', () => {
    const cases: [Partial<RuleSpec>, string][] = [
      [{ action: 'log' }, 'turns action limit into log'],
      [{ action: 'skip' }, 'turns action limit into skip'],
      [{ limit: 11 }, 'raises limit from 10 to 11'],
      [{ limit: undefined }, 'raises limit from 10 to undefined'],
      [{ period_s: 59 }, 'shortens period_s from 60 to 59'],
      [{ period_s: undefined }, 'shortens period_s from 60 to undefined'],
      [{ ban_for_s: 299 }, 'shortens ban_for_s from 300 to 299'],
      [{ ban_for_s: undefined }, 'removes the 300 s ban'],
      [{ on_store_error: 'allow' }, 'turns on_store_error deny into allow'],
      [{ on_store_error: undefined }, 'turns on_store_error deny into allow'],
      [{ match: { path: 'y' } }, 'changes match'],
      [{ match: undefined }, 'changes match'],
      [{ characteristics: ['principal'] }, 'changes characteristics'],
      [{ count_distinct: 'principal' }, 'changes count_distinct'],
    ];
    for (const [change, why] of cases) expect(weakening(base, { ...base, ...change }), why).toBe(why);
    expect(weakening(limit('r', { action: 'log' }), limit('r', { action: 'skip' }))).toBe('turns action log into skip');
  });

  it('a base without a limit, window, ban or fail-closed setting leaves those free', () => {
    const loose: RuleSpec = { name: 'r', action: 'log', characteristics: ['ip'] };
    expect(
      weakening(loose, { ...loose, limit: 1_000, period_s: 1, ban_for_s: 1, on_store_error: 'allow' }),
    ).toBeUndefined();
  });
});

describe('bypasses', () => {
  const defaults = [limit('ban_ip_after_auth_failures', { ban_for_s: 60 }), limit('by_ip')];

  it('a skip anywhere, and a weaker rule named like a default, each with its position', () => {
    const rules: RuleSpec[] = [
      limit('mine'),
      { name: 'let_ci_through', action: 'skip', match: { principal: 'ci' } },
      limit('ban_ip_after_auth_failures', { action: 'log', ban_for_s: 60 }),
      limit('by_ip', { limit: 5 }),
      { name: 'by_ip', action: 'skip' },
    ];
    expect(bypassesIn(rules, defaults)).toEqual([
      { index: 1, rule: 'let_ci_through', weakens: undefined },
      { index: 2, rule: 'ban_ip_after_auth_failures', weakens: 'turns action limit into log' },
      { index: 4, rule: 'by_ip', weakens: undefined },
    ]);
    expect(bypassesIn([limit('mine', { limit: 1e9 })], defaults)).toEqual([]);
  });

  it('one line per bypass, naming where when given', () => {
    expect(describeBypass({ index: 0, rule: 's', weakens: undefined })).toBe('rule "s" is a bypass (skip) rule');
    expect(describeBypass({ index: 0, rule: 's', weakens: undefined }, 'gateway_request')).toBe(
      'rule "s" in gateway_request is a bypass (skip) rule',
    );
    expect(describeBypass({ index: 3, rule: 'w', weakens: 'raises limit from 1 to 2' }, 'auth_failure')).toBe(
      'rule "w" in auth_failure weakens the default rule of that name (raises limit from 1 to 2)',
    );
  });

  it('a batch with a bypass is refused whole, naming every one; one without passes', () => {
    expect(() => refuseBypassRules(new Map([['gateway_request', [limit('fine')]]]))).not.toThrow();
    const batch = new Map<string, RuleSpec[]>([
      ['gateway_request', [limit('fine'), { name: 'open', action: 'skip' }]],
      ['auth_failure', [limit('ban_ip_after_auth_failures', { ban_for_s: 10 })]],
    ]);
    let refused: RateLimitError | undefined;
    try {
      refuseBypassRules(batch, (l) => (l === 'auth_failure' ? defaults : []));
    } catch (err) {
      refused = err as RateLimitError;
    }
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(refused!.code).toBe('bypass_not_allowed');
    expect(refused!.message).toBe(
      'Refused: rule "open" in gateway_request is a bypass (skip) rule; rule "ban_ip_after_auth_failures" in auth_failure weakens the default rule of that name (shortens ban_for_s from 60 to 10). Only the principals in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS may publish bypass rules or weaken default rules; operators can also deploy them in ARKVORY_RATE_LIMITS_FILE.',
    );
    expect(refused!.problems).toEqual([
      {
        path: ['rate_limits', 'gateway_request', 1, 'action'],
        rule: 'open',
        message:
          'bypass (skip) rules may be published only by the principals in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS, or deployed in the operator file',
      },
      {
        path: ['rate_limits', 'auth_failure', 0],
        rule: 'ban_ip_after_auth_failures',
        message:
          'overrides the default rule "ban_ip_after_auth_failures" and shortens ban_for_s from 60 to 10; weakening a default rule is a bypass',
      },
    ]);
    // Without the defaults, a rule can only be a bypass by being a skip.
    expect(() =>
      refuseBypassRules(new Map([['auth_failure', [limit('ban_ip_after_auth_failures', { ban_for_s: 10 })]]])),
    ).not.toThrow();
  });
});
