/**
 * Redis outages against a redis-server this test owns: paused with SIGSTOP (hung), stopped, never
 * started. Checks fail open within the configured timeout, rules keep being served from the replica,
 * and a process that never reached Redis serves the compiled defaults.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../policy/clock.ts';
import { createLimiter } from '../../policy/rate-limit/limiter.ts';
import { createRateLimitMetrics, METRIC_NAMES } from '../../policy/rate-limit/metrics.ts';
import { createRedisRuleDocuments } from '../../policy/rate-limit/redis-rule-documents.ts';
import { createRedisCounterStore } from '../../policy/rate-limit/redis-counter-store.ts';
import { createRuleRegistry } from '../../policy/rate-limit/rule-registry.ts';
import { defineRule, type LimiterSpec } from '../../policy/rate-limit/rules.ts';
import { createRateLimitRedis } from './rate-limit-redis.ts';
import { freeLoopbackPort, startRedisServer, type RedisServer } from '../../test/harness/index.ts';

const log = pino({ level: 'silent' });
const servers: RedisServer[] = [];

async function startRedis(port: number): Promise<RedisServer> {
  const server = await startRedisServer({ port });
  servers.push(server);
  return server;
}

afterAll(async () => {
  for (const server of servers) await server.stop();
});

const available = new Map<string, LimiterSpec>([
  [
    'api',
    {
      description: 'x',
      available_properties: ['ip'],
      default_rules: [{ name: 'default_by_ip', action: 'limit', characteristics: ['ip'], limit: 100, period_s: 60 }],
    },
  ],
]);

async function timed<T>(work: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await work();
  return { value, ms: performance.now() - started };
}

describe('rate limiting during Redis outages (real redis-server)', () => {
  it('fails open within the timeout when Redis hangs (SIGSTOP) or is stopped, keeps the rule replica, and recovers', async () => {
    const port = await freeLoopbackPort();
    const server = await startRedis(port);
    const redis = createRateLimitRedis(`redis://127.0.0.1:${port}`, log, systemClock);
    await redis.connect();
    const registry = new Registry();
    const limiter = createLimiter(
      {
        store: createRedisCounterStore(redis),
        clock: systemClock,
        log,
        metrics: createRateLimitMetrics(registry),
        timeoutMs: 100,
        keyPrefix: 'outage:',
      },
      {
        name: 'api',
        rules: [defineRule({ name: 'one_per_ip', action: 'limit', characteristics: ['ip'], limit: 1, periodS: 3600 })],
      },
    );
    const rules = createRuleRegistry({
      documents: createRedisRuleDocuments(redis, 'outage:rules:'),
      available,
      fileRules: new Map(),
      clock: systemClock,
      log,
      timeoutMs: 200,
      refreshIntervalMs: 60_000,
    });
    await rules.start();
    await rules.publish({ rate_limits: { api: [{ name: 'published_rule', action: 'log', limit: 1, period_s: 60 }] } });
    expect(rules.rules('api').map((r) => r.name)).toEqual(['published_rule', 'default_by_ip']);
    expect((await limiter.check({ ip: 'a' })).action).toBe('allow');
    expect((await limiter.check({ ip: 'a' })).action).toBe('block');

    server.signal('SIGSTOP');
    try {
      const hung = await timed(() => limiter.check({ ip: 'a' }));
      expect(hung.value).toMatchObject({ action: 'allow', exceeded: false, info: undefined });
      expect((hung.value.error as { code?: string }).code).toBe('store_timeout');
      expect(hung.ms).toBeGreaterThanOrEqual(95);
      // Bounded, not hung: the 100 ms timeout plus what a loaded 2-core machine adds (seen 418 ms).
      expect(hung.ms).toBeLessThan(1000);
      expect(await rules.refresh()).toBe(false);
      expect(rules.rules('api').map((r) => r.name)).toEqual(['published_rule', 'default_by_ip']);
      expect(rules.status().lastRefreshError).toContain('did not answer within 200 ms');
    } finally {
      server.signal('SIGCONT');
    }
    // Back: the counter survived the pause, so the identifier is still over its limit.
    await sleep(50);
    expect((await limiter.check({ ip: 'a' })).action).toBe('block');

    await server.stop();
    const down = await timed(() => limiter.check({ ip: 'a' }));
    expect(down.value.action).toBe('allow');
    expect(down.value.error).toBeInstanceOf(Error);
    expect(down.ms).toBeLessThan(150);
    expect(await rules.refresh()).toBe(false);
    expect(rules.rules('api').map((r) => r.name)).toEqual(['published_rule', 'default_by_ip']);
    const checks = await registry.getSingleMetricAsString(METRIC_NAMES.checks);
    expect(checks).toMatch(
      /arkvory_rate_limit_checks_total\{limiter="api",action="allow",matched="false",error="true"\} 2/,
    );

    // A fresh (empty) server on the same port: the client reconnects by itself and counting resumes.
    await startRedis(port);
    // A fresh identifier per attempt: an attempt that timed out may still have counted late.
    let attempt = 0;
    let result = await limiter.check({ ip: `b${attempt}` });
    for (; attempt < 100 && result.error; ) {
      await sleep(50);
      result = await limiter.check({ ip: `b${++attempt}` });
    }
    expect(result).toMatchObject({ action: 'allow', error: undefined });
    expect((await limiter.check({ ip: `b${attempt}` })).action).toBe('block');
    expect(await rules.refresh()).toBe(true);
    rules.stop();
    redis.disconnect();
  });

  it('serves the compiled defaults when Redis was never reachable', async () => {
    const port = await freeLoopbackPort();
    const redis = createRateLimitRedis(`redis://127.0.0.1:${port}`, log, systemClock);
    await redis.connect().catch(() => undefined);
    const fileRule = { name: 'from_file', action: 'limit' as const, characteristics: ['ip'], limit: 5, period_s: 60 };
    const rules = createRuleRegistry({
      documents: createRedisRuleDocuments(redis, 'never:rules:'),
      available,
      fileRules: new Map([['api', [fileRule]]]),
      clock: systemClock,
      log,
      timeoutMs: 200,
    });
    await rules.start();
    expect(rules.rules('api').map((r) => r.name)).toEqual(['from_file', 'default_by_ip']);
    expect(rules.status()).toMatchObject({ seeded: false, sources: { api: 'compiled' } });
    const limiter = createLimiter(
      { store: createRedisCounterStore(redis), clock: systemClock, log, timeoutMs: 100 },
      { name: 'api', rules: () => rules.rules('api') },
    );
    const result = await limiter.check({ ip: 'x' });
    expect(result.action).toBe('allow');
    expect(result.error).toBeInstanceOf(Error);
    rules.stop();
    redis.disconnect();
  });
});
