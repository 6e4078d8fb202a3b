/**
 * `on_store_error: deny` over HTTP on a real gateway, against a redis-server this test owns and
 * stops: the rule that fails closed answers 503 `rate_limit_unavailable` (Retry-After 1), the
 * others still fail open, the denial is counted, and the gateway recovers when Redis is back.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { startRedisServer, waitUntil, type RedisServer } from '../../test/harness/index.ts';

const db = useTestDatabase();
const servers: RedisServer[] = [];
afterAll(async () => {
  for (const server of servers) await server.stop();
});

// Limits far above what the test sends: only the store's failure can refuse a request.
const RULES = `rate_limits:
  gateway_request:
    - name: live_fails_closed
      action: limit
      characteristics: [ip]
      limit: 100000
      period_s: 3600
      on_store_error: deny
      match:
        route: /health/live
    - name: status_fails_open
      action: limit
      characteristics: [ip]
      limit: 100000
      period_s: 3600
      match:
        route: /health/status
`;

describe('a fail-closed rate-limit rule (real gateway, real redis-server stopped)', () => {
  it('denies with 503 rate_limit_unavailable while Redis is down; other rules fail open; counted; recovers', async () => {
    const redis = await startRedisServer();
    servers.push(redis);
    const dir = await makeTempDir('arkvory-rules-');
    const rulesFile = path.join(dir, 'rate_limits.yaml');
    await writeFile(rulesFile, RULES);
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REDIS_URL: redis.url,
        ARKVORY_RATE_LIMITS_FILE: rulesFile,
        ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '250',
      },
    });
    expect((await fetch(`${gw.url}/health/live`)).status).toBe(200);
    expect((await fetch(`${gw.url}/health/status`)).status).toBe(200);

    await redis.stop();
    const denied = await fetch(`${gw.url}/health/live`);
    expect(denied.status).toBe(503);
    expect(denied.headers.get('retry-after')).toBe('1');
    expect(denied.headers.get('ratelimit')).toBeNull();
    expect(await denied.json()).toEqual({ code: 'rate_limit_unavailable', message: expect.any(String) });
    const open = await fetch(`${gw.url}/health/status`);
    expect(open.status).toBe(200);
    expect(open.headers.get('ratelimit')).toBeNull(); // nothing was counted, so nothing to report

    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toMatch(
      /arkvory_rate_limit_rule_evaluations_total\{limiter="gateway_request",rule="live_fails_closed",action="limit",result="store_error"\} [1-9]/,
    );
    expect(metrics).not.toMatch(/rule="status_fails_open",action="limit",result="store_error"/);
    expect(metrics).toMatch(
      /arkvory_rate_limit_checks_total\{limiter="gateway_request",action="block",matched="true",error="true"\} [1-9]/,
    );

    // Redis back on the same port: the client reconnects by itself and the rule admits again.
    servers.push(await startRedisServer({ port: redis.port }));
    await waitUntil(async () => (await fetch(`${gw.url}/health/live`)).status === 200, {
      what: 'the fail-closed rule to admit again once Redis is back',
      timeoutMs: 30_000,
    });
    expect(await gw.stop()).toBe(0);
  });
});
