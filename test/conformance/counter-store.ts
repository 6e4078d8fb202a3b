/**
 * The behaviour table every CounterStore must pass (memory in policy/rate-limit/memory-counter-store.test.ts,
 * memory and real Redis in policy/rate-limit/counter-store.int.test.ts, a Redis Cluster in
 * test/hosts/redis-cluster.hosts.test.ts). Time is a ManualClock passed as the check's "now"; no test sleeps.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { createLimiter, type Limiter } from '../../policy/rate-limit/limiter.ts';
import { ANONYMOUS, type Identifier } from '../../policy/rate-limit/match.ts';
import { defineRule, type Rule } from '../../policy/rate-limit/rules.ts';
import type { CounterStore } from '../../policy/rate-limit/counter-store.ts';

export interface ConformanceContext {
  store: CounterStore;
  /** A fresh key prefix per test, so tests never share counters. */
  prefix: string;
}

/** 2026-01-01T00:00:00Z: window arithmetic below assumes the clock starts on a minute boundary. */
export const T0 = Date.UTC(2026, 0, 1);

export function counterStoreConformance(
  name: string,
  open: () => Promise<ConformanceContext> | ConformanceContext,
): void {
  const setup = async (rules: Rule[]) => {
    const ctx = await open();
    const clock = new ManualClock(T0, 0);
    const limiter = createLimiter(
      { store: ctx.store, clock, log: pino({ level: 'silent' }), keyPrefix: ctx.prefix, timeoutMs: 2000 },
      { name: 'test_limiter', rules },
    );
    return { clock, limiter, ctx };
  };
  const hit = async (limiter: Limiter, id: Identifier, times: number, cost?: number) => {
    const results = [];
    for (let i = 0; i < times; i++) results.push(await limiter.check(id, cost === undefined ? undefined : { cost }));
    return results;
  };
  const perIp = (extra: Partial<Parameters<typeof defineRule>[0]> = {}) =>
    defineRule({ name: 'per_ip', action: 'limit', characteristics: ['ip'], limit: 3, periodS: 60, ...extra });

  describe(`CounterStore conformance: ${name}`, () => {
    it('allows up to the limit, then blocks until the aligned window ends', async () => {
      const { clock, limiter } = await setup([perIp()]);
      clock.advance(10_000);
      const results = await hit(limiter, { ip: '1.1.1.1' }, 4);
      expect(results.map((r) => r.action)).toEqual(['allow', 'allow', 'allow', 'block']);
      expect(results[0]).toMatchObject({
        exceeded: false,
        error: undefined,
        info: { resolvedLimit: 3, resolvedPeriodS: 60, remaining: 2, resetAtMs: T0 + 60_000 },
      });
      expect(results[3]).toMatchObject({
        exceeded: true,
        rule: { name: 'per_ip' },
        info: { remaining: 0, resetAtMs: T0 + 60_000 },
      });
      expect((await limiter.check({ ip: '2.2.2.2' })).action).toBe('allow');
      clock.advance(49_999);
      expect((await limiter.check({ ip: '1.1.1.1' })).action).toBe('block');
      clock.advance(1);
      const next = await limiter.check({ ip: '1.1.1.1' });
      expect(next).toMatchObject({ action: 'allow', info: { remaining: 2, resetAtMs: T0 + 120_000 } });
    });

    it('counts blocked requests too (the window does not move)', async () => {
      const { limiter } = await setup([perIp({ limit: 1 })]);
      await hit(limiter, { ip: 'a' }, 5);
      const peek = await limiter.peek({ ip: 'a' }, { cost: 0 });
      expect(peek.exceeded).toBe(true);
    });

    it('needs every limit rule to pass; the blocking one is terminal and reported', async () => {
      const rules = [
        defineRule({ name: 'per_user', action: 'limit', characteristics: ['user'], limit: 2, periodS: 60 }),
        defineRule({ name: 'per_org', action: 'limit', characteristics: ['org'], limit: 3, periodS: 60 }),
      ];
      const { limiter } = await setup(rules);
      const a = await hit(limiter, { user: 'u1', org: 'o' }, 3);
      expect(a.map((r) => r.action)).toEqual(['allow', 'allow', 'block']);
      expect(a[1]!.rule!.name).toBe('per_user');
      expect(a[1]!.info!.remaining).toBe(0);
      expect(a[2]!.rule!.name).toBe('per_user');
      expect(a[2]!.evaluations.map((e) => [e.rule.name, e.result])).toEqual([['per_user', 'exceeded']]);
      // The third request stopped at per_user, so per_org saw two; u2 gets one more, then org blocks.
      const b = await hit(limiter, { user: 'u2', org: 'o' }, 2);
      expect(b.map((r) => [r.action, r.rule?.name])).toEqual([
        ['allow', 'per_org'],
        ['block', 'per_org'],
      ]);
    });

    it('a log rule counts and reports exceeded but never blocks nor stops later rules', async () => {
      const rules = [
        defineRule({ name: 'shadow_low', action: 'log', characteristics: ['ip'], limit: 1, periodS: 60 }),
        defineRule({ name: 'enforced', action: 'limit', characteristics: ['ip'], limit: 3, periodS: 60 }),
      ];
      const { limiter } = await setup(rules);
      const r = await hit(limiter, { ip: 'x' }, 4);
      expect(r.map((x) => x.action)).toEqual(['allow', 'allow', 'allow', 'block']);
      expect(r[0]).toMatchObject({ exceeded: false, rule: { name: 'enforced' } });
      expect(r[1]).toMatchObject({ action: 'allow', exceeded: true, rule: { name: 'shadow_low' } });
      expect(r[3]).toMatchObject({ exceeded: true, rule: { name: 'enforced' } });
      expect(r[3]!.evaluations.map((e) => e.result)).toEqual(['exceeded', 'exceeded']);
    });

    it('a skip rule is terminal: nothing after it counts; no info', async () => {
      const rules = [defineRule({ name: 'bypass_ci', action: 'skip', match: { user: 'ci' } }), perIp({ limit: 1 })];
      const { limiter } = await setup(rules);
      const ci = await hit(limiter, { user: 'ci', ip: 'same' }, 3);
      expect(
        ci.every((r) => r.action === 'allow' && r.rule?.name === 'bypass_ci' && r.info === undefined && !r.exceeded),
      ).toBe(true);
      expect((await limiter.check({ user: 'bob', ip: 'same' })).action).toBe('allow');
      expect((await limiter.check({ user: 'bob', ip: 'same' })).action).toBe('block');
    });

    it('matches equality and regex markers; all must hold; a missing property never matches', async () => {
      const rule = defineRule({
        name: 'api_writes',
        action: 'limit',
        limit: 0,
        periodS: 60,
        characteristics: ['ip'],
        match: { method: 'PUT', path: { regex: '^/api/v\\d+/' } },
      });
      const { limiter } = await setup([rule]);
      expect((await limiter.check({ ip: 'i', method: 'PUT', path: '/api/v1/x' })).action).toBe('block');
      expect((await limiter.check({ ip: 'i', method: 'GET', path: '/api/v1/x' })).rule).toBeUndefined();
      expect((await limiter.check({ ip: 'i', method: 'PUT', path: '/web/api/v1' })).rule).toBeUndefined();
      expect((await limiter.check({ ip: 'i', method: 'PUT' })).rule).toBeUndefined();
    });

    it('anonymous callers count by ip, authenticated ones by user (the <anonymous> sentinel)', async () => {
      const rules = [
        defineRule({
          name: 'anonymous_by_ip',
          action: 'limit',
          limit: 1,
          periodS: 60,
          characteristics: ['ip'],
          match: { user: ANONYMOUS },
        }),
        defineRule({
          name: 'authenticated_by_user',
          action: 'limit',
          limit: 2,
          periodS: 60,
          characteristics: ['user'],
          match: { user: { regex: '^[^<]' } },
        }),
      ];
      const { limiter } = await setup(rules);
      expect((await hit(limiter, { user: ANONYMOUS, ip: 'n' }, 2)).map((r) => r.action)).toEqual(['allow', 'block']);
      expect((await hit(limiter, { user: 'alice', ip: 'n' }, 3)).map((r) => [r.action, r.rule?.name])).toEqual([
        ['allow', 'authenticated_by_user'],
        ['allow', 'authenticated_by_user'],
        ['block', 'authenticated_by_user'],
      ]);
    });

    it('a ban outlives the window, suppresses counting, and resetAt is the ban end', async () => {
      const rule = defineRule({
        name: 'auth_failures',
        action: 'limit',
        characteristics: ['ip'],
        limit: 2,
        periodS: 60,
        banForS: 900,
      });
      const { clock, limiter } = await setup([rule]);
      const r = await hit(limiter, { ip: 'b' }, 3);
      expect(r.map((x) => x.action)).toEqual(['allow', 'allow', 'block']);
      expect(r[2]!.info).toMatchObject({ resetAtMs: T0 + 900_000, remaining: 0 });
      expect(r[2]!.evaluations[0]!.result).toBe('banned');
      clock.advance(30_000);
      const during = await hit(limiter, { ip: 'b' }, 3);
      expect(during.every((x) => x.action === 'block' && x.info!.resetAtMs === T0 + 900_000)).toBe(true);
      // Retrying did not count: in the same window the counter still holds the 3 requests before the ban.
      expect(during.map((x) => x.evaluations[0]!.count)).toEqual([3, 3, 3]);
      expect((await limiter.peek({ ip: 'b' }, { cost: 0 })).evaluations[0]!.count).toBe(3);
      // The next window starts empty, the ban still blocks, exceeded follows the ban.
      clock.advance(60_000);
      const nextWindow = await limiter.peek({ ip: 'b' }, { cost: 0 });
      expect(nextWindow).toMatchObject({ action: 'block', exceeded: true, info: { resetAtMs: T0 + 900_000 } });
      clock.advance(900_000 - 90_000 - 1);
      expect((await limiter.check({ ip: 'b' })).action).toBe('block');
      clock.advance(1);
      const after = await hit(limiter, { ip: 'b' }, 3);
      expect(after.map((x) => x.action)).toEqual(['allow', 'allow', 'block']);
      expect(after[2]!.info!.resetAtMs).toBe(T0 + 900_000 + 900_000);
    });

    it('a shadow (log) ban counts and bans exactly like an enforcing one but never blocks', async () => {
      const rule = defineRule({
        name: 'shadow_ban',
        action: 'log',
        characteristics: ['ip'],
        limit: 1,
        periodS: 60,
        banForS: 300,
      });
      const { clock, limiter } = await setup([rule]);
      const r = await hit(limiter, { ip: 's' }, 4);
      expect(r.map((x) => [x.action, x.exceeded])).toEqual([
        ['allow', false],
        ['allow', true],
        ['allow', true],
        ['allow', true],
      ]);
      expect(r[3]!.info!.resetAtMs).toBe(T0 + 300_000);
      expect(r[3]!.evaluations[0]!.result).toBe('banned');
      // During the ban nothing counted: the window's counter holds the 2 requests up to the ban.
      expect(r.map((x) => x.evaluations[0]!.count)).toEqual([1, 2, 2, 2]);
      expect((await limiter.peek({ ip: 's' }, { cost: 0 })).evaluations[0]!.count).toBe(2);
      clock.advance(300_000);
      // After the ban, a new window: one request passes cleanly.
      expect((await limiter.check({ ip: 's' })).exceeded).toBe(false);
    });

    it('clear drops counters, bans and shadow bans of one identifier only', async () => {
      const rules = [
        defineRule({ name: 'shadow', action: 'log', characteristics: ['ip'], limit: 1, periodS: 60, banForS: 300 }),
        defineRule({ name: 'enforced', action: 'limit', characteristics: ['ip'], limit: 1, periodS: 60, banForS: 300 }),
      ];
      const { limiter } = await setup(rules);
      await hit(limiter, { ip: 'c' }, 2);
      await hit(limiter, { ip: 'd' }, 2);
      expect((await limiter.peek({ ip: 'c' }, { cost: 0 })).action).toBe('block');
      await limiter.clear({ ip: 'c' });
      const cleared = await limiter.check({ ip: 'c' });
      expect(cleared).toMatchObject({ action: 'allow', exceeded: false });
      expect(cleared.evaluations.map((e) => e.result)).toEqual(['allow', 'allow']);
      expect((await limiter.peek({ ip: 'd' }, { cost: 0 })).action).toBe('block');
    });

    it('count_distinct counts distinct values of a property; repeats are free', async () => {
      const rule = defineRule({
        name: 'distinct_users_per_ip',
        action: 'limit',
        characteristics: ['ip'],
        countDistinct: 'username',
        limit: 2,
        periodS: 3600,
      });
      const { limiter } = await setup([rule]);
      const seq = ['a', 'a', 'b', 'b', 'a', 'c', 'a'];
      const results = [];
      for (const u of seq) results.push(await limiter.check({ ip: 'i', username: u }));
      // The blocked third value was still recorded (blocked requests count), so the set stays over.
      expect(results.map((r) => r.action)).toEqual(['allow', 'allow', 'allow', 'allow', 'allow', 'block', 'block']);
      expect(results[0]!.info).toMatchObject({ remaining: 1 });
      expect(results[0]!.evaluations[0]!.count).toBe(1);
      expect(results[5]!.info).toMatchObject({ remaining: 0 });
      expect(results[2]!.info).toMatchObject({ remaining: 0, resolvedLimit: 2 });
      // A missing value is one distinct value, `_unknown_`.
      expect((await limiter.check({ ip: 'j' })).action).toBe('allow');
      expect((await limiter.check({ ip: 'j' })).info!.remaining).toBe(1);
    });

    it('a distinct set past its limit takes no new value: client-chosen values cannot grow it per request', async () => {
      const rule = defineRule({
        name: 'distinct_repos',
        action: 'log',
        characteristics: ['ip'],
        countDistinct: 'repository',
        limit: 2,
        periodS: 3600,
      });
      const { limiter, clock } = await setup([rule]);
      const results = [];
      for (let i = 0; i < 40; i++) results.push(await limiter.check({ ip: 'i', repository: `repo-${i}` }));
      // The verdicts are those of an unbounded set; the count (and the set) stops at limit + 1.
      expect(results.map((r) => r.exceeded)).toEqual([false, false, ...Array<boolean>(38).fill(true)]);
      expect(results.map((r) => r.evaluations[0]!.count)).toEqual([1, 2, ...Array<number>(38).fill(3)]);
      expect((await limiter.check({ ip: 'i', repository: 'repo-0' })).evaluations[0]!.count).toBe(3);
      expect((await limiter.peek({ ip: 'i', repository: 'new' })).evaluations[0]!.count).toBe(3);
      // A value refused while the set was full is still new once the window starts again.
      clock.advance(3600_000);
      expect((await limiter.check({ ip: 'i', repository: 'repo-39' })).evaluations[0]!.count).toBe(1);
    });

    it('float costs add up exactly and exceed only past the limit', async () => {
      const rule = defineRule({ name: 'db_seconds', action: 'limit', characteristics: ['ns'], limit: 2, periodS: 60 });
      const { limiter } = await setup([rule]);
      const r = await hit(limiter, { ns: 'n' }, 4, 0.5);
      expect(r.map((x) => x.action)).toEqual(['allow', 'allow', 'allow', 'allow']);
      expect(r[3]!.info!.remaining).toBe(0);
      const over = await limiter.check({ ns: 'n' }, { cost: 0.25 });
      expect(over.action).toBe('block');
      // Exceeded without a ban: reported as exceeded, not banned.
      expect(over.evaluations.map((e) => e.result)).toEqual(['exceeded']);
      expect((await limiter.check({ ns: 'm' }, { cost: 1.75 })).info!.remaining).toBe(0.25);
    });

    it('integer and float costs mix on one counter', async () => {
      const rule = defineRule({ name: 'mixed', action: 'limit', characteristics: ['ns'], limit: 5, periodS: 60 });
      const { limiter } = await setup([rule]);
      expect((await limiter.check({ ns: 'n' }, { cost: 1 })).info!.remaining).toBe(4);
      expect((await limiter.check({ ns: 'n' }, { cost: 1.5 })).info!.remaining).toBe(2.5);
      expect((await limiter.check({ ns: 'n' }, { cost: 2 })).info!.remaining).toBe(0.5);
      expect((await limiter.check({ ns: 'n' }, { cost: 1 })).action).toBe('block');
    });

    it('many checks started together count exactly once each (batched or not)', async () => {
      const { limiter } = await setup([
        perIp({ limit: 250 }),
        defineRule({ name: 'shadow', action: 'log', characteristics: ['ip'], limit: 100, periodS: 60 }),
      ]);
      const results = await Promise.all(
        Array.from({ length: 300 }, (_, i) => limiter.check({ ip: i % 2 ? 'odd' : 'even' })),
      );
      expect(results.filter((r) => r.error !== undefined)).toEqual([]);
      expect(results.filter((r) => r.action === 'block').length).toBe(0);
      const all = await Promise.all(Array.from({ length: 400 }, () => limiter.check({ ip: 'together' })));
      expect(all.filter((r) => r.action === 'allow').length).toBe(250);
      expect(all.filter((r) => r.action === 'block').length).toBe(150);
      // Counted once each, however the store batched them.
      expect((await limiter.peek({ ip: 'together' }, { cost: 0 })).evaluations[0]!.count).toBe(400);
      // The blocking rule is terminal: the blocked checks never reached the shadow rule.
      expect(all.filter((r) => r.evaluations.length === 2).length).toBe(250);
      expect(
        all.filter((r) => r.evaluations.some((e) => e.rule.name === 'shadow' && e.result === 'exceeded')).length,
      ).toBe(150);
    });

    it('peek returns the verdict for the cost without counting or banning', async () => {
      const rule = defineRule({
        name: 'bytes',
        action: 'limit',
        characteristics: ['p'],
        limit: 100,
        periodS: 60,
        banForS: 60,
      });
      const { limiter } = await setup([rule]);
      expect((await limiter.peek({ p: 'x' }, { cost: 101 })).action).toBe('block');
      expect((await limiter.peek({ p: 'x' })).info!.remaining).toBe(99);
      await limiter.check({ p: 'x' }, { cost: 60 });
      expect((await limiter.peek({ p: 'x' }, { cost: 40 })).action).toBe('allow');
      expect((await limiter.peek({ p: 'x' }, { cost: 41 })).action).toBe('block');
      // The peeks neither counted nor banned.
      expect((await limiter.check({ p: 'x' }, { cost: 40 })).action).toBe('allow');
    });

    it('a missing characteristic counts as _unknown_; long values are hashed without collisions', async () => {
      const { limiter } = await setup([perIp({ limit: 1 })]);
      expect((await limiter.check({})).action).toBe('allow');
      expect((await limiter.check({ other: 'x' })).action).toBe('block');
      const long = 'x'.repeat(250);
      expect((await limiter.check({ ip: `${long}1` })).action).toBe('allow');
      expect((await limiter.check({ ip: `${long}2` })).action).toBe('allow');
      expect((await limiter.check({ ip: `${long}1` })).action).toBe('block');
      // Separators inside values cannot forge another key.
      const pair = [defineRule({ name: 'pair', action: 'limit', characteristics: ['a', 'b'], limit: 1, periodS: 60 })];
      const second = await setup(pair);
      expect((await second.limiter.check({ a: 'x,b=y', b: 'z' })).action).toBe('allow');
      expect((await second.limiter.check({ a: 'x', b: 'y,b=z' })).action).toBe('allow');
    });

    it('resolves callable limits at check time (spec 1.7)', async () => {
      let limit = 1;
      const rule = defineRule({
        name: 'dynamic',
        action: 'limit',
        characteristics: ['ip'],
        limit: () => limit,
        periodS: () => 60,
      });
      const { limiter } = await setup([rule]);
      expect((await hit(limiter, { ip: 'q' }, 2)).map((r) => r.action)).toEqual(['allow', 'block']);
      limit = 5;
      expect((await limiter.check({ ip: 'q' })).info).toMatchObject({ resolvedLimit: 5, remaining: 2 });
    });

    it('a limiter whose rules change keeps counting by rule name (same name, same counter)', async () => {
      let rules: Rule[] = [perIp({ limit: 10 })];
      const ctx = await open();
      const clock = new ManualClock(T0, 0);
      const limiter = createLimiter(
        { store: ctx.store, clock, log: pino({ level: 'silent' }), keyPrefix: ctx.prefix, timeoutMs: 2000 },
        { name: 'test_limiter', rules: () => rules },
      );
      await hit(limiter, { ip: 'z' }, 3);
      rules = [perIp({ limit: 3 })];
      expect((await limiter.check({ ip: 'z' })).action).toBe('block');
      rules = [defineRule({ name: 'renamed', action: 'limit', characteristics: ['ip'], limit: 3, periodS: 60 })];
      expect((await limiter.check({ ip: 'z' })).action).toBe('allow');
    });
  });
}
