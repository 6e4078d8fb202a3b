/**
 * Fault: a `slow_close` toxic (5 s) on the gateway↔Redis link, then Redis drops the gateway's
 * connections (CLIENT KILL): the close reaches the gateway 5 s late, and until then its commands go
 * into a connection nobody answers. Expected: every request still answers 200 within the rate-limit
 * timeout per check plus a margin (fail open, no RateLimit fields, each failed check counted with
 * error="true"; spec 1.10 has no errors_total).
 * Recovery: once the close arrives the client reconnects and counting goes on where it was.
 * Redis here is a redis-server of this file's own, so CLIENT KILL touches no other test.
 */
import type { ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GatewayProcess } from '../test/support/gateway.ts';
import { startRedis } from '../test/support/global-setup.ts';
import { call } from './support/gateways.ts';
import { addToxic, type ProxiedUpstream } from './support/toxiproxy.ts';
import { waitUntil } from '../test/harness/index.ts';
import { FAIL_OPEN, startRedisLimitedGateway, timedSmallGet } from './support/redis-limited-gateway.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';

const CLOSE_DELAY_MS = 5000;
const LIMIT = 20;
const RULE = 'chaos_slow_close_reads';

const chaos = useToxiproxyAndDatabase();
let redis: { url: string; child: ChildProcess };
let link: ProxiedUpstream;
let gateway: GatewayProcess;

beforeAll(async () => {
  redis = await startRedis();
  link = await chaos.toxiproxy.proxyToUrl(redis.url);
  gateway = await startRedisLimitedGateway({
    databaseUrl: chaos.db.url,
    redisUrl: link.through(redis.url),
    rule: RULE,
    limit: LIMIT,
    key: chaos.key,
  });
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  // The Redis of this file goes with it, keys and all.
  if (redis && redis.child.exitCode === null) {
    const exited = new Promise((resolve) => redis.child.once('exit', resolve));
    redis.child.kill('SIGTERM');
    await exited;
  }
});

const timedGet = () => timedSmallGet(gateway, chaos.key);

function remaining(ratelimit: string | undefined): number {
  const match = new RegExp(`^"${RULE}";r=(\\d+);t=\\d+$`).exec(ratelimit ?? '');
  if (!match) throw new Error(`no RateLimit field of ${RULE}: ${ratelimit}`);
  return Number(match[1]);
}

/** Failed-open checks: `arkvory_rate_limit_checks_total{limiter="gateway_request",error="true"}`, summed. */
async function checkTimeouts(): Promise<number> {
  const text = (await call(`${gateway.url}/metrics`)).body.toString();
  let total = 0;
  for (const l of text.split('\n')) {
    if (
      l.startsWith('arkvory_rate_limit_checks_total{') &&
      l.includes('limiter="gateway_request"') &&
      l.includes('error="true"')
    )
      total += Number(l.split(' ').at(-1));
  }
  return total;
}

describe('Redis closes the gateway connection slowly', () => {
  it('keeps answering within the timeout while the close is held, then counts again where it was', async () => {
    const before = await timedGet();
    expect(before.status).toBe(200);
    expect(remaining(before.ratelimit)).toBe(LIMIT - 1);
    const timeoutsAtStart = await checkTimeouts();

    await addToxic(link, 'slow_close', 'downstream', { delay: CLOSE_DELAY_MS }, 'slow-close');
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    let killedAtMs = 0;
    try {
      // Only the gateway's connections exist on this Redis besides this one.
      const killed = await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      killedAtMs = performance.now();
      expect(Number(killed)).toBeGreaterThanOrEqual(1);
    } finally {
      admin.disconnect();
    }

    // While the close is held: every check times out, every request still answers in time.
    const held: Array<Awaited<ReturnType<typeof timedGet>>> = [];
    while (performance.now() - killedAtMs < CLOSE_DELAY_MS - 2 * FAIL_OPEN.boundMs) held.push(await timedGet());
    expect(held.length).toBeGreaterThanOrEqual(2);
    for (const res of held) {
      expect(res.status).toBe(200);
      expect(res.ratelimit).toBeUndefined();
      expect(res.ms).toBeGreaterThanOrEqual(FAIL_OPEN.timeoutMs - 5);
      expect(res.ms).toBeLessThan(FAIL_OPEN.boundMs);
    }
    expect(await checkTimeouts()).toBeGreaterThanOrEqual(timeoutsAtStart + held.length);

    // The close arrives; the client reconnects by itself and counting goes on in the same window.
    // The commands sent into the dead connection never reached Redis: the count is where it was.
    let first: Awaited<ReturnType<typeof timedGet>> | undefined;
    await waitUntil(
      async () => {
        const res = await timedGet();
        expect(res.status).toBe(200);
        expect(res.ms).toBeLessThan(FAIL_OPEN.boundMs);
        if (res.ratelimit) first = res;
        return res.ratelimit !== undefined;
      },
      { timeoutMs: CLOSE_DELAY_MS + 10_000, intervalMs: 100, what: 'rate limiting to count again' },
    );
    expect(performance.now() - killedAtMs).toBeGreaterThanOrEqual(CLOSE_DELAY_MS - 100);
    expect(remaining(first!.ratelimit)).toBe(LIMIT - 2);
  }, 90_000);
});
