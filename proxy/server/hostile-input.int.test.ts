/**
 * The policy layer under hostile input (issue #21), over HTTP against real gateway processes,
 * real PostgreSQL and Redis.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { roomInWindow, waitUntil } from '../../test/harness/index.ts';
import { useTestRedis } from '../../test/support/redis.ts';

const db = useTestDatabase();
const redis = useTestRedis();
let n = 0;
const redisEnv = () => ({
  ARKVORY_DATABASE_URL: db.url,
  ARKVORY_REDIS_URL: redis.url,
  ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}h${++n}:`,
  ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '5000',
});

describe('hostile rule regexes', () => {
  it('a published catastrophic-backtracking regex neither freezes requests nor the admin API that removes it', async () => {
    // 40 characters: `(.*.*)*X` on a backtracking engine would take far longer than the test timeout.
    const repo = 'a'.repeat(40);
    const matching = `${'a'.repeat(39)}x`;
    await createRepository(db.pool, repo);
    await createRepository(db.pool, matching);
    const admin = await createServiceAccount(db.pool, {
      scopes: ['read', 'write', 'admin'],
      grants: { [repo]: 'read', [matching]: 'read' },
    });
    const gw = await startGateway({ env: redisEnv() });
    const publish = (rules: unknown[]) =>
      fetch(`${gw.url}/api/v1/admin/rate-limits`, {
        method: 'PUT',
        headers: { ...bearer(admin.key), 'content-type': 'application/json' },
        body: JSON.stringify({ rate_limits: { gateway_request: rules } }),
      });

    const refused = await publish([{ name: 'lookahead', action: 'skip', match: { route: { regex: '^(?!/health)' } } }]);
    expect(refused.status).toBe(400);
    const body = (await refused.json()) as { code: string; message: string };
    expect(body.code).toBe('invalid_request');
    expect(body.message).toContain('rule "lookahead"');
    expect(body.message).toContain('RE2 syntax');

    const hostile = { name: 'hostile', action: 'limit', characteristics: ['ip'], limit: 100, period_s: 60 };
    expect(
      (
        await publish([
          { ...hostile, match: { repository: { regex: '(.*.*)*x' } } },
          { ...hostile, name: 'hostile_route', limit: 1000, match: { route: { regex: '.*.*.*.*.*X' } } },
        ])
      ).status,
    ).toBe(200);
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${gw.url}/api/v1/repositories/${repo}/artifacts/nothing-here/content`, {
        headers: bearer(admin.key),
      });
      expect(r.status).toBe(404);
      expect(r.headers.get('ratelimit-policy')).not.toContain('"hostile"');
      await r.arrayBuffer();
    }
    // The same rule on a repository that does match: it applies (the engine is live, not bypassed).
    const hit = await fetch(`${gw.url}/api/v1/repositories/${matching}/artifacts/nothing-here/content`, {
      headers: bearer(admin.key),
    });
    expect(hit.status).toBe(404);
    expect(hit.headers.get('ratelimit-policy')).toBe('"hostile";q=100;w=60');
    const removed = await fetch(`${gw.url}/api/v1/admin/rate-limits/gateway_request/rules/hostile`, {
      method: 'DELETE',
      headers: bearer(admin.key),
    });
    expect(removed.status).toBe(204);
    expect(await gw.stop()).toBe(0);
  });
});

describe('repeated authentication failures (shipped auth_failure default)', () => {
  it('bans the address after 20 failures with 429 and Retry-After from the ban end, and logs the ban once', async () => {
    const account = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const gw = await startGateway({ env: redisEnv() });
    const wrong = `ark_${account.keyId}_${'A'.repeat(43)}`;
    const get = (key: string) => fetch(`${gw.url}/api/v1/admin/rate-limits`, { headers: bearer(key) });
    // 20 failures are within the limit; the 21st passes it and starts the 900 s ban (it is still a 401).
    // They count per wall-clock minute: the 21 must not straddle two.
    await roomInWindow(60_000, 10_000);
    for (let i = 0; i < 21; i++) expect((await get(wrong)).status, `failure ${i + 1}`).toBe(401);
    const t0 = Date.now();
    for (const key of [wrong, account.key]) {
      const banned = await get(key);
      expect(banned.status).toBe(429);
      expect(((await banned.json()) as { code: string }).code).toBe('rate_limited');
      const retryAfter = Number(banned.headers.get('retry-after'));
      // Retry-After is the ban's end (900 s from the 21st failure), not the 60 s window's.
      expect(retryAfter).toBeGreaterThan(900 - Math.ceil((Date.now() - t0) / 1000) - 2);
      expect(retryAfter).toBeLessThanOrEqual(900);
      expect(banned.headers.get('ratelimit-policy')).toBe('"ban_ip_after_auth_failures";q=20;w=60');
    }
    const banLines = () => gw.logLines().filter((l) => l.msg === 'address banned after failed authentications');
    // The line crosses the gateway's stdout pipe after the answers: waited for.
    await waitUntil(() => banLines().length > 0, { what: 'the ban line', timeoutMs: 10_000, process: gw });
    const bans = banLines();
    expect(bans).toHaveLength(1);
    expect(bans[0]).toMatchObject({
      limiter: 'auth_failure',
      rules: ['ban_ip_after_auth_failures'],
      shadow: false,
      ip: '127.0.0.1',
    });
    expect(gw.logs()).not.toContain(account.key.slice(4 + 16 + 1));
    expect(await gw.stop()).toBe(0);
  });

  it('a success clears the failures and a shadow ban of the address (spec 1.5); a clean address writes nothing', async () => {
    const account = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    // Republishing the shipped ban as `log` weakens a default rule: a bypass publisher's to do.
    const env = { ...redisEnv(), ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: account.name };
    const gw = await startGateway({ env });
    const wrong = `ark_${account.keyId}_${'A'.repeat(43)}`;
    const get = (key: string) => fetch(`${gw.url}/api/v1/admin/rate-limits`, { headers: bearer(key) });
    const keys = () => redis.client.keys(`${env.ARKVORY_REDIS_KEY_PREFIX}rl:auth_failure:*`);
    // A success (sent at `sentAtMs`) leaves nothing that counts: no ban and no counter of its window.
    // Both rules count in fixed 60 s windows: a counter of a window that ended before the success
    // counts nothing and expires on its own.
    const countingAfter = async (sentAtMs: number) => {
      const windowStartMs = sentAtMs - (sentAtMs % 60_000);
      return (await keys()).filter(
        (k) => !/:c:\d+$/.test(k) || Number(k.slice(k.lastIndexOf(':') + 1)) >= windowStartMs,
      );
    };
    const succeeds = async () => {
      const sentAtMs = Date.now();
      expect((await get(account.key)).status).toBe(200);
      return sentAtMs;
    };
    expect(await countingAfter(await succeeds())).toEqual([]);

    // 19 failures, a success, then 20 more failures are still within the limit: the count restarted.
    for (let i = 0; i < 19; i++) expect((await get(wrong)).status).toBe(401);
    expect(await countingAfter(await succeeds())).toEqual([]);
    for (let i = 0; i < 20; i++) expect((await get(wrong)).status).toBe(401);
    expect((await get(account.key)).status).toBe(200);

    // As a shadow rule (log), the ban is written but does not block; a success discards it.
    const publish = await fetch(`${gw.url}/api/v1/admin/rate-limits`, {
      method: 'PUT',
      headers: { ...bearer(account.key), 'content-type': 'application/json' },
      body: JSON.stringify({
        rate_limits: {
          auth_failure: [
            {
              name: 'ban_ip_after_auth_failures',
              action: 'log',
              characteristics: ['ip'],
              limit: 1,
              period_s: 60,
              ban_for_s: 600,
            },
          ],
        },
      }),
    });
    expect(publish.status).toBe(200);
    for (let i = 0; i < 3; i++) expect((await get(wrong)).status).toBe(401);
    expect((await keys()).some((k) => k.endsWith(':b'))).toBe(true);
    expect(await countingAfter(await succeeds())).toEqual([]);
    expect(await gw.stop()).toBe(0);
    // Read once the gateway has exited and its output is drained: the line may still be on its way
    // when the 401 that caused it has arrived.
    const shadowLogs = gw
      .logLines()
      .filter((l) => l.msg === 'address would be banned after failed authentications (shadow rule)');
    expect(shadowLogs).toHaveLength(1);
  });
});

describe('artifact, package and asset names', () => {
  it('NFC and NFD spellings are one artifact; control, bidi and dot look-alike characters get 400 and store nothing', async () => {
    await createRepository(db.pool, 'names');
    const writer = await createServiceAccount(db.pool, { grants: { names: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const base = `${gw.url}/api/v1/repositories/names`;
    const data = randomContent(2048);
    const nfc = encodeURIComponent('caf\u00e9.bin');
    const nfd = encodeURIComponent('cafe\u0301.bin');
    expect(nfc).not.toBe(nfd);
    expect(
      (await request(`${base}/artifacts/${nfc}`, { method: 'PUT', headers: bearer(writer.key), body: data })).status,
    ).toBe(201);
    // The same bytes under the decomposed spelling are the same artifact (200, not a second 201).
    expect(
      (await request(`${base}/artifacts/${nfd}`, { method: 'PUT', headers: bearer(writer.key), body: data })).status,
    ).toBe(200);
    const got = await request(`${base}/artifacts/${nfd}/content`, { headers: bearer(writer.key) });
    expect(got.status).toBe(200);
    expect(sha256(got.body)).toBe(sha256(data));
    for (const bad of ['a%C2%85b', 'evil%E2%80%AEgpj.exe', '%EF%BC%8E%EF%BC%8E', 'a%E2%80%8Bb']) {
      const r = await request(`${base}/artifacts/${bad}`, { method: 'PUT', headers: bearer(writer.key), body: data });
      expect(r.status, bad).toBe(400);
      expect((JSON.parse(r.body.toString()) as { code: string }).code).toBe('invalid_request');
      const asset = await request(`${base}/packages/p/1.0/assets/${bad}`, {
        method: 'PUT',
        headers: bearer(writer.key),
        body: data,
      });
      expect(asset.status, bad).toBe(400);
    }
    const rows = await db.pool.query<{ name: string }>(`SELECT name FROM arkvory_artifacts WHERE repository = 'names'`);
    expect(rows.rows.map((r) => r.name)).toEqual(['caf\u00e9.bin']);
    expect(await gw.stop()).toBe(0);
  });
});

describe('configuration secrets', () => {
  it('the startup log shows the rules-service URL without its password or query, even with user info spelt without //', async () => {
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_RULES_SERVICE_URL: 'http:svc:hunter2-pw@127.0.0.1:9/?token=query-token-pw',
      },
    });
    const ready = gw.logLines().find((l) => l.msg === 'rate limiting ready');
    expect(ready?.rulesService).toBe('http://<redacted>@127.0.0.1:9/?<redacted>');
    expect(gw.logs()).not.toContain('hunter2-pw');
    expect(gw.logs()).not.toContain('query-token-pw');
    expect(await gw.stop()).toBe(0);
  });
});

describe('guardrail on bypass rules (spec 2.1)', () => {
  it('an admin key not named in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS cannot publish a skip rule; a named one can', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const operator = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const gw = await startGateway({
      env: { ...redisEnv(), ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: `someone-else,${operator.name}` },
    });
    const publish = (key: string, rules: unknown[]) =>
      fetch(`${gw.url}/api/v1/admin/rate-limits`, {
        method: 'PUT',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: JSON.stringify({ rate_limits: { gateway_request: rules } }),
      });
    const limit = {
      name: 'writes_by_principal',
      action: 'limit',
      characteristics: ['principal'],
      limit: 100,
      period_s: 60,
    };
    const bypass = { name: 'bypass_ci', action: 'skip', match: { principal: admin.principalId } };
    const refused = await publish(admin.key, [limit, bypass]);
    expect(refused.status).toBe(403);
    const body = (await refused.json()) as { code: string; message: string };
    expect(body.code).toBe('forbidden');
    expect(body.message).toContain('rule "bypass_ci"');
    expect(body.message).toContain('ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS');
    // Refused whole: not even the limit rule of the batch was published.
    const shown = (await (
      await fetch(`${gw.url}/api/v1/admin/rate-limits/gateway_request`, { headers: bearer(admin.key) })
    ).json()) as { effective: Array<{ spec: { name: string } }> };
    expect(shown.effective.map((r) => r.spec.name)).not.toContain('writes_by_principal');
    // Non-bypass rules are still the admin's to publish; the named operator may publish the bypass.
    expect((await publish(admin.key, [limit])).status).toBe(200);
    expect((await publish(operator.key, [bypass])).status).toBe(200);
    expect(await gw.stop()).toBe(0);
  });
});

describe('a flood of random keys', () => {
  it("costs PostgreSQL no query per request (the negative cache), measured in the database's own transaction count", async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    // PostgreSQL publishes a backend's statistics when it exits (or within seconds): count from
    // before the gateway starts to after it stopped, so every transaction it caused is in.
    const xacts = async () => {
      const r = await db.pool.query<{ n: string }>(
        'SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()',
      );
      return Number(r.rows[0]!.n);
    };
    await sleep(1500);
    const before = await xacts();
    const gw = await startGateway({ env: { ...redisEnv(), ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: admin.name } });
    // Observe only: with the shipped ban the flood would be refused before the key is looked up.
    const observe = await fetch(`${gw.url}/api/v1/admin/rate-limits`, {
      method: 'PUT',
      headers: { ...bearer(admin.key), 'content-type': 'application/json' },
      body: JSON.stringify({
        rate_limits: {
          auth_failure: [
            {
              name: 'ban_ip_after_auth_failures',
              action: 'log',
              characteristics: ['ip'],
              limit: 20,
              period_s: 60,
              ban_for_s: 900,
            },
          ],
        },
      }),
    });
    expect(observe.status).toBe(200);
    const FLOOD = 1000;
    let unauthorized = 0;
    const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
    for (let i = 0; i < FLOOD; i += 25) {
      const batch = Array.from({ length: 25 }, () => {
        const id = Array.from(randomBytes(16), (b) => alphabet[b % 36]).join('');
        return fetch(`${gw.url}/api/v1/admin/rate-limits`, {
          headers: bearer(`ark_${id}_${randomBytes(32).toString('base64url')}`),
        }).then((r) => r.status);
      });
      for (const status of await Promise.all(batch)) if (status === 401) unauthorized++;
    }
    expect(unauthorized).toBe(FLOOD);
    expect(await gw.stop()).toBe(0);
    await sleep(1500);
    const used = (await xacts()) - before;
    // Start, migrations check, seeding, epoch polls and shutdown are a few hundred transactions at
    // most; one key lookup per request would add 1,000 on top.
    expect(used).toBeLessThan(FLOOD / 2);
  });
});
