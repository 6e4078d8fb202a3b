import { describe, expect, it } from 'vitest';
import {
  ALLOW_NOTHING_MATCHED,
  buildPlan,
  evaluate,
  storeFailure,
  summarize,
  type Outcome,
  type RuleState,
} from './evaluate.ts';
import { KEY_MEMO_MAX, RuleKeyMemo } from './keys.ts';
import { defineRule } from './rules.ts';

const T = Date.UTC(2026, 0, 1, 0, 0, 30);
const limit3 = defineRule({ name: 'l3', action: 'limit', characteristics: ['ip'], limit: 3, periodS: 60 });
const banned = defineRule({
  name: 'ban',
  action: 'limit',
  characteristics: ['ip'],
  limit: 3,
  periodS: 60,
  banForS: 600,
});
const shadow = defineRule({
  name: 'shadow',
  action: 'log',
  characteristics: ['ip'],
  limit: 1,
  periodS: 60,
  banForS: 60,
});
const distinct = defineRule({
  name: 'd',
  action: 'limit',
  characteristics: ['ip'],
  countDistinct: 'user',
  limit: 2,
  periodS: 60,
});
const skip = defineRule({ name: 'bypass', action: 'skip' });
const fresh: RuleState = { count: 0, banUntilMs: 0, isMember: false };

describe('evaluate (the reference the Lua must equal)', () => {
  const cases: Array<{
    name: string;
    rules: ReturnType<typeof defineRule>[];
    states: RuleState[];
    cost?: number;
    mode?: 'check' | 'peek';
    outcomes: object[];
    writes: string[];
  }> = [
    {
      name: 'first hit counts and resets at the aligned window end',
      rules: [limit3],
      states: [fresh],
      outcomes: [{ count: 1, exceeded: false, banned: false, resetAtMs: T + 30_000 }],
      writes: ['incr'],
    },
    {
      name: 'reaching the limit is not exceeding it',
      rules: [limit3],
      states: [{ ...fresh, count: 2 }],
      outcomes: [{ count: 3, exceeded: false }],
      writes: ['incr'],
    },
    {
      name: 'passing it is',
      rules: [limit3],
      states: [{ ...fresh, count: 3 }],
      outcomes: [{ count: 4, exceeded: true, banned: false }],
      writes: ['incr'],
    },
    {
      name: 'exceeding with ban_for_s starts a ban',
      rules: [banned],
      states: [{ ...fresh, count: 3 }],
      outcomes: [{ count: 4, exceeded: true, banned: true, resetAtMs: T + 600_000 }],
      writes: ['incr', 'ban'],
    },
    {
      name: 'an active ban blocks without counting',
      rules: [banned],
      states: [{ ...fresh, count: 0, banUntilMs: T + 5 }],
      outcomes: [{ count: 0, exceeded: true, banned: true, resetAtMs: T + 5 }],
      writes: [],
    },
    {
      name: 'a ban ending now is over',
      rules: [banned],
      states: [{ ...fresh, count: 0, banUntilMs: T }],
      outcomes: [{ count: 1, exceeded: false, banned: false }],
      writes: ['incr'],
    },
    {
      name: 'a blocking limit is terminal',
      rules: [limit3, banned],
      states: [{ ...fresh, count: 3 }, fresh],
      outcomes: [{ exceeded: true }],
      writes: ['incr'],
    },
    {
      name: 'an exceeded log rule is not',
      rules: [shadow, limit3],
      states: [{ ...fresh, count: 1 }, fresh],
      outcomes: [{ exceeded: true, banned: true }, { exceeded: false }],
      writes: ['incr', 'ban', 'incr'],
    },
    {
      name: 'distinct: a new value adds one',
      rules: [distinct],
      states: [{ ...fresh, count: 2 }],
      outcomes: [{ count: 3, exceeded: true }],
      writes: ['sadd'],
    },
    {
      name: 'distinct: a known value adds nothing',
      rules: [distinct],
      states: [{ ...fresh, count: 2, isMember: true }],
      outcomes: [{ count: 2, exceeded: false }],
      writes: ['sadd'],
    },
    {
      name: 'distinct: a set already past its limit takes no new value',
      rules: [distinct],
      states: [{ ...fresh, count: 3 }],
      outcomes: [{ count: 3, exceeded: true }],
      writes: [],
    },
    {
      name: 'a ban end further off than ban_for_s (written by a clock running ahead) resets ban_for_s from now',
      rules: [banned],
      states: [{ ...fresh, count: 0, banUntilMs: T + 3_600_000 }],
      outcomes: [{ count: 0, exceeded: true, banned: true, resetAtMs: T + 600_000 }],
      writes: [],
    },
    {
      name: 'float cost',
      rules: [limit3],
      states: [{ ...fresh, count: 2.5 }],
      cost: 0.75,
      outcomes: [{ count: 3.25, exceeded: true }],
      writes: ['incr'],
    },
    {
      name: 'a rule without ban_for_s ignores a ban left by an earlier version of it',
      rules: [limit3],
      states: [{ ...fresh, count: 1, banUntilMs: T + 5 }],
      outcomes: [{ count: 2, exceeded: false, banned: false, resetAtMs: T + 30_000 }],
      writes: ['incr'],
    },
    {
      name: 'peek of a distinct rule writes nothing',
      rules: [distinct],
      states: [{ ...fresh, count: 1 }],
      mode: 'peek',
      outcomes: [{ count: 2, exceeded: false }],
      writes: [],
    },
    {
      name: 'peek writes nothing',
      rules: [banned],
      states: [{ ...fresh, count: 3 }],
      mode: 'peek',
      outcomes: [{ count: 4, exceeded: true, banned: true }],
      writes: [],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const plan = buildPlan('p:', 'lim', c.rules, { ip: '1', user: 'u' }, T);
      const { outcomes, writes } = evaluate(plan, c.states, { nowMs: T, cost: c.cost ?? 1, mode: c.mode ?? 'check' });
      expect(outcomes).toHaveLength(c.outcomes.length);
      for (const [i, o] of c.outcomes.entries()) expect(outcomes[i]).toMatchObject(o);
      expect(writes.map((w) => w.op)).toEqual(c.writes);
    });
  }

  it('builds keys with the limiter prefix, one hash tag per counter and its ban', () => {
    const plan = buildPlan('arkvory:rl:', 'gateway_request', [banned], { ip: '10.0.0.1' }, T);
    expect(plan.counting[0]!.counterKey).toBe(`arkvory:rl:gateway_request:{ban|ip=10.0.0.1}:c:${T - 30_000}`);
    expect(plan.counting[0]!.banKey).toBe('arkvory:rl:gateway_request:{ban|ip=10.0.0.1}:b');
  });

  it('a key memo gives exactly the keys built afresh, across windows, identifiers, odd values and its bound', () => {
    const memo = new RuleKeyMemo();
    const two = defineRule({ name: 'two', action: 'limit', characteristics: ['ip', 'p'], limit: 3, periodS: 60 });
    const none = defineRule({ name: 'none', action: 'limit', limit: 3, periodS: 60 });
    const identifiers = [
      { ip: '10.0.0.1', p: 'a' },
      { ip: '10.0.0.1', p: 'b' },
      { ip: '10.0.0.1,p=b', p: undefined },
      { ip: 'a:b{c}|d', p: '%7B' },
      { p: 'x' },
      { ip: 'x'.repeat(300), p: 'y' },
    ];
    for (const at of [T, T + 5_000, T + 60_000, T + 3_600_000])
      for (const id of identifiers)
        for (const rules of [[limit3], [two], [none], [distinct], [banned, shadow]]) {
          const fresh = buildPlan('p:', 'lim', rules, id, at).counting;
          const memoized = buildPlan('p:', 'lim', rules, id, at, memo).counting;
          expect(memoized.map((c) => [c.counterKey, c.banKey])).toEqual(fresh.map((c) => [c.counterKey, c.banKey]));
        }
    for (let i = 0; i < KEY_MEMO_MAX + 10; i++) {
      const id = { ip: `10.1.${i >> 8}.${i & 255}` };
      expect(buildPlan('p:', 'lim', [limit3], id, T, memo).counting[0]!.counterKey).toBe(
        buildPlan('p:', 'lim', [limit3], id, T).counting[0]!.counterKey,
      );
    }
  });

  it('a key memo keeps no long client-chosen value (its memory is bounded by count and size)', () => {
    const memo = new RuleKeyMemo();
    const rule = defineRule({ name: 'r', action: 'limit', characteristics: ['repository'], limit: 3, periodS: 60 });
    const keysOf = (repository: string) => memo.keys('p:', 'lim', rule, { repository }, T);
    expect(keysOf('short')).toBe(keysOf('short'));
    const long = 'r'.repeat(16_000);
    const first = keysOf(long);
    const again = keysOf(long);
    expect(again).not.toBe(first);
    expect([again.counterKey, again.banKey]).toEqual([first.counterKey, first.banKey]);
    expect(first.counterKey.length).toBeLessThan(200);
    // Two characteristics are memoized by their encoded values, which are short.
    const two = defineRule({
      name: 't',
      action: 'limit',
      characteristics: ['repository', 'ip'],
      limit: 3,
      periodS: 60,
    });
    const both = () => memo.keys('p:', 'lim', two, { repository: long, ip: 'a' }, T);
    expect(both()).toBe(both());
  });

  it('refuses a limit or period that resolves to a negative or non-finite number, naming it', () => {
    const negative = defineRule({
      name: 'neg',
      action: 'limit',
      characteristics: ['ip'],
      limit: () => -1,
      periodS: 60,
    });
    expect(() => buildPlan('p:', 'lim', [negative], { ip: '1' }, T)).toThrow(
      new TypeError('rule "neg": limit resolved to -1, expected a non-negative number'),
    );
    const period = defineRule({ name: 'per', action: 'limit', characteristics: ['ip'], limit: 1, periodS: () => NaN });
    expect(() => buildPlan('p:', 'lim', [period], { ip: '1' }, T)).toThrow(
      'rule "per": period_s resolved to NaN, expected a non-negative number',
    );
  });

  it('nothing matched: allow, not exceeded, no rule and no info', () => {
    expect(ALLOW_NOTHING_MATCHED).toEqual({
      action: 'allow',
      exceeded: false,
      rule: undefined,
      error: undefined,
      info: undefined,
      evaluations: [],
    });
  });

  describe('summarize picks the most constraining rule', () => {
    const rule = (name: string, action: 'limit' | 'log', limit: number, periodS: number) =>
      defineRule({ name, action, characteristics: ['ip'], limit, periodS });
    const outcome = (count: number, resetAtMs: number, exceeded = false): Outcome => ({
      count,
      exceeded,
      banned: false,
      resetAtMs,
    });
    const pick = (rules: ReturnType<typeof rule>[], outcomes: Outcome[]) =>
      summarize(buildPlan('p:', 'lim', rules, { ip: '1' }, T), outcomes);

    it('an exceeded shadow rule is the rule, but the enforcing one with the least remaining is what a client is told', () => {
      const r = pick(
        [rule('shadow', 'log', 1, 60), rule('wide', 'limit', 100, 60), rule('narrow', 'limit', 10, 60)],
        [outcome(2, T + 30_000, true), outcome(2, T + 30_000), outcome(2, T + 30_000)],
      );
      expect([r.action, r.exceeded, r.rule?.name]).toEqual(['allow', true, 'shadow']);
      expect(r.enforcing?.rule.name).toBe('narrow');
      expect(r.enforcing?.info).toEqual({
        resolvedLimit: 10,
        resolvedPeriodS: 60,
        resetAtMs: T + 30_000,
        remaining: 8,
      });
      const blocked = pick(
        [rule('shadow', 'log', 1, 60), rule('narrow', 'limit', 1, 60)],
        [outcome(2, T + 30_000, true), outcome(2, T + 30_000, true)],
      );
      expect([blocked.action, blocked.rule?.name, blocked.enforcing?.rule.name]).toEqual(['block', 'narrow', 'narrow']);
      expect(pick([rule('shadow', 'log', 1, 60)], [outcome(2, T + 30_000, true)]).enforcing).toBeUndefined();
    });

    it('the limit rule with the least remaining; on a tie, the earliest reset', () => {
      const a = rule('a', 'limit', 10, 60);
      const b = rule('b', 'limit', 10, 3600);
      expect(pick([a, b], [outcome(5, T + 30_000), outcome(6, T + 3_570_000)]).rule?.name).toBe('b');
      expect(pick([a, b], [outcome(6, T + 30_000), outcome(5, T + 3_570_000)]).rule?.name).toBe('a');
      // Equal remaining: the earlier reset wins, whichever comes first.
      expect(pick([a, b], [outcome(5, T + 30_000), outcome(5, T + 3_570_000)]).rule?.name).toBe('a');
      expect(pick([b, a], [outcome(5, T + 3_570_000), outcome(5, T + 30_000)]).rule?.name).toBe('a');
      // Less remaining wins even against an earlier reset.
      expect(pick([b, a], [outcome(6, T + 3_570_000), outcome(5, T + 30_000)]).rule?.name).toBe('b');
      // Equal remaining and reset: the first.
      expect(pick([a, b], [outcome(5, T + 30_000), outcome(5, T + 30_000)]).rule?.name).toBe('a');
    });

    it('with only log rules: the first exceeded one, else the one with the least remaining', () => {
      const x = rule('x', 'log', 10, 60);
      const y = rule('y', 'log', 10, 60);
      const z = rule('z', 'log', 10, 60);
      const exceeded = pick(
        [x, y, z],
        [outcome(3, T + 30_000), outcome(11, T + 30_000, true), outcome(12, T + 30_000, true)],
      );
      expect(exceeded).toMatchObject({ action: 'allow', exceeded: true, rule: { name: 'y' }, info: { remaining: 0 } });
      const calm = pick([x, y, z], [outcome(3, T + 30_000), outcome(8, T + 30_000), outcome(5, T + 30_000)]);
      expect(calm).toMatchObject({ action: 'allow', exceeded: false, rule: { name: 'y' }, info: { remaining: 2 } });
    });

    it('a limit rule that passes is reported before an unexceeded log rule with less remaining', () => {
      const limit = rule('limit', 'limit', 10, 60);
      const log = rule('log', 'log', 10, 60);
      expect(pick([log, limit], [outcome(9, T + 30_000), outcome(2, T + 30_000)]).rule?.name).toBe('limit');
    });
  });

  it('summarize: a skip alone reports the skip rule and no info; rules counted before it still report; an unreached skip is not reported', () => {
    const alone = summarize(buildPlan('p:', 'lim', [skip], { ip: '1' }, T), []);
    expect(alone).toMatchObject({ action: 'allow', exceeded: false, rule: { name: 'bypass' }, info: undefined });
    const plan = buildPlan('p:', 'lim', [limit3, skip], { ip: '1' }, T);
    expect(plan.skip?.name).toBe('bypass');
    const passed = summarize(plan, [{ count: 1, exceeded: false, banned: false, resetAtMs: T + 30_000 }]);
    expect(passed).toMatchObject({ action: 'allow', rule: { name: 'l3' }, info: { remaining: 2 } });
    expect(passed.evaluations.map((e) => e.result)).toEqual(['allow', 'skip']);
    const blocked = summarize(plan, [{ count: 4, exceeded: true, banned: false, resetAtMs: T + 30_000 }]);
    expect(blocked).toMatchObject({ action: 'block', rule: { name: 'l3' }, info: { remaining: 0 } });
    expect(blocked.evaluations.map((e) => e.result)).toEqual(['exceeded']);
  });

  describe('storeFailure: the verdict when the store failed', () => {
    const closed = (name: string) =>
      defineRule({ name, action: 'limit', characteristics: ['ip'], limit: 5, periodS: 60, onStoreError: 'deny' });
    const open = defineRule({
      name: 'open',
      action: 'limit',
      characteristics: ['ip'],
      limit: 5,
      periodS: 60,
      onStoreError: 'allow',
    });
    const failed = (rules: ReturnType<typeof defineRule>[], error = new Error('down')) =>
      storeFailure(buildPlan('p:', 'lim', rules, { ip: '1' }, T), error);

    it('fails open when no rule says deny (absent or allow), carrying the error and no rule', () => {
      const error = new Error('down');
      for (const rules of [[limit3], [open], [limit3, open, shadow], []]) {
        const result = failed(rules, error);
        expect(result).toEqual({
          action: 'allow',
          exceeded: false,
          rule: undefined,
          error,
          info: undefined,
          evaluations: [],
        });
        expect(result.error).toBe(error);
      }
    });

    it('blocks with the first fail-closed rule, not exceeded, no info, one store_error evaluation', () => {
      const error = new Error('down');
      const result = failed([limit3, open, closed('first'), closed('second')], error);
      expect(result).toEqual({
        action: 'block',
        exceeded: false,
        rule: expect.objectContaining({ name: 'first' }),
        error,
        info: undefined,
        evaluations: [{ rule: expect.objectContaining({ name: 'first' }), result: 'store_error', count: 0 }],
      });
      expect(result.error).toBe(error);
      expect(failed([closed('only')]).rule?.name).toBe('only');
    });

    it('a skip before a fail-closed rule still bypasses it; one after it does not', () => {
      expect(failed([skip, closed('after')]).action).toBe('allow');
      expect(failed([closed('before'), skip])).toMatchObject({ action: 'block', rule: { name: 'before' } });
    });
  });
});
