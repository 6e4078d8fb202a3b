import { rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { roomInWindow } from '../../test/harness/index.ts';
import { SHADOW_LINES } from './rate-limit-gate.ts';
import { useTestRedis } from '../../test/support/redis.ts';

const db = useTestDatabase();
const redis = useTestRedis();
let n = 0;

/** The status of one GET from `localAddress` (a loopback address of its own), no agent. */
function statusFrom(localAddress: string, url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { localAddress, headers, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

async function rulesFile(text: string): Promise<string> {
  const dir = await makeTempDir('arkvory-rules-');
  const file = path.join(dir, 'rate_limits.yaml');
  await writeFile(file, text);
  return file;
}

const HEALTH_LIVE_LIMIT = `rate_limits:
  gateway_request:
    - name: health_live_by_ip
      description: "file tier beats the default skip of health routes"
      action: limit
      characteristics: [ip]
      limit: 2
      period_s: 3600
      match:
        route: /health/live
`;

describe('rate limiting over HTTP (real gateway process)', () => {
  const redisEnv = () => ({
    ARKVORY_DATABASE_URL: db.url,
    ARKVORY_REDIS_URL: redis.url,
    ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}g${++n}:`,
    ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '5000',
  });

  it('answers 429 rate_limited with Retry-After and RateLimit headers once a file rule trips', async () => {
    const gw = await startGateway({
      env: { ...redisEnv(), ARKVORY_RATE_LIMITS_FILE: await rulesFile(HEALTH_LIVE_LIMIT) },
    });
    const first = await fetch(`${gw.url}/health/live`);
    expect(first.status).toBe(200);
    expect(first.headers.get('ratelimit-policy')).toBe('"health_live_by_ip";q=2;w=3600');
    expect(first.headers.get('ratelimit')).toMatch(/^"health_live_by_ip";r=1;t=\d+$/);
    expect((await fetch(`${gw.url}/health/live`)).status).toBe(200);
    const blocked = await fetch(`${gw.url}/health/live`);
    expect(blocked.status).toBe(429);
    expect(await blocked.json()).toEqual({ code: 'rate_limited', message: expect.any(String) });
    const retryAfter = Number(blocked.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    expect(blocked.headers.get('ratelimit')).toBe(`"health_live_by_ip";r=0;t=${retryAfter}`);
    expect(blocked.headers.get('ratelimit-policy')).toBe('"health_live_by_ip";q=2;w=3600');
    // Other health routes fall through to the default skip rule: never limited, no headers.
    const status = await fetch(`${gw.url}/health/status`);
    expect(status.status).toBe(200);
    expect(status.headers.get('ratelimit')).toBeNull();
    const keys = await redis.client.keys(`${redis.prefix}g${n}:rl:gateway_request:*`);
    expect(keys).toHaveLength(1);
    expect(await gw.stop()).toBe(0);
  });

  it('counts by the client a trusted proxy names in Forwarded alone, not by the proxy', async () => {
    const gw = await startGateway({
      env: {
        ...redisEnv(),
        ARKVORY_TRUSTED_PROXIES: '127.0.0.2',
        ARKVORY_RATE_LIMITS_FILE: await rulesFile(HEALTH_LIVE_LIMIT),
      },
    });
    const via = (forwarded: string) => statusFrom('127.0.0.2', `${gw.url}/health/live`, { forwarded });
    expect(await via('for=198.51.100.7;proto=http')).toBe(200);
    expect(await via('for=198.51.100.7;proto=http')).toBe(200);
    expect(await via('for=198.51.100.7;proto=http')).toBe(429);
    expect(await via('for="[2001:db8::8]:4711";proto=http')).toBe(200);
    expect(await via('for=198.51.100.9, for=198.51.100.8')).toBe(200);
    expect(await gw.stop()).toBe(0);
  });

  it('by default trusts no proxy: a loopback client naming a new X-Forwarded-For each time is still counted as itself', async () => {
    const gw = await startGateway({
      env: { ...redisEnv(), ARKVORY_RATE_LIMITS_FILE: await rulesFile(HEALTH_LIVE_LIMIT) },
    });
    const forged = (client: string) =>
      statusFrom('127.0.0.1', `${gw.url}/health/live`, { 'x-forwarded-for': client, forwarded: `for=${client}` });
    expect(await forged('198.51.100.1')).toBe(200);
    expect(await forged('198.51.100.2')).toBe(200);
    expect(await forged('198.51.100.3')).toBe(429);
    expect(await statusFrom('127.0.0.3', `${gw.url}/health/live`, {})).toBe(200);
    expect(await gw.stop()).toBe(0);
  });

  it('counts an IPv6 client by its /64 and an IPv4-mapped one as its IPv4 address', async () => {
    const gw = await startGateway({
      env: {
        ...redisEnv(),
        ARKVORY_TRUSTED_PROXIES: '127.0.0.2',
        ARKVORY_RATE_LIMITS_FILE: await rulesFile(HEALTH_LIVE_LIMIT),
      },
    });
    const as = (client: string) => statusFrom('127.0.0.2', `${gw.url}/health/live`, { 'x-forwarded-for': client });
    // Three addresses of 2001:db8:1:2::/64, one request each: one client, over its limit of 2.
    expect(await as('2001:db8:1:2::1')).toBe(200);
    expect(await as('2001:db8:1:2:aaaa:bbbb:cccc:dddd')).toBe(200);
    expect(await as('2001:db8:1:2::3')).toBe(429);
    expect(await as('2001:db8:1:3::1')).toBe(200);
    expect(await as('198.51.100.7')).toBe(200);
    expect(await as('::ffff:198.51.100.7')).toBe(200);
    expect(await as('::ffff:c633:6407')).toBe(429);
    // IPv4 clients of a NAT64/SIIT translator (64:ff9b::/96) share a /64 but are three clients.
    expect(await as('64:ff9b::203.0.113.1')).toBe(200);
    expect(await as('64:ff9b::203.0.113.2')).toBe(200);
    expect(await as('64:ff9b::cb00:7103')).toBe(200);
    const keys = await redis.client.keys(`${redis.prefix}g${n}:rl:gateway_request:*`);
    const ipOf = (key: string) => decodeURIComponent(/\|ip=([^}]*)\}/.exec(key)?.[1] ?? '');
    expect(new Set(keys.map(ipOf))).toEqual(
      new Set(['2001:db8:1:2::/64', '2001:db8:1:3::/64', '198.51.100.7', '203.0.113.1', '203.0.113.2', '203.0.113.3']),
    );
    expect(await gw.stop()).toBe(0);
  });

  it('a shadow rule exceeded by 100 requests: all answered, 5 lines, the enforcing rule still in the headers', async () => {
    // The shadow rule first, then an enforcing one the requests stay under.
    const shadow = `${HEALTH_LIVE_LIMIT.replace('name: health_live_by_ip', 'name: health_live_shadow')
      .replace('action: limit', 'action: log')
      .replace(
        'limit: 2',
        'limit: 1',
      )}${HEALTH_LIVE_LIMIT.split('\n').slice(2).join('\n').replace('limit: 2', 'limit: 1000')}`;
    const gw = await startGateway({ env: { ...redisEnv(), ARKVORY_RATE_LIMITS_FILE: await rulesFile(shadow) } });
    const linesBefore = gw.logLines().length;
    for (let i = 0; i < 100; i++) {
      const res = await fetch(`${gw.url}/health/live`);
      expect(res.status).toBe(200);
      // A shadow rule changes nothing a client sees: past it, the enforcing rule is still reported.
      expect(res.headers.get('ratelimit-policy')).toBe('"health_live_by_ip";q=1000;w=3600');
      expect(res.headers.get('ratelimit')).toMatch(new RegExp(`^"health_live_by_ip";r=${999 - i};t=\\d+$`));
      await res.arrayBuffer();
    }
    // Once the line of a request sent after them is in, every line they caused is too.
    await (await fetch(`${gw.url}/health/status`, { headers: { 'x-request-id': 'after-shadow' } })).arrayBuffer();
    await expect.poll(() => gw.logLines().some((l) => l.clientReqId === 'after-shadow'), { timeout: 5000 }).toBe(true);
    const exceeded = gw
      .logLines()
      .slice(linesBefore)
      .filter((l) => l.msg === 'shadow rate limit exceeded');
    expect(exceeded.length).toBe(SHADOW_LINES.linesPerInterval);
    expect(exceeded[0]).toMatchObject({ level: 'info', rule: 'health_live_shadow', shadow: true });
    expect(await gw.stop()).toBe(0);
  });

  it('publishes, shows and unpublishes rules through the admin API; counts failed authentications', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
    const gw = await startGateway({ env: redisEnv() });
    const api = (method: string, p: string, body?: unknown, key = admin.key) =>
      fetch(`${gw.url}/api/v1/admin/rate-limits${p}`, {
        method,
        headers: { ...bearer(key), ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });

    const invalid = await api('PUT', '', {
      rate_limits: { gateway_request: [{ name: 'Bad-Name', action: 'limit' }], nope: [] },
    });
    expect(invalid.status).toBe(400);
    const invalidBody = (await invalid.json()) as { code: string; message: string };
    expect(invalidBody.code).toBe('invalid_request');
    expect(invalidBody.message).toContain('name must match');
    expect(invalidBody.message).toContain('limit and log rules require limit and period_s');
    expect(invalidBody.message).toContain('unknown limiter "nope"');

    const published = await api('PUT', '', {
      rate_limits: {
        gateway_request: [
          {
            name: 'status_by_ip',
            action: 'limit',
            characteristics: ['ip'],
            limit: 1,
            period_s: 600,
            match: { route: '/health/status' },
          },
        ],
        auth_failure: {
          rules: [
            {
              name: 'ban_ip_after_auth_failures',
              action: 'limit',
              characteristics: ['ip'],
              limit: 2,
              period_s: 60,
              ban_for_s: 900,
            },
          ],
        },
      },
    });
    expect(published.status).toBe(200);
    expect(await published.json()).toEqual({ published: { limiters: ['gateway_request', 'auth_failure'], rules: 2 } });
    expect((await fetch(`${gw.url}/health/status`)).status).toBe(200);
    expect((await fetch(`${gw.url}/health/status`)).status).toBe(429);

    const shown = (await (await api('GET', '/gateway_request')).json()) as {
      source: string;
      effective: Array<{ tier: string; spec: { name: string } }>;
    };
    expect(shown.source).toBe('store');
    expect(shown.effective.map((t) => `${t.tier}:${t.spec.name}`)).toEqual([
      'published_rules:status_by_ip',
      'default_rules:skip_health_checks',
      'default_rules:limit_anonymous_requests_by_ip',
      'default_rules:limit_requests_by_principal',
    ]);
    expect((await api('DELETE', '/gateway_request/rules/status_by_ip')).status).toBe(204);
    expect((await api('DELETE', '/gateway_request/rules/status_by_ip')).status).toBe(404);
    expect((await fetch(`${gw.url}/health/status`)).status).toBe(200);

    // The published auth_failure rule (same name as the default) replaces it: 2 failures pass as 401,
    // the third starts a ban, and then even a valid key from that address gets 429.
    const wrong = `ark_${admin.keyId}_${'A'.repeat(43)}`;
    const statuses = [];
    // The rule counts per wall-clock minute: the 3 failures must not straddle two.
    await roomInWindow(60_000, 10_000);
    for (let i = 0; i < 3; i++) statuses.push((await api('GET', '', undefined, wrong)).status);
    expect(statuses).toEqual([401, 401, 401]);
    const banned = await api('GET', '');
    expect(banned.status).toBe(429);
    expect(Number(banned.headers.get('retry-after'))).toBeGreaterThan(890);
    expect(banned.headers.get('ratelimit-policy')).toBe('"ban_ip_after_auth_failures";q=2;w=60');
    expect(await gw.stop()).toBe(0);
  });

  it('enforces a transfer_bytes volume quota: peeked before, counted with the bytes after', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
    const quota = `rate_limits:
  transfer_bytes:
    - name: admin_bytes_by_principal
      action: limit
      characteristics: [principal]
      limit: 1500
      period_s: 3600
      match:
        request_type: admin
`;
    const gw = await startGateway({ env: { ...redisEnv(), ARKVORY_RATE_LIMITS_FILE: await rulesFile(quota) } });
    const get = () => fetch(`${gw.url}/api/v1/admin/rate-limits/auth_failure`, { headers: bearer(admin.key) });
    const seen: number[] = [];
    for (let i = 0; i < 10 && seen.at(-1) !== 429; i++) {
      const res = await get();
      await res.arrayBuffer();
      seen.push(res.status);
      // The count lands when the response closes; give it a moment before the next peek.
      await new Promise((r) => setTimeout(r, 100));
    }
    // Each response is several hundred bytes: the quota lets a few through, then refuses.
    expect(seen.at(-1)).toBe(429);
    expect(seen.filter((s) => s === 200).length).toBeGreaterThanOrEqual(1);
    expect(seen.filter((s) => s === 200).length).toBeLessThan(6);
    const blocked = await get();
    expect(blocked.status).toBe(429);
    expect(blocked.headers.get('ratelimit-policy')).toBe('"admin_bytes_by_principal";q=1500;w=3600');
    expect(await gw.stop()).toBe(0);
  });

  it('an invalid rule file is logged naming file, line and rule, and is not applied: the stored file tier stays (spec 2.8.2)', async () => {
    const file = await rulesFile(`rate_limits:
  gateway_request:
    - name: fine
      action: skip
    - name: broken
      action: limit
      limit: 5
      characteristics: [nope]
`);
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const env = { ...redisEnv() };
    const fileTier = async (url: string) =>
      (
        (await (
          await fetch(`${url}/api/v1/admin/rate-limits/gateway_request`, { headers: bearer(admin.key) })
        ).json()) as { effective: Array<{ tier: string; spec: { name: string } }> }
      ).effective
        .filter((r) => r.tier === 'file_rules')
        .map((r) => r.spec.name);
    // A previous start with a valid file seeded the file tier of this store.
    const good = await startGateway({ env: { ...env, ARKVORY_RATE_LIMITS_FILE: await rulesFile(HEALTH_LIVE_LIMIT) } });
    expect(await fileTier(good.url)).toEqual(['health_live_by_ip']);
    expect(await good.stop()).toBe(0);

    const gw = await startGateway({ env: { ...env, ARKVORY_RATE_LIMITS_FILE: file } });
    const logged = gw.logLines().filter((l) => l.code === 'invalid_rules' && l.file === file);
    expect(logged).toHaveLength(1);
    expect(logged[0]!.level).toBe('error');
    const problems = logged[0]!.problems as string[];
    expect(problems).toContain(
      `${file}:5: rate_limits.gateway_request[1] (rule "broken"): limit and log rules require limit and period_s`,
    );
    expect(
      problems.some((p) =>
        p.startsWith(
          `${file}:8: rate_limits.gateway_request[1].characteristics[0] (rule "broken"): characteristic "nope" is not an available property`,
        ),
      ),
    ).toBe(true);
    const ready = (await (await fetch(`${gw.url}/health/ready`, { headers: bearer(admin.key) })).json()) as {
      rateLimits: { rulesFile: string };
    };
    expect(ready.rateLimits.rulesFile).toBe('invalid');
    // Not even the valid rule of the bad file applies; the last valid file's rules stay in force.
    expect(await fileTier(gw.url)).toEqual(['health_live_by_ip']);
    expect(await gw.stop()).toBe(0);
    // On a store that never saw a valid file there is no file tier at all.
    const fresh = await startGateway({ env: { ...redisEnv(), ARKVORY_RATE_LIMITS_FILE: file } });
    expect(await fileTier(fresh.url)).toEqual([]);
    expect(await fresh.stop()).toBe(0);
  });

  it('a missing rule file is optional (spec 2.7): the gateway starts, warns once, and says so in readiness', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const missing = path.join(await makeTempDir('arkvory-rules-'), 'absent.yaml');
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_RATE_LIMITS_FILE: missing } });
    expect(gw.logLines().filter((l) => l.code === 'rules_file_missing')).toHaveLength(1);
    const ready = (await (await fetch(`${gw.url}/health/ready`, { headers: bearer(admin.key) })).json()) as {
      rateLimits: { rulesFile: string };
    };
    expect(ready.rateLimits.rulesFile).toBe('missing');
    expect(await gw.stop()).toBe(0);
  });

  it('a rule file that disappears or breaks while the gateway runs changes nothing and never stops it', async () => {
    const file = await rulesFile(HEALTH_LIVE_LIMIT);
    const gw = await startGateway({ env: { ...redisEnv(), ARKVORY_RATE_LIMITS_FILE: file } });
    expect((await fetch(`${gw.url}/health/live`)).status).toBe(200);
    await writeFile(file, 'rate_limits: [this is: not valid');
    await sleep(300);
    expect((await fetch(`${gw.url}/health/live`)).status).toBe(200);
    await rm(file);
    await sleep(300);
    // The file's rule (limit 2) is still the one in force: the third request is refused.
    expect((await fetch(`${gw.url}/health/live`)).status).toBe(429);
    expect(gw.child.exitCode).toBeNull();
    expect(await gw.stop()).toBe(0);
  });

  // Also on an instance of two workers (docs/architecture.md "Workers"): its memory counters are the
  // instance's, whichever worker each request reaches.
  it.each([1, 2])(
    'without Redis keeps counters in memory and published rules in PostgreSQL, across a restart (%i worker(s))',
    async (workers) => {
      const admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
      const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: String(workers) };
      const put = (url: string) =>
        fetch(`${url}/api/v1/admin/rate-limits`, {
          method: 'PUT',
          headers: { ...bearer(admin.key), 'content-type': 'application/json' },
          body: JSON.stringify({
            rate_limits: {
              gateway_request: [
                {
                  name: 'live_by_ip_pg',
                  action: 'limit',
                  characteristics: ['ip'],
                  limit: 1,
                  period_s: 600,
                  match: { route: '/health/live' },
                },
              ],
            },
          }),
        });
      const first = await startGateway({ env });
      expect((await put(first.url)).status).toBe(200);
      expect((await fetch(`${first.url}/health/live`)).status).toBe(200);
      expect((await fetch(`${first.url}/health/live`)).status).toBe(429);
      expect(await first.stop()).toBe(0);
      const second = await startGateway({ env });
      // The rule survived (PostgreSQL); the counters did not (process memory).
      expect((await fetch(`${second.url}/health/live`)).status).toBe(200);
      expect((await fetch(`${second.url}/health/live`)).status).toBe(429);
      const { rows } = await db.pool.query<{ limiter: string }>(
        'SELECT limiter FROM arkvory_rate_limit_rules ORDER BY limiter',
      );
      expect(rows.map((r) => r.limiter)).toEqual(['auth_failure', 'gateway_request']);
      expect(await second.stop()).toBe(0);
    },
  );
});
