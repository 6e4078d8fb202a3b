import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { useTestRedis } from '../../test/support/redis.ts';
import { ManualClock } from '../clock.ts';
import { buildPlan } from './evaluate.ts';
import { createLimiter } from './limiter.ts';
import { createMemoryCounterStore } from './memory-counter-store.ts';
import { CHECK_SCRIPT, createRedisCounterStore } from './redis-counter-store.ts';
import { defineRule } from './rules.ts';
import { counterStoreConformance, T0 } from './counter-store-conformance.ts';

const redis = useTestRedis();
let n = 0;
counterStoreConformance('redis', () => ({
  store: createRedisCounterStore(redis.client),
  prefix: `${redis.prefix}${++n}:`,
}));
counterStoreConformance('memory (same table, same run)', () => ({
  store: createMemoryCounterStore(),
  prefix: `m${++n}:`,
}));

describe('redis store specifics', () => {
  const rule = defineRule({ name: 'r', action: 'limit', characteristics: ['ip'], limit: 1, periodS: 60, banForS: 600 });
  const limiterOn = (prefix: string, clock = new ManualClock(T0, 0)) =>
    createLimiter(
      {
        store: createRedisCounterStore(redis.client),
        clock,
        log: pino({ level: 'silent' }),
        keyPrefix: prefix,
        timeoutMs: 2000,
      },
      { name: 'lim', rules: [rule] },
    );

  it('gives every key a TTL, keeps a counter and its ban in one cluster slot, and heals a key left without TTL', async () => {
    const prefix = `${redis.prefix}ttl:`;
    const limiter = limiterOn(prefix);
    await limiter.check({ ip: 'a' });
    await limiter.check({ ip: 'a' });
    const plan = buildPlan(prefix, 'lim', [rule], { ip: 'a' }, T0);
    const { counterKey, banKey } = plan.counting[0]!;
    // Redis Cluster hashes only the first {…} section, so equal tags mean one slot.
    const tag = (key: string) => key.slice(key.indexOf('{') + 1, key.indexOf('}', key.indexOf('{')));
    expect(tag(counterKey)).toBe('r|ip=a');
    expect(tag(banKey)).toBe(tag(counterKey));
    const counterTtl = await redis.client.pttl(counterKey);
    const banTtl = await redis.client.pttl(banKey);
    expect(counterTtl).toBeGreaterThan(59_000);
    expect(counterTtl).toBeLessThanOrEqual(61_000);
    expect(banTtl).toBeGreaterThan(599_000);
    expect(banTtl).toBeLessThanOrEqual(600_000);
    await redis.client.persist(counterKey);
    expect(await redis.client.pttl(counterKey)).toBe(-1);
    await limiterOn(prefix)
      .check({ ip: 'a' })
      .catch(() => undefined);
    // Banned: no counting, so the key is untouched (no increment, still no TTL).
    expect(await redis.client.get(counterKey)).toBe('2');
    expect(await redis.client.pttl(counterKey)).toBe(-1);
    // A fresh identifier shows the healing on write.
    const other = buildPlan(prefix, 'lim', [rule], { ip: 'b' }, T0).counting[0]!.counterKey;
    await redis.client.set(other, '0');
    await limiterOn(prefix).check({ ip: 'b' });
    expect(await redis.client.pttl(other)).toBeGreaterThan(59_000);
  });

  it('survives SCRIPT FLUSH (NOSCRIPT → EVAL fallback) and runs one script per check', async () => {
    const prefix = `${redis.prefix}noscript:`;
    const limiter = limiterOn(prefix);
    expect((await limiter.check({ ip: 'n' })).action).toBe('allow');
    await redis.client.script('FLUSH');
    expect((await limiter.check({ ip: 'n' })).action).toBe('block');
  });

  it('batches plain checks into one script call; a counter of the wrong type fails only its own check', async () => {
    const prefix = `${redis.prefix}batch:`;
    const plain = defineRule({ name: 'p', action: 'limit', characteristics: ['ip'], limit: 100, periodS: 60 });
    const limiter = createLimiter(
      {
        store: createRedisCounterStore(redis.client),
        clock: new ManualClock(T0, 0),
        log: pino({ level: 'silent' }),
        keyPrefix: prefix,
        timeoutMs: 2000,
      },
      { name: 'lim', rules: [plain] },
    );
    const bad = buildPlan(prefix, 'lim', [plain], { ip: 'bad' }, T0).counting[0]!.counterKey;
    await redis.client.hset(bad, 'f', 'v');
    const before = Number((await redis.client.info('commandstats')).match(/cmdstat_evalsha:calls=(\d+)/)?.[1] ?? 0);
    const results = await Promise.all(['a', 'bad', 'b', 'a'].map((ip) => limiter.check({ ip })));
    const after = Number((await redis.client.info('commandstats')).match(/cmdstat_evalsha:calls=(\d+)/)?.[1] ?? 0);
    expect(results.map((r) => [r.action, r.error === undefined ? 'ok' : (r.error as { code?: string }).code])).toEqual([
      ['allow', 'ok'],
      ['allow', 'store_unavailable'],
      ['allow', 'ok'],
      ['allow', 'ok'],
    ]);
    expect(results[3]!.info!.remaining).toBe(98);
    // Other clients share this server, so "one call" is a bound: far fewer calls than checks.
    expect(after - before).toBeLessThan(4);
    // count.lua gives a new counter its TTL and heals one left without.
    const a = buildPlan(prefix, 'lim', [plain], { ip: 'a' }, T0).counting[0]!.counterKey;
    expect(await redis.client.pttl(a)).toBeGreaterThan(59_000);
    await redis.client.persist(a);
    await limiter.check({ ip: 'a' });
    expect(await redis.client.pttl(a)).toBeGreaterThan(59_000);
    await redis.client.script('FLUSH');
    expect((await limiter.check({ ip: 'a' })).info!.remaining).toBe(96);
  });

  it('batches peeks into one script call, deciding each exactly as check.lua does in peek mode', async () => {
    const prefix = `${redis.prefix}peeks:`;
    const rules = [
      defineRule({ name: 'plain', action: 'limit', characteristics: ['ip'], limit: 5, periodS: 60 }),
      defineRule({ name: 'banning', action: 'log', characteristics: ['ip'], limit: 2, periodS: 60, banForS: 30 }),
      defineRule({
        name: 'distinct',
        action: 'limit',
        characteristics: ['ip'],
        countDistinct: 'p',
        limit: 2,
        periodS: 60,
      }),
    ];
    const store = createRedisCounterStore(redis.client);
    const clock = new ManualClock(T0, 0);
    const limiter = createLimiter(
      { store, clock, log: pino({ level: 'silent' }), keyPrefix: prefix, timeoutMs: 2000 },
      { name: 'lim', rules },
    );
    // State to read: counts, a float count, a ban, set members.
    for (const [ip, p, cost] of [
      ['a', 'x', 1],
      ['a', 'y', 1],
      ['a', 'z', 1],
      ['b', 'x', 2.5],
      ['c', 'x', 1],
    ] as const)
      await limiter.check({ ip, p }, { cost });
    const probes = [
      ['a', 'x', 0],
      ['a', 'w', 1],
      ['b', 'x', 3],
      ['b', 'q', 0.25],
      ['c', 'x', 1],
      ['d', 'x', 1],
    ] as const;
    const before = Number((await redis.client.info('commandstats')).match(/cmdstat_evalsha:calls=(\d+)/)?.[1] ?? 0);
    const batched = await Promise.all(
      probes.map(([ip, p, cost]) =>
        store.run(buildPlan(prefix, 'lim', rules, { ip, p }, T0), { nowMs: T0, cost, mode: 'peek' }),
      ),
    );
    const after = Number((await redis.client.info('commandstats')).match(/cmdstat_evalsha:calls=(\d+)/)?.[1] ?? 0);
    expect(after - before).toBeLessThan(probes.length);
    // The reference: check.lua itself in peek mode, one call per probe.
    const reference = await Promise.all(
      probes.map(async ([ip, p, cost]) => {
        const plan = buildPlan(prefix, 'lim', rules, { ip, p }, T0);
        const args: Array<string | number> = [];
        for (const r of plan.counting) args.push(r.counterKey, r.banKey);
        args.push(T0, String(cost), 'peek', plan.counting.length);
        for (const r of plan.counting)
          args.push(
            r.action,
            r.limit,
            r.windowEndMs,
            r.banMs,
            r.distinctValue !== undefined ? '1' : '0',
            r.distinctValue ?? '',
          );
        const reply = (await redis.client.eval(CHECK_SCRIPT, plan.counting.length * 2, ...args)) as Array<
          string | number
        >;
        const outcomes = [];
        for (let i = 0; i + 3 < reply.length; i += 4)
          outcomes.push({
            count: Number(reply[i]),
            exceeded: reply[i + 1] === 1,
            banned: reply[i + 2] === 1,
            resetAtMs: Number(reply[i + 3]),
          });
        return outcomes;
      }),
    );
    expect(batched).toEqual(reference);
    expect(batched.some((outcomes) => outcomes.some((o) => o.banned))).toBe(true);
    expect(batched.some((outcomes) => outcomes.some((o) => !Number.isInteger(o.count)))).toBe(true);
    // Nothing was written by any peek.
    const plain = buildPlan(prefix, 'lim', rules, { ip: 'd', p: 'x' }, T0).counting[0]!.counterKey;
    expect(await redis.client.exists(plain)).toBe(0);
  });

  it('checks started by separate callbacks of one event-loop turn share one script call', async () => {
    // Each timer callback is its own macrotask (microtasks and nextTicks run between them), as each
    // socket's request is under load: a batch per tick would send one script per callback.
    const prefix = `${redis.prefix}turn:`;
    const plain = defineRule({ name: 'plain', action: 'limit', characteristics: ['ip'], limit: 1000, periodS: 60 });
    const limiter = createLimiter(
      {
        store: createRedisCounterStore(redis.client),
        clock: new ManualClock(T0, 0),
        log: pino({ level: 'silent' }),
        keyPrefix: prefix,
        timeoutMs: 2000,
      },
      { name: 'lim', rules: [plain] },
    );
    const evalshaCalls = async () =>
      Number((await redis.client.info('commandstats')).match(/cmdstat_evalsha:calls=(\d+)/)?.[1] ?? 0);
    await limiter.check({ ip: 'warm' }); // the script is loaded: EVALSHA from here on
    const callbacks = 20;
    const before = await evalshaCalls();
    const results = await Promise.all(
      Array.from(
        { length: callbacks },
        (_, i) =>
          new Promise<Awaited<ReturnType<typeof limiter.check>>>((resolve, reject) =>
            setTimeout(() => limiter.check({ ip: `c${i % 4}` }).then(resolve, reject), 0),
          ),
      ),
    );
    const after = await evalshaCalls();
    // Other test files share this Redis: a little slack, far below one call per callback.
    expect(after - before).toBeLessThan(callbacks / 4);
    expect(results.every((r) => r.action === 'allow' && r.error === undefined)).toBe(true);
    // Each check counted once, in order: four addresses, five checks each.
    const counts = results.map((r) => r.evaluations[0]!.count);
    expect(counts.filter((c) => c === 5)).toHaveLength(4);
  });

  it('stores float costs with INCRBYFLOAT', async () => {
    const prefix = `${redis.prefix}float:`;
    const bytes = defineRule({ name: 'bytes', action: 'limit', characteristics: ['p'], limit: 10, periodS: 60 });
    const limiter = createLimiter(
      {
        store: createRedisCounterStore(redis.client),
        clock: new ManualClock(T0, 0),
        log: pino({ level: 'silent' }),
        keyPrefix: prefix,
      },
      { name: 'lim', rules: [bytes] },
    );
    await limiter.check({ p: 'x' }, { cost: 1.5 });
    await limiter.check({ p: 'x' }, { cost: 2.25 });
    const key = buildPlan(prefix, 'lim', [bytes], { p: 'x' }, T0).counting[0]!.counterKey;
    expect(await redis.client.get(key)).toBe('3.75');
  });
});
