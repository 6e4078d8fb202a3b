/**
 * Secrets rotated without a restart, on real processes and a real PostgreSQL: the runtime login's
 * password changed with ALTER ROLE, its file rewritten and the gateway sent SIGHUP while requests
 * keep coming; then connections made after the rotation log in with the new password and no
 * request failed. A new password PostgreSQL refuses is kept out (the old one stays, a warning, the
 * failure metric). A rotated Redis password is used by the rate-limit client's reconnection (the
 * rule's counters still count in Redis after the old password is gone). A rotated metrics token is required by the next /metrics request. The rules service accepts its previous query token for the configured grace, and
 * then no more. The rules service and the router each run as their own database login.
 */
import { randomBytes } from 'node:crypto';
import { chmod, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished, vi } from 'vitest';
import type { DatabaseRole } from '../../migrations/grants.ts';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { bearer } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { installRoleLogins, poolFor, urlAs } from '../../test/support/database-roles.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  freeLoopbackPort,
  startGateway as startHarnessGateway,
  startRedisServer,
  STOP_GRACE_MS,
} from '../../test/harness/index.ts';

let db: TestDatabase & { drop(): Promise<void> };
let urls: Record<DatabaseRole, string>;
let key: string;
let principalId: string;
/** One storage root for every writer of this database, whatever URL it connects with. */
let dataDir: string;

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  urls = await installRoleLogins(db.url);
  dataDir = await makeTempDir();
  const writerPool = poolFor(urls.writer);
  try {
    const admin = new AdminStore(writerPool);
    await admin.createRepository('rot');
    const principal = await admin.createPrincipal('rot-user');
    principalId = principal.id;
    ({ key } = await admin.createKey(principal.id, { scopes: ['read', 'write', 'admin'] }));
    await admin.addGrant(principal.id, 'rot', 'write');
  } finally {
    await writerPool.end();
  }
}, 60_000);

afterAll(async () => {
  await db?.drop();
});

/** A login's URL without its password, the password, and the login's name. */
function split(url: string): { bare: string; password: string; login: string } {
  const u = new URL(url);
  const password = decodeURIComponent(u.password);
  u.password = '';
  return { bare: u.toString(), password, login: decodeURIComponent(u.username) };
}

/** A private secret file; `replace` writes a new one and renames it over (what an operator or kubelet does). */
async function secretFile(content: string): Promise<{ file: string; replace(content: string): Promise<void> }> {
  const dir = await makeTempDir('arkvory-rotation-');
  const file = path.join(dir, 'secret');
  const write = async (text: string) => {
    const tmp = `${file}.${randomBytes(4).toString('hex')}`;
    await writeFile(tmp, `${text}\n`, { mode: 0o600 });
    await chmod(tmp, 0o400);
    await rename(tmp, file);
  };
  await write(content);
  return { file, replace: write };
}

async function asAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.end();
  }
}

async function metric(gw: GatewayProcess, name: string, secret: string, token?: string): Promise<number> {
  const text = (await request(`${gw.url}/metrics`, { headers: token ? bearer(token) : {} })).body.toString();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{secret="${secret}"} `));
  if (line === undefined) throw new Error(`no ${name}{secret="${secret}"} in /metrics`);
  return Number(line.split(' ')[1]);
}

/** Requests that each need the database (a new artifact, its metadata), in `lanes` loops until stopped. */
function load(gw: GatewayProcess, lanes: number) {
  let running = true;
  let done = 0;
  const failures: string[] = [];
  const loops = Array.from({ length: lanes }, async (_, lane) => {
    for (let i = 0; running; i++) {
      const name = `l${lane}-${i}-${randomBytes(3).toString('hex')}.bin`;
      const put = await request(`${gw.url}/api/v1/repositories/rot/artifacts/${name}`, {
        method: 'PUT',
        headers: bearer(key),
        body: randomContent(512),
      });
      if (put.status !== 201) failures.push(`PUT ${name}: ${put.status} ${put.body.toString()}`);
      const meta = await request(`${gw.url}/api/v1/repositories/rot/artifacts/${name}`, { headers: bearer(key) });
      if (meta.status !== 200) failures.push(`GET ${name}: ${meta.status} ${meta.body.toString()}`);
      done++;
    }
  });
  return {
    failures,
    done: () => done,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

const logged = (gw: { logLines(): Array<Record<string, unknown>> }, pattern: RegExp) =>
  gw.logLines().filter((l) => pattern.test(String(l.msg)));

describe('the database password rotates on SIGHUP', () => {
  it('new connections log in with the new password, open ones keep working, no request fails', async () => {
    const { bare, password, login } = split(urls.writer);
    const secret = await secretFile(password);
    const metricsToken = await secretFile('metrics-token-one');
    const gw = await startGateway({
      dataDir,
      env: {
        ARKVORY_DATABASE_URL: bare,
        ARKVORY_DATABASE_PASSWORD_FILE: secret.file,
        ARKVORY_METRICS_TOKEN_FILE: metricsToken.file,
        ARKVORY_DATABASE_POOL_SIZE: '8',
      },
    });
    let traffic = load(gw, 3);
    await vi.waitFor(() => expect(traffic.done()).toBeGreaterThan(5), { timeout: 20_000, interval: 50 });

    // A refused new password (PostgreSQL still has the old one) is kept out, while requests go on.
    await secret.replace('not-the-password');
    gw.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(gw, /ARKVORY_DATABASE_PASSWORD not rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 50,
    });
    const refusal = logged(gw, /ARKVORY_DATABASE_PASSWORD not rotated/)[0]!;
    expect(refusal.level).toBe('warn');
    expect(refusal.code).toBe('secret_rotation_failed');
    expect(String(refusal.msg)).toMatch(/PostgreSQL refused the new value: password authentication failed/);
    expect(
      await metric(gw, 'arkvory_secret_rotation_failures_total', 'ARKVORY_DATABASE_PASSWORD', 'metrics-token-one'),
    ).toBe(1);
    expect(await metric(gw, 'arkvory_secret_rotations_total', 'ARKVORY_DATABASE_PASSWORD', 'metrics-token-one')).toBe(
      0,
    );

    // The real rotation: the password changes in PostgreSQL, then in the file, then SIGHUP.
    const next = randomBytes(12).toString('hex');
    await asAdmin((c) => c.query(`ALTER ROLE ${login} PASSWORD '${next}'`));
    urls.writer = urlAs(urls.writer, login, next); // for the tests after this one
    const rotatedAfter = await asAdmin(
      async (c) => (await c.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]!.t,
    );
    await secret.replace(next);
    gw.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(gw, /ARKVORY_DATABASE_PASSWORD rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 50,
    });
    expect(await metric(gw, 'arkvory_secret_rotations_total', 'ARKVORY_DATABASE_PASSWORD', 'metrics-token-one')).toBe(
      1,
    );
    const doneAtRotation = traffic.done();
    await vi.waitFor(() => expect(traffic.done()).toBeGreaterThan(doneAtRotation + 5), { timeout: 20_000 });

    // The pool's open connections logged in with the old password and still serve. End them while
    // nothing uses them: the requests after this need new connections, which the old password can
    // no longer open.
    await traffic.stop();
    const ended = await asAdmin(async (c) =>
      (
        await c.query<{ pid: number }>(
          `SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE usename = $1 AND application_name = 'arkvory-api' AND state = 'idle'`,
          [login],
        )
      ).rows.map((r) => r.pid),
    );
    expect(ended.length).toBeGreaterThan(0);
    expect(traffic.failures).toEqual([]);
    // pg_terminate_backend only signals: until each backend has exited and the gateway has read its
    // FATAL, the pool may lend a connection that dies under the next query (a 500 of the test's own
    // making, not of the rotation).
    await vi.waitFor(
      async () =>
        expect(
          await asAdmin(
            async (c) => (await c.query('SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])', [ended])).rowCount,
          ),
        ).toBe(0),
      { timeout: 20_000, interval: 50 },
    );
    await sleep(500);
    traffic = load(gw, 3);
    await vi.waitFor(() => expect(traffic.done()).toBeGreaterThan(10), { timeout: 20_000, interval: 50 });
    await traffic.stop();
    expect(traffic.failures).toEqual([]);
    const fresh = await asAdmin(
      async (c) =>
        (
          await c.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE usename = $1 AND application_name = 'arkvory-api' AND backend_start > $2`,
            [login, rotatedAfter],
          )
        ).rows[0]!.n,
    );
    expect(fresh).toBeGreaterThan(0);
    // The metrics token too: the next /metrics request needs the new one.
    await metricsToken.replace('metrics-token-two');
    gw.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(gw, /ARKVORY_METRICS_TOKEN rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 50,
    });
    expect((await request(`${gw.url}/metrics`, { headers: bearer('metrics-token-one') })).status).toBe(401);
    expect(await metric(gw, 'arkvory_secret_rotations_total', 'ARKVORY_METRICS_TOKEN', 'metrics-token-two')).toBe(1);
    expect(gw.logs()).not.toContain(next);
    expect(gw.logs()).not.toContain(password);
    expect(gw.logs()).not.toContain('not-the-password');
    expect(gw.logs()).not.toContain('metrics-token-');
  }, 120_000);
});

describe('the rules-service token rotates with a grace', () => {
  const GRACE_SECONDS = 6;
  const capRule = { name: 'rotated_cap', action: 'limit', characteristics: ['principal'], limit: 7, period_s: 3600 };

  it('the service accepts the previous token for the grace and no longer; the gateway sends the new one after its SIGHUP', async () => {
    const rules = split(urls.rules);
    const rulesPassword = await secretFile(rules.password);
    const serviceToken = await secretFile('query-token-one');
    const service = await startHarnessGateway({
      name: 'rules-service',
      env: {
        ARKVORY_ROLE: 'rules-service',
        ARKVORY_DATABASE_URL: rules.bare,
        ARKVORY_DATABASE_PASSWORD_FILE: rulesPassword.file,
        ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE: '1',
        ARKVORY_RULES_SERVICE_TOKEN_FILE: serviceToken.file,
        ARKVORY_RULES_SERVICE_TOKEN_GRACE_SECONDS: String(GRACE_SECONDS),
        ARKVORY_RULES_SERVICE_TTL_SECONDS: '1',
        ARKVORY_LOG_LEVEL: 'info',
      },
    });
    onTestFinished(() => service.stop('SIGTERM', STOP_GRACE_MS).then(() => {}));
    // The rules login does the service's work: an override written through its admin route.
    const put = await request(
      `${service.url}/api/v1/admin/rule-overrides/rotating/gateway_request/principal/${principalId}`,
      {
        method: 'PUT',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ rules: [capRule] })),
      },
    );
    expect(put.status, put.body.toString()).toBe(200);
    const query = async (token: string) =>
      (
        await request(`${service.url}/api/v1/rules/query`, {
          method: 'POST',
          headers: { ...bearer(token), 'content-type': 'application/json' },
          body: Buffer.from(
            JSON.stringify({
              service: 'rotating',
              limiter: 'gateway_request',
              identifier: { principal: principalId },
            }),
          ),
        })
      ).status;
    expect(await query('query-token-one')).toBe(200);
    expect(await query('query-token-two')).toBe(401);

    const { bare, password } = split(urls.writer);
    const gatewayToken = await secretFile('query-token-one');
    const gw = await startGateway({
      dataDir,
      env: {
        ARKVORY_DATABASE_URL: bare,
        ARKVORY_DATABASE_PASSWORD_FILE: (await secretFile(password)).file,
        ARKVORY_RULES_SERVICE_URL: service.url,
        ARKVORY_RULES_SERVICE_TOKEN_FILE: gatewayToken.file,
        ARKVORY_SERVICE_NAME: 'rotating',
        ARKVORY_RULES_SERVICE_TIMEOUT_MS: '2000',
      },
    });
    /** A request whose rate limit comes from the service: its policy header shows the service answered. */
    const throughGateway = async () => {
      const res = await request(`${gw.url}/api/v1/repositories`, { headers: bearer(key) });
      expect(res.status).toBe(200);
      return res.headers['ratelimit-policy'];
    };
    expect(await throughGateway()).toBe('"rotated_cap";q=7;w=3600');

    // The service rotates first: both tokens pass during the grace.
    await serviceToken.replace('query-token-two');
    const signalledMs = performance.now();
    service.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(service, /query token rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 20,
    });
    const seenMs = performance.now();
    expect(await query('query-token-one')).toBe(200);
    expect(await query('query-token-two')).toBe(200);
    // The rotation happened after the signal, so the old token was still within its grace just now.
    expect(performance.now() - signalledMs).toBeLessThan(GRACE_SECONDS * 1000);

    // Then the gateway: its next query carries the new token.
    await gatewayToken.replace('query-token-two');
    gw.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(gw, /ARKVORY_RULES_SERVICE_TOKEN rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 20,
    });

    // Past the grace (counted from when the rotation was seen, so surely past it): the old token is refused.
    await sleep(Math.max(0, seenMs + GRACE_SECONDS * 1000 + 200 - performance.now()));
    expect(await query('query-token-one')).toBe(401);
    expect(await query('query-token-two')).toBe(200);
    await sleep(1100); // the gateway's cached answer (ttl 1 s) expires: the next request asks the service
    expect(await throughGateway()).toBe('"rotated_cap";q=7;w=3600');
    const text = (await request(`${gw.url}/metrics`)).body.toString();
    // Every lookup was answered (hit: cached, miss: fetched); none fell back to local rules.
    const lookups = (result: string) =>
      text
        .split('\n')
        .filter(
          (l) => l.startsWith('arkvory_rate_limit_rules_service_requests_total{') && l.includes(`result="${result}"`),
        )
        .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
    expect(lookups('miss')).toBeGreaterThanOrEqual(2);
    for (const fallback of ['error', 'timeout', 'invalid', 'circuit_open']) expect(lookups(fallback), fallback).toBe(0);
    for (const p of [service, gw]) {
      expect(p.logs()).not.toContain('query-token-');
      expect(p.logs()).not.toContain(rules.password);
    }
  }, 120_000);
});

describe('the router as its own login', () => {
  it('discovers the gateways with the reader login; its next discovery connection uses a rotated password', async () => {
    const port = await freeLoopbackPort();
    const writer = await startGateway({
      dataDir,
      env: {
        ARKVORY_PORT: String(port),
        ARKVORY_ADVERTISE_URL: `http://127.0.0.1:${port}`,
        ARKVORY_DATABASE_URL: urls.writer,
        ARKVORY_REDIS_URL: inject('redisUrl'),
        ARKVORY_GATEWAY_SLOTS: '2',
        ARKVORY_GATEWAY_SLOT: '0',
        ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(1024 * 1024 * 1024),
        ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE: '1',
      },
    });
    const reader = split(urls.reader);
    const password = await secretFile(reader.password);
    const router = await startGateway({
      env: {
        ARKVORY_ROLE: 'router',
        ARKVORY_DATABASE_URL: reader.bare,
        ARKVORY_DATABASE_PASSWORD_FILE: password.file,
        ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '200',
      },
    });
    const body = randomContent(2000);
    const put = await request(`${router.url}/api/v1/repositories/rot/artifacts/routed.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body,
    });
    expect(put.status, put.body.toString()).toBe(201);
    const read = async () =>
      (await request(`${router.url}/api/v1/repositories/rot/artifacts/routed.bin/content`, { headers: bearer(key) }))
        .body;
    expect(await read()).toEqual(body);

    const next = randomBytes(12).toString('hex');
    await asAdmin((c) => c.query(`ALTER ROLE ${reader.login} PASSWORD '${next}'`));
    urls.reader = urlAs(urls.reader, reader.login, next);
    const rotatedAfter = await asAdmin(
      async (c) => (await c.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]!.t,
    );
    await password.replace(next);
    router.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(router, /ARKVORY_DATABASE_PASSWORD rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 50,
    });
    // The discovery connection logged in with the old password; once it ends, the next discovery
    // round needs a new one, which only the new password opens.
    const discoverySessions = async (after?: Date) =>
      asAdmin(
        async (c) =>
          (
            await c.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM pg_stat_activity
                WHERE usename = $1 AND application_name = 'arkvory-router' AND ($2::timestamptz IS NULL OR backend_start > $2)`,
              [reader.login, after ?? null],
            )
          ).rows[0]!.n,
      );
    await asAdmin((c) =>
      c.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1 AND application_name = 'arkvory-router'`,
        [reader.login],
      ),
    );
    await vi.waitFor(async () => expect(await discoverySessions(rotatedAfter)).toBe(1), {
      timeout: 20_000,
      interval: 100,
    });
    expect(await read()).toEqual(body);
    // Ending it is logged (the pool's idle-client warning); no discovery round failed.
    expect(logged(router, /discovery failed/)).toEqual([]);
    expect(router.logs()).not.toContain(next);
    await router.stop('SIGTERM');
    await writer.stop('SIGTERM');
  }, 120_000);
});

describe('the Redis password rotates on SIGHUP', () => {
  // A rule counted in Redis: /health/live, 6 per client address an hour.
  const LIMIT = 6;
  const RULES = `rate_limits:
  gateway_request:
    - name: live_by_ip
      description: "counted in Redis; its 429 shows the counters work"
      action: limit
      characteristics: [ip]
      limit: ${LIMIT}
      period_s: 3600
      match:
        route: /health/live
`;

  it('a refused password is kept out; the new one is used by the reconnection after the old is removed and the connections killed', async () => {
    // Its own redis-server with an ACL user (and no usable `default`), so passwords can change.
    const server = await startRedisServer();
    onTestFinished(() => server.stop('SIGTERM').then(() => undefined));
    const setup = new Redis(server.url);
    await setup.call('ACL', 'SETUSER', 'root', 'on', '>root-pw', '~*', '&*', '+@all');
    await setup.call('ACL', 'SETUSER', 'gw', 'on', '>redis-old', '~*', '&*', '+@all');
    await setup.call('ACL', 'SETUSER', 'default', 'off');
    setup.disconnect();
    const admin = new Redis({ port: server.port, host: '127.0.0.1', username: 'root', password: 'root-pw' });
    onTestFinished(() => void admin.disconnect());

    const rulesDir = await makeTempDir('arkvory-rules-');
    const rulesFile = path.join(rulesDir, 'rate_limits.yaml');
    await writeFile(rulesFile, RULES);
    const password = await secretFile('redis-old');
    const prefix = `arkvory:rot:${randomBytes(4).toString('hex')}:`;
    // A database of its own: the tests above leave a shared download policy in theirs.
    const own = await createTestDatabase();
    onTestFinished(() => own.drop());
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: own.url,
        ARKVORY_REDIS_URL: `redis://gw@127.0.0.1:${server.port}`,
        ARKVORY_REDIS_PASSWORD_FILE: password.file,
        ARKVORY_REDIS_KEY_PREFIX: prefix,
        ARKVORY_RATE_LIMITS_FILE: rulesFile,
        ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '5000',
      },
    });
    const live = async () => (await request(`${gw.url}/health/live`)).status;
    const counted = async () => {
      const keys = await admin.keys(`${prefix}rl:gateway_request:*`);
      return keys.length === 1 ? Number(await admin.get(keys[0]!)) : keys.length === 0 ? 0 : Number.NaN;
    };
    expect(await live()).toBe(200);
    expect(await live()).toBe(200);
    expect(await counted()).toBe(2);

    // A password Redis does not know is refused: the old one stays, a warning, the failure metric.
    await password.replace('not-the-redis-password');
    gw.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(gw, /ARKVORY_REDIS_PASSWORD not rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 50,
    });
    const refusal = logged(gw, /ARKVORY_REDIS_PASSWORD not rotated/)[0]!;
    expect(refusal.code).toBe('secret_rotation_failed');
    expect(String(refusal.msg)).toMatch(/Redis refused the new value: WRONGPASS/);
    expect(await metric(gw, 'arkvory_secret_rotation_failures_total', 'ARKVORY_REDIS_PASSWORD')).toBe(1);
    expect(await metric(gw, 'arkvory_secret_rotations_total', 'ARKVORY_REDIS_PASSWORD')).toBe(0);

    // The rotation: a second password on the user, the file, SIGHUP; then the old one goes.
    await admin.call('ACL', 'SETUSER', 'gw', '>redis-new');
    await password.replace('redis-new');
    gw.signal('SIGHUP');
    await vi.waitFor(() => expect(logged(gw, /ARKVORY_REDIS_PASSWORD rotated/)).toHaveLength(1), {
      timeout: 20_000,
      interval: 50,
    });
    expect(await metric(gw, 'arkvory_secret_rotations_total', 'ARKVORY_REDIS_PASSWORD')).toBe(1);
    await admin.call('ACL', 'SETUSER', 'gw', '<redis-old');
    // Open connections stay authenticated: still counted before any reconnection.
    expect(await live()).toBe(200);
    expect(await counted()).toBe(3);

    // Every connection of the user ends; the client's reconnection can only log in with the new password.
    expect(Number(await admin.call('CLIENT', 'KILL', 'USER', 'gw'))).toBeGreaterThan(0);
    await vi.waitFor(
      async () => expect(String(await admin.call('CLIENT', 'LIST'))).toMatch(/name=arkvory-rate-limit .*user=gw /),
      { timeout: 20_000, interval: 100 },
    );
    // The reconnection shows in CLIENT LIST before ioredis has finished its ready check; a request
    // checked meanwhile fails open, uncounted. Once one is counted, the client is back.
    await vi.waitFor(
      async () => {
        expect(await live()).toBe(200);
        expect(await counted()).toBe(4);
      },
      { timeout: 20_000, interval: 100 },
    );
    // Counted in Redis again (not failing open): the rule's limit is reached and then refused.
    for (let i = 5; i <= LIMIT; i++) expect(await live()).toBe(200);
    expect(await counted()).toBe(LIMIT);
    expect(await live()).toBe(429);
    expect(logged(gw, /rate-limit Redis connection error/)).toEqual([]);
    expect(gw.logs()).not.toContain('redis-new');
    expect(gw.logs()).not.toContain('redis-old');
    expect(gw.logs()).not.toContain('not-the-redis-password');
    expect(await gw.stop()).toBe(0);
  }, 120_000);
});
