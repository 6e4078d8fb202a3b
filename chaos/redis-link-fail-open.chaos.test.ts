/**
 * Faults on the gateway↔Redis link: 1 s of latency (beyond the 200 ms rate-limit timeout), then the link cut (proxy disabled).
 * Expected: requests still succeed (fail open) within the timeout per check plus a margin, with no RateLimit headers;
 * `arkvory_rate_limit_checks_total{error="true"}` rises and the failure is logged; the rules are kept. Recovery: counting resumes in the same window.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createServiceAccount } from '../test/support/auth.ts';
import type { GatewayProcess } from '../test/support/gateway.ts';
import { call } from './support/gateways.ts';
import { setEnabled } from './support/shared-cluster.ts';
import { addLatency, type ProxiedUpstream } from './support/toxiproxy.ts';
import { waitUntil } from '../test/harness/index.ts';
import { Redis } from 'ioredis';
import { deleteKeysWithPrefix } from '../test/support/redis.ts';
import { FAIL_OPEN, startRedisLimitedGateway, timedSmallGet } from './support/redis-limited-gateway.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';

const LATENCY_MS = 1000;
const LIMIT = 10;
const RULE = 'chaos_reads_by_principal';

const chaos = useToxiproxyAndDatabase();
let link: ProxiedUpstream;
let gateway: GatewayProcess;
let adminKey: string;
let redisPrefix: string | undefined;

beforeAll(async () => {
  ({ key: adminKey } = await createServiceAccount(chaos.db.pool, { scopes: ['admin'] }));
  link = await chaos.toxiproxy.proxyToUrl(inject('redisUrl'));
  redisPrefix = `chaos-${randomBytes(4).toString('hex')}:`;
  gateway = await startRedisLimitedGateway({
    databaseUrl: chaos.db.url,
    redisUrl: link.through(inject('redisUrl')),
    rule: RULE,
    limit: LIMIT,
    key: chaos.key,
    env: { ARKVORY_REDIS_KEY_PREFIX: redisPrefix },
  });
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  // The gateway wrote through the proxy; its keys are in the real Redis behind it.
  if (redisPrefix) {
    const client = new Redis(inject('redisUrl'), { maxRetriesPerRequest: 1 });
    await deleteKeysWithPrefix(client, redisPrefix).finally(() => client.disconnect());
  }
});

const timedGet = () => timedSmallGet(gateway, chaos.key);

/** Failed-open checks (`arkvory_rate_limit_checks_total{error="true"}`) of one limiter, from /metrics. */
async function errorsTotal(limiter: string): Promise<number> {
  const text = (await call(`${gateway.url}/metrics`)).body.toString();
  let total = 0;
  for (const line of text.split('\n')) {
    if (
      line.startsWith('arkvory_rate_limit_checks_total{') &&
      line.includes(`limiter="${limiter}"`) &&
      line.includes('error="true"')
    )
      total += Number(line.split(' ').at(-1));
  }
  return total;
}

function remaining(ratelimit: string | undefined): number {
  const match = new RegExp(`^"${RULE}";r=(\\d+);t=\\d+$`).exec(ratelimit ?? '');
  if (!match) throw new Error(`no RateLimit field of ${RULE}: ${ratelimit}`);
  return Number(match[1]);
}

describe('Redis slow, then cut, under rate limiting', () => {
  it('fails open within the timeout, counts the errors, keeps the rules, and resumes counting', async () => {
    const before = await timedGet();
    expect(before.status).toBe(200);
    expect(remaining(before.ratelimit)).toBe(LIMIT - 1);
    const errorsAtStart = await errorsTotal('gateway_request');

    // Latency: the checks time out and the requests go through without RateLimit fields. The
    // commands still reach Redis and count there (only the answers are late).
    const slow = await addLatency(link, { name: 'slow-redis', stream: 'downstream', latencyMs: LATENCY_MS });
    for (let i = 0; i < 2; i++) {
      const res = await timedGet();
      expect(res.status).toBe(200);
      expect(res.ratelimit).toBeUndefined();
      expect(res.ms).toBeGreaterThanOrEqual(FAIL_OPEN.timeoutMs - 5);
      expect(res.ms).toBeLessThan(FAIL_OPEN.boundMs);
    }
    expect(await errorsTotal('gateway_request')).toBeGreaterThanOrEqual(errorsAtStart + 2);
    const logged = gateway
      .logLines()
      .find(
        (l) =>
          l.msg === 'rate-limit store failed; failing open except for rules with on_store_error: deny' &&
          l.limiter === 'gateway_request',
      );
    expect(logged).toMatchObject({ level: 'warn', operation: 'check', code: 'store_timeout' });
    await slow.remove();

    // Cut: no connection at all; checks fail at once (nothing is queued while disconnected).
    await setEnabled(link, false);
    const errorsBeforeCut = await errorsTotal('gateway_request');
    for (let i = 0; i < 2; i++) {
      const res = await timedGet();
      expect(res.status).toBe(200);
      expect(res.ratelimit).toBeUndefined();
      expect(res.ms).toBeLessThan(FAIL_OPEN.boundMs);
    }
    expect(await errorsTotal('gateway_request')).toBeGreaterThanOrEqual(errorsBeforeCut + 2);
    // The rules are a replica in memory: the file rule is still in force while Redis is away.
    const rules = await call(`${gateway.url}/api/v1/admin/rate-limits/gateway_request`, { key: adminKey });
    expect(rules.status).toBe(200);
    expect(JSON.stringify(JSON.parse(rules.body.toString()).effective)).toContain(RULE);

    // Redis returns: the client reconnects by itself and counting resumes in the same window,
    // from 1 (before) + 2 (counted during the latency) = 3.
    await setEnabled(link, true);
    let first: Awaited<ReturnType<typeof timedGet>> | undefined;
    await waitUntil(
      async () => {
        const res = await timedGet();
        if (res.ratelimit) first = res;
        return res.ratelimit !== undefined;
      },
      { timeoutMs: 10_000, intervalMs: 100, what: 'rate limiting to count again' },
    );
    expect(remaining(first!.ratelimit)).toBe(LIMIT - 4);
    for (let left = LIMIT - 5; left >= 0; left--) expect(remaining((await timedGet()).ratelimit)).toBe(left);
    const blocked = await timedGet();
    expect([blocked.status, blocked.code]).toEqual([429, 'rate_limited']);
  }, 90_000);
});
