import { Redis } from 'ioredis';
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { useTestRedis } from '../../test/support/redis.ts';
import { ManualClock } from '../clock.ts';
import { buildPlan } from './evaluate.ts';
import { createLimiter } from './limiter.ts';
import { createMemoryCounterStore } from './memory-counter-store.ts';
import { CHECK_SCRIPT, createRedisCounterStore, MAX_BATCH, takesFastPath } from './redis-counter-store.ts';
import { defineRule } from './rules.ts';
import { counterStoreConformance, T0 } from '../../test/conformance/counter-store.ts';

const redis = useTestRedis();
let n = 0;
counterStoreConformance('redis', () => ({
  store: createRedisCounterStore(redis.client),
  prefix: `${redis.prefix}${++n}:`,
}));
/** The client as a Redis Cluster client looks to the store: one rule per script call, one DEL per key. */
const clusterShaped = (client: Redis): Redis => Object.create(client, { isCluster: { value: true } }) as Redis;
counterStoreConformance('redis, one script per rule (the Redis Cluster path, on one server)', () => ({
  store: createRedisCounterStore(clusterShaped(redis.client)),
  prefix: `${redis.prefix}${++n}:`,
}));
counterStoreConformance('memory (same table, same run)', () => ({
  store: createMemoryCounterStore(),
  prefix: `m${++n}:`,
}));

describe('redis store specifics', () => {
  const rule = defineRule({ name: 'r', action: 'limit', characteristics: ['ip'], limit: 1, periodS: 60, banForS: 600 });
  /** A counting rule and a banning one, of five a minute, for the tests of batches, scripts and replies. */
  const plain = defineRule({ name: 'p', action: 'limit', characteristics: ['ip'], limit: 5, periodS: 60 });
  const banning = defineRule({
    name: 'b',
    action: 'limit',
    characteristics: ['ip'],
    limit: 5,
    periodS: 60,
    banForS: 60,
  });
  const limiterOn = (prefix: string, clock = new ManualClock(T0, 0), rules = [rule]) =>
    createLimiter(
      {
        store: createRedisCounterStore(redis.client),
        clock,
        log: pino({ level: 'silent' }),
        keyPrefix: prefix,
        timeoutMs: 2000,
      },
      { name: 'lim', rules },
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

  const commandCalls = async (command: string) =>
    Number((await redis.client.info('commandstats')).match(new RegExp(`cmdstat_${command}:calls=(\\d+)`))?.[1] ?? 0);

  it('the Redis Cluster path runs one script per rule and one DEL per key', async () => {
    const prefix = `${redis.prefix}cluster:`;
    const rules = [
      defineRule({ name: 'a', action: 'limit', characteristics: ['ip'], limit: 5, periodS: 60, banForS: 60 }),
      defineRule({ name: 'b', action: 'log', characteristics: ['ip'], limit: 5, periodS: 60 }),
      defineRule({ name: 'c', action: 'log', characteristics: ['ip'], limit: 5, periodS: 60 }),
    ];
    const store = createRedisCounterStore(clusterShaped(redis.client));
    const limiter = createLimiter(
      { store, clock: new ManualClock(T0, 0), log: pino({ level: 'silent' }), keyPrefix: prefix, timeoutMs: 2000 },
      { name: 'lim', rules },
    );
    await limiter.check({ ip: 'warm' });
    const scripts = await commandCalls('evalsha');
    expect((await limiter.check({ ip: 'x' })).evaluations).toHaveLength(3);
    // Other test files may share this server: at least, never fewer.
    expect((await commandCalls('evalsha')) - scripts).toBeGreaterThanOrEqual(3);
    const dels = await commandCalls('del');
    await limiter.clear({ ip: 'x' });
    expect((await commandCalls('del')) - dels).toBeGreaterThanOrEqual(3);
    expect((await limiter.peek({ ip: 'x' }, { cost: 0 })).evaluations.map((e) => e.count)).toEqual([0, 0, 0]);
  });

  it('takes the one-call batch only for checks count.lua decides exactly as check.lua', () => {
    const banning = defineRule({
      name: 'b',
      action: 'limit',
      characteristics: ['ip'],
      limit: 5,
      periodS: 60,
      banForS: 9,
    });
    const distinct = defineRule({
      name: 'd',
      action: 'limit',
      characteristics: ['ip'],
      countDistinct: 'u',
      limit: 5,
      periodS: 60,
    });
    const plan = (...rules: (typeof plain)[]) => buildPlan('p:', 'lim', rules, { ip: 'i', u: 'x' }, T0);
    expect(takesFastPath(plan(plain), 1, 'check')).toBe(true);
    expect(takesFastPath(plan(plain), 0, 'check')).toBe(true);
    expect(takesFastPath(plan(plain), 1.5, 'check')).toBe(false);
    expect(takesFastPath(plan(plain), 1, 'peek')).toBe(false);
    expect(takesFastPath(plan(plain, banning), 1, 'check')).toBe(false);
    expect(takesFastPath(plan(distinct), 1, 'check')).toBe(false);
  });

  it('leaves its batched scripts out of ioredis auto-pipelining, once, keeping what was there', () => {
    const client = new Redis(redis.url, {
      lazyConnect: true,
      enableAutoPipelining: true,
      autoPipeliningIgnoredCommands: ['get'],
    });
    createRedisCounterStore(client);
    createRedisCounterStore(client);
    expect(client.options.autoPipeliningIgnoredCommands).toEqual([
      'get',
      'arkvoryRateLimitCount',
      'arkvoryRateLimitPeek',
    ]);
    const bare = new Redis(redis.url, { lazyConnect: true });
    createRedisCounterStore(bare);
    expect(bare.options.autoPipeliningIgnoredCommands).toEqual(['arkvoryRateLimitCount', 'arkvoryRateLimitPeek']);
    client.disconnect();
    bare.disconnect();
  });

  it('a batched check gives its counter a TTL of the window end plus 1 s; a cost of 0 counts 0', async () => {
    const prefix = `${redis.prefix}ttl-batch:`;
    const store = createRedisCounterStore(redis.client);
    const at = T0 + 20_000;
    const plan = buildPlan(prefix, 'lim', [plain], { ip: 'a' }, at);
    expect(await store.run(plan, { nowMs: at, cost: 0, mode: 'check' })).toEqual([
      { count: 0, exceeded: false, banned: false, resetAtMs: T0 + 60_000 },
    ]);
    const ttl = await redis.client.pttl(plan.counting[0]!.counterKey);
    expect(ttl).toBeGreaterThan(40_000);
    expect(ttl).toBeLessThanOrEqual(41_000);
  });

  it('a counter that holds no number fails the check or peek with store_unavailable, saying so', async () => {
    const prefix = `${redis.prefix}corrupt:`;
    const store = createRedisCounterStore(redis.client);
    const plan = buildPlan(prefix, 'lim', [plain], { ip: 'a' }, T0);
    await redis.client.set(plan.counting[0]!.counterKey, 'not a number');
    const expected = {
      code: 'store_unavailable',
      message: 'a rate-limit counter key holds a value that cannot be counted',
    };
    await expect(store.run(plan, { nowMs: T0, cost: 0, mode: 'peek' })).rejects.toMatchObject(expected);
    // One corrupt counter among the rules of a peek is enough.
    const second = defineRule({ name: 'q', action: 'limit', characteristics: ['ip'], limit: 5, periodS: 60 });
    await expect(
      store.run(buildPlan(prefix, 'lim', [second, plain], { ip: 'a' }, T0), { nowMs: T0, cost: 0, mode: 'peek' }),
    ).rejects.toMatchObject(expected);
    const wrongType = buildPlan(prefix, 'lim', [plain], { ip: 'b' }, T0);
    await redis.client.hset(wrongType.counting[0]!.counterKey, 'f', 'v');
    await expect(store.run(wrongType, { nowMs: T0, cost: 1, mode: 'check' })).rejects.toMatchObject(expected);
  });

  it('a key of the wrong type fails only its own peek, not the others of its batch', async () => {
    const prefix = `${redis.prefix}peek-wrongtype:`;
    const distinct = defineRule({
      name: 'd',
      action: 'limit',
      characteristics: ['ip'],
      limit: 5,
      periodS: 60,
      countDistinct: 'user',
    });
    const limiter = limiterOn(prefix, undefined, [plain, banning, distinct]);
    const plan = (ip: string) => buildPlan(prefix, 'lim', [plain, banning, distinct], { ip, user: 'u' }, T0).counting;
    // Another writer under the prefix: a hash where a counter, a ban or a distinct set belongs.
    await redis.client.hset(plan('c')[0]!.counterKey, 'f', 'v');
    await redis.client.hset(plan('b')[1]!.banKey, 'f', 'v');
    await redis.client.set(plan('s')[2]!.counterKey, 'x');
    const results = await Promise.all(['a', 'c', 'b', 's', 'z'].map((ip) => limiter.peek({ ip, user: 'u' })));
    expect(results.map((r) => (r.error === undefined ? 'ok' : (r.error as { code?: string }).code))).toEqual([
      'ok',
      'store_unavailable',
      'store_unavailable',
      'store_unavailable',
      'ok',
    ]);
  });

  it("a ban's Retry-After is at most ban_for_s on every gateway, even when a clock running ahead started it", async () => {
    const prefix = `${redis.prefix}skew:`;
    // The rule bans for 600 s; a gateway an hour ahead starts a ban on address t.
    const ahead = limiterOn(prefix, new ManualClock(T0 + 3_600_000, 0));
    await ahead.check({ ip: 't' });
    expect((await ahead.check({ ip: 't' })).action).toBe('block');
    const onTime = limiterOn(prefix);
    for (const r of [await onTime.peek({ ip: 't' }, { cost: 0 }), await onTime.check({ ip: 't' })]) {
      expect(r.action).toBe('block');
      expect(r.evaluations[0]!.result).toBe('banned');
      expect(r.info!.resetAtMs).toBe(T0 + 600_000);
    }
  });

  it('a distinct set never holds more than limit + 1 values, however many a client sends', async () => {
    const prefix = `${redis.prefix}distinct-bound:`;
    const rule = defineRule({
      name: 'd',
      action: 'limit',
      characteristics: ['ip'],
      limit: 3,
      periodS: 60,
      countDistinct: 'repository',
    });
    const limiter = limiterOn(prefix, undefined, [rule]);
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => limiter.check({ ip: 'a', repository: `r${i}` })),
    );
    expect(results.filter((r) => r.action === 'allow')).toHaveLength(3);
    const key = buildPlan(prefix, 'lim', [rule], { ip: 'a' }, T0).counting[0]!.counterKey;
    expect(await redis.client.scard(key)).toBe(4);
    expect(await redis.client.pttl(key)).toBeGreaterThan(59_000);
  });

  it('a reply unlike what the scripts write (a proxy answering for Redis) fails the call with store_unavailable, never the process', async () => {
    const prefix = `${redis.prefix}garbage:`;
    createRedisCounterStore(redis.client); // defines the scripts on the client
    const scripts = ['arkvoryRateLimitCount', 'arkvoryRateLimitCheck', 'arkvoryRateLimitPeek'];
    // The last: numbers, more than any script writes (nine against the peek's six, say).
    const garbage: unknown[] = [
      null,
      'OK',
      7,
      [],
      [1],
      ['x', 0, 0, 0],
      [new Error('nested')],
      [[1, 2]],
      Array(9).fill(0),
    ];
    for (const reply of garbage) {
      // The real server runs each script; the client hands the store another reply in its place.
      const proxied = Object.create(redis.client) as Redis & Record<string, (...args: unknown[]) => unknown>;
      for (const name of scripts) {
        const original = (redis.client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>)[name]!;
        proxied[name] = (...args: unknown[]) => original.apply(redis.client, args).then(() => reply);
      }
      // One store: the two plain checks share one count.lua call.
      const store = createRedisCounterStore(proxied);
      const limiterOf = (rules: ReturnType<typeof defineRule>[]) =>
        createLimiter(
          {
            store,
            clock: new ManualClock(T0, 0),
            log: pino({ level: 'silent' }),
            keyPrefix: prefix,
            timeoutMs: 2000,
          },
          { name: 'lim', rules },
        );
      const results = await Promise.all([
        limiterOf([plain]).check({ ip: 'a' }),
        limiterOf([plain]).check({ ip: 'b' }),
        limiterOf([banning]).check({ ip: 'a' }),
        limiterOf([plain, banning]).peek({ ip: 'a' }),
      ]);
      expect(
        results.map((r) => [r.action, (r.error as { code?: string } | undefined)?.code]),
        JSON.stringify(reply),
      ).toEqual(Array(4).fill(['allow', 'store_unavailable']));
      expect((results[0]!.error as Error).message).toBe(
        'the rate-limit store answered a script with an unexpected reply',
      );
    }
  });

  it('a Redis that does not answer rejects every check and peek of the batch; clearing nothing asks nothing', async () => {
    // Nothing listens on port 1; without the offline queue every command fails at once.
    const client = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    client.on('error', () => {});
    const store = createRedisCounterStore(client);
    const plan = buildPlan(`${redis.prefix}down:`, 'lim', [plain], { ip: 'a' }, T0);
    const results = await Promise.allSettled([
      store.run(plan, { nowMs: T0, cost: 1, mode: 'check' }),
      store.run(plan, { nowMs: T0, cost: 1, mode: 'check' }),
      store.run(plan, { nowMs: T0, cost: 0, mode: 'peek' }),
      store.run(plan, { nowMs: T0, cost: 0, mode: 'peek' }),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected', 'rejected']);
    await expect(store.clear([])).resolves.toBeUndefined();
    client.disconnect();
  });

  /**
   * The client as the store sees it, its three scripts answering only when the test says: each call
   * pushes the function that answers it (with a reply the scripts could write).
   */
  const heldScripts = () => {
    createRedisCounterStore(redis.client); // defines the scripts on the client
    // An answer is a reply, or a rejected promise for a call that failed.
    const answers: Array<(reply: Array<number | string> | Promise<never>) => void> = [];
    const held = Object.create(redis.client) as Redis & Record<string, unknown>;
    for (const name of ['arkvoryRateLimitCount', 'arkvoryRateLimitPeek', 'arkvoryRateLimitCheck'])
      held[name] = () => new Promise((resolve) => answers.push(resolve));
    return { client: held as Redis, answers };
  };
  /** Runs `body` on fake timers (the batches' immediates too) with the scripts held. */
  const withHeldScripts = async (body: (held: ReturnType<typeof heldScripts>) => Promise<void>) => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate'] });
    try {
      await body(heldScripts());
    } finally {
      vi.useRealTimers();
    }
  };

  it('one timer per batched script call: at the shortest timeout of its checks every check and peek of the batch fails with store_timeout, and a later answer settles nothing', () =>
    withHeldScripts(async ({ client, answers }) => {
      const store = createRedisCounterStore(client);
      const plan = buildPlan(`${redis.prefix}deadline:`, 'lim', [plain], { ip: 'a' }, T0);
      const banPlan = buildPlan(`${redis.prefix}deadline:`, 'lim', [banning], { ip: 'a' }, T0);
      const settled: string[] = [];
      const track = (name: string, run: ReturnType<typeof store.run>) =>
        void Promise.resolve(run).then(
          () => settled.push(`${name} answered`),
          (err: { code?: string }) => settled.push(`${name} ${err.code}`),
        );
      track('check 1', store.run(plan, { nowMs: T0, cost: 1, mode: 'check', timeoutMs: 50 }));
      track('check 2', store.run(plan, { nowMs: T0, cost: 1, mode: 'check', timeoutMs: 100 }));
      track('peek 1', store.run(plan, { nowMs: T0, cost: 0, mode: 'peek', timeoutMs: 100 }));
      track('peek 2', store.run(plan, { nowMs: T0, cost: 0, mode: 'peek', timeoutMs: 100 }));
      // A banning rule's check runs check.lua alone, bounded on its own.
      track('banning check', store.run(banPlan, { nowMs: T0, cost: 1, mode: 'check', timeoutMs: 100 }));
      await vi.advanceTimersByTimeAsync(0); // the batches leave
      expect(answers).toHaveLength(3);
      expect(vi.getTimerCount()).toBe(3);
      await vi.advanceTimersByTimeAsync(49);
      expect(settled).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(settled.sort()).toEqual(['check 1 store_timeout', 'check 2 store_timeout']);
      await vi.advanceTimersByTimeAsync(49);
      expect(settled).toHaveLength(2);
      await vi.advanceTimersByTimeAsync(1);
      expect(settled.sort()).toEqual([
        'banning check store_timeout',
        'check 1 store_timeout',
        'check 2 store_timeout',
        'peek 1 store_timeout',
        'peek 2 store_timeout',
      ]);
      answers[0]!([1, 2]);
      answers[1]!([0, 0, 0, 0, 0, 0]);
      answers[2]!([1, 0, 0, T0]);
      await vi.advanceTimersByTimeAsync(0);
      expect(settled).toHaveLength(5);
      expect(settled.every((line) => line.endsWith('store_timeout'))).toBe(true);
    }));

  it('an answer in time clears its batch timer; checks and peeks given no timeout arm none', () =>
    withHeldScripts(async ({ client, answers }) => {
      const store = createRedisCounterStore(client);
      const plan = buildPlan(`${redis.prefix}deadline:`, 'lim', [plain], { ip: 'a' }, T0);
      const counted = store.run(plan, { nowMs: T0, cost: 1, mode: 'check', timeoutMs: 100 });
      const peeked = store.run(plan, { nowMs: T0, cost: 0, mode: 'peek', timeoutMs: 100 });
      await vi.advanceTimersByTimeAsync(0);
      expect(vi.getTimerCount()).toBe(2);
      answers[0]!([3]);
      answers[1]!([2, 0, 0]);
      expect(await counted).toEqual([
        { count: 3, exceeded: false, banned: false, resetAtMs: plan.counting[0]!.windowEndMs },
      ]);
      expect(await peeked).toEqual([expect.objectContaining({ count: 2, exceeded: false, banned: false })]);
      expect(vi.getTimerCount()).toBe(0);

      const unbounded = [
        store.run(plan, { nowMs: T0, cost: 1, mode: 'check' }),
        store.run(plan, { nowMs: T0, cost: 0, mode: 'peek' }),
      ];
      await vi.advanceTimersByTimeAsync(0);
      expect(answers).toHaveLength(4);
      expect(vi.getTimerCount()).toBe(0);
      answers[2]!([1]);
      answers[3]!([0, 0, 0]);
      expect((await Promise.all(unbounded)).map((o) => o.length)).toEqual([1, 1]);

      // A call that fails in time clears its timer too.
      const failing = [
        store.run(plan, { nowMs: T0, cost: 1, mode: 'check', timeoutMs: 100 }),
        store.run(plan, { nowMs: T0, cost: 0, mode: 'peek', timeoutMs: 100 }),
      ];
      await vi.advanceTimersByTimeAsync(0);
      expect(vi.getTimerCount()).toBe(2);
      answers[4]!(Promise.reject(new Error('connection lost')));
      answers[5]!(Promise.reject(new Error('connection lost')));
      expect((await Promise.allSettled(failing)).map((r) => r.status)).toEqual(['rejected', 'rejected']);
      expect(vi.getTimerCount()).toBe(0);
    }));

  it("a limiter over it arms no timer besides its batch's", () =>
    withHeldScripts(async ({ client, answers }) => {
      const limiter = createLimiter(
        {
          store: createRedisCounterStore(client),
          clock: new ManualClock(T0, 0),
          log: pino({ level: 'silent' }),
          timeoutMs: 100,
        },
        { name: 'lim', rules: [plain] },
      );
      const checked = limiter.check({ ip: 'a' });
      await vi.advanceTimersByTimeAsync(0);
      expect(vi.getTimerCount()).toBe(1);
      answers[0]!([1]);
      expect((await checked).action).toBe('allow');
      expect(vi.getTimerCount()).toBe(0);
    }));

  it(`sends at most ${MAX_BATCH} checks or peeks per script call, each exactly once`, async () => {
    const prefix = `${redis.prefix}batch-bound:`;
    const plain = defineRule({ name: 'p', action: 'limit', characteristics: ['ip'], limit: 1000, periodS: 60 });
    // The store calls its batched scripts as methods of the client: record each call's key count.
    const keysPerCall: Record<string, number[]> = { arkvoryRateLimitCount: [], arkvoryRateLimitPeek: [] };
    createRedisCounterStore(redis.client); // defines the scripts on the client
    const spied = Object.create(redis.client) as Redis & Record<string, (...args: unknown[]) => unknown>;
    for (const name of Object.keys(keysPerCall)) {
      const original = (redis.client as unknown as Record<string, (...args: unknown[]) => unknown>)[name]!;
      spied[name] = (...args: unknown[]) => {
        keysPerCall[name]!.push(args[0] as number);
        return original.apply(redis.client, args);
      };
    }
    const store = createRedisCounterStore(spied);
    const total = 2 * MAX_BATCH + 10;
    const plans = Array.from({ length: total }, (_, i) => buildPlan(prefix, 'lim', [plain], { ip: `i${i}` }, T0));
    await Promise.all(plans.map((plan) => store.run(plan, { nowMs: T0, cost: 1, mode: 'check' })));
    await Promise.all(plans.map((plan) => store.run(plan, { nowMs: T0, cost: 0, mode: 'peek' })));
    // count.lua: one key per check; peek.lua: a counter and a ban key per peek.
    expect(keysPerCall.arkvoryRateLimitCount).toEqual([MAX_BATCH, MAX_BATCH, 10]);
    expect(keysPerCall.arkvoryRateLimitPeek).toEqual([2 * MAX_BATCH, 2 * MAX_BATCH, 20]);
  });
});
