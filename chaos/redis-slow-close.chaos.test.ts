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
import type { TestDatabase } from '../test/support/database.ts';
import type { GatewayProcess } from '../test/support/gateway.ts';
import { startRedis } from '../test/support/global-setup.ts';
import { call } from './support/gateways.ts';
import {
  hostPortOf,
  startToxiproxy,
  urlThrough,
  type ProxiedUpstream,
  type ToxiproxyServer,
} from './support/toxiproxy.ts';
import { waitUntil } from '../test/harness/index.ts';
import { SMALL_CONTENT_PATH, startRedisLimitedGateway } from './support/redis-limited-gateway.ts';
import { chaosDatabase } from './support/chaos-database.ts';

const TIMEOUT_MS = 200;
const CLOSE_DELAY_MS = 5000;
const LIMIT = 20;
const RULE = 'chaos_slow_close_reads';
/** A request makes two Redis calls on this path (auth_failure peek, gateway_request check), each bounded by the timeout. */
const FAIL_OPEN_BOUND_MS = 2 * TIMEOUT_MS + 800;
const contentPath = SMALL_CONTENT_PATH;

let toxiproxy: ToxiproxyServer;
let redis: { url: string; child: ChildProcess };
let db: TestDatabase & { drop(): Promise<void> };
let link: ProxiedUpstream;
let gateway: GatewayProcess;
let key: string;

beforeAll(async () => {
  toxiproxy = await startToxiproxy();
  redis = await startRedis();
  ({ db, key } = await chaosDatabase());
  link = await toxiproxy.proxyTo(hostPortOf(redis.url));
  gateway = await startRedisLimitedGateway({
    databaseUrl: db.url,
    redisUrl: urlThrough(redis.url, link),
    rule: RULE,
    limit: LIMIT,
    timeoutMs: TIMEOUT_MS,
    key,
  });
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  await toxiproxy?.stop();
  await db?.drop();
  // The Redis of this file goes with it, keys and all.
  if (redis && redis.child.exitCode === null) {
    const exited = new Promise((resolve) => redis.child.once('exit', resolve));
    redis.child.kill('SIGTERM');
    await exited;
  }
});

async function timedGet(): Promise<{ status: number; ms: number; ratelimit: string | undefined }> {
  const startedMs = performance.now();
  const res = await call(`${gateway.url}${contentPath}`, { key });
  return {
    status: res.status,
    ms: performance.now() - startedMs,
    ratelimit: res.headers.ratelimit as string | undefined,
  };
}

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

    await link.proxy.addToxic({
      name: 'slow-close',
      type: 'slow_close',
      stream: 'downstream',
      toxicity: 1,
      attributes: { delay: CLOSE_DELAY_MS },
    });
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
    while (performance.now() - killedAtMs < CLOSE_DELAY_MS - 2 * FAIL_OPEN_BOUND_MS) held.push(await timedGet());
    expect(held.length).toBeGreaterThanOrEqual(2);
    for (const res of held) {
      expect(res.status).toBe(200);
      expect(res.ratelimit).toBeUndefined();
      expect(res.ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
      expect(res.ms).toBeLessThan(FAIL_OPEN_BOUND_MS);
    }
    expect(await checkTimeouts()).toBeGreaterThanOrEqual(timeoutsAtStart + held.length);

    // The close arrives; the client reconnects by itself and counting goes on in the same window.
    // The commands sent into the dead connection never reached Redis: the count is where it was.
    let first: Awaited<ReturnType<typeof timedGet>> | undefined;
    await waitUntil(
      async () => {
        const res = await timedGet();
        expect(res.status).toBe(200);
        expect(res.ms).toBeLessThan(FAIL_OPEN_BOUND_MS);
        if (res.ratelimit) first = res;
        return res.ratelimit !== undefined;
      },
      { timeoutMs: CLOSE_DELAY_MS + 10_000, intervalMs: 100, what: 'rate limiting to count again' },
    );
    expect(performance.now() - killedAtMs).toBeGreaterThanOrEqual(CLOSE_DELAY_MS - 100);
    expect(remaining(first!.ratelimit)).toBe(LIMIT - 2);
  }, 90_000);
});
