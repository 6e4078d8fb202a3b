import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { Authenticator } from '../../policy/auth/authenticator.ts';
import { systemClock } from '../../policy/clock.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { runCli, startGateway } from '../../test/support/gateway.ts';
import { createAuthGate } from './auth-gate.ts';
import { createGatewayServer, type GatewayServer } from '../server/http-server.ts';
import type { Route } from '../server/route-types.ts';
import { sendJson } from '../server/http-errors.ts';
import { Lifecycle } from '../server/lifecycle.ts';
import { createLogger } from '../server/logger.ts';

const db = useTestDatabase();

/** Real HTTP server with the real auth gate and routes of every access level that echo the principal. */
describe('auth gate (in-process server, real PostgreSQL)', () => {
  let server: GatewayServer;
  let auth: Authenticator;
  let base: string;
  const echo: Route['handle'] = async (ctx) => sendJson(ctx.res, 200, { principal: ctx.principal?.id ?? null });
  beforeAll(async () => {
    const log = createLogger('silent');
    auth = new Authenticator({ pool: db.pool, databaseUrl: db.url, clock: systemClock, log });
    await auth.start();
    const lifecycle = new Lifecycle();
    lifecycle.set('serving');
    server = createGatewayServer({
      log,
      gates: [createAuthGate(auth, lifecycle)],
      routes: [
        { methods: ['GET'], template: '/t/public', access: 'public', handle: echo },
        { methods: ['GET'], template: '/t/service', access: 'service', handle: echo },
        { methods: ['GET'], template: '/t/admin', access: 'admin', handle: echo },
        { methods: ['GET'], template: '/t/repos/:repo', access: 'read', handle: echo },
        { methods: ['PUT'], template: '/t/repos/:repo', access: 'write', audit: null, handle: echo },
      ],
    });
    const addr = await server.listen(0, '127.0.0.1');
    base = `http://127.0.0.1:${addr.port}`;
    await createRepository(db.pool, 'libs');
    await createRepository(db.pool, 'secret');
  });
  afterAll(async () => {
    await server?.close(1000);
    await auth?.stop();
  });

  async function call(
    method: string,
    path: string,
    key?: string,
  ): Promise<{ status: number; body: Record<string, unknown>; headers: Headers }> {
    const res = await fetch(`${base}${path}`, { method, headers: key ? bearer(key) : {} });
    return { status: res.status, body: (await res.json()) as Record<string, unknown>, headers: res.headers };
  }

  it('answers every kind of bad key with the same 401 and WWW-Authenticate', async () => {
    const store = new AdminStore(db.pool);
    const revoked = await createServiceAccount(db.pool);
    await store.revokeKey(revoked.keyId);
    const expired = await createServiceAccount(db.pool, { expiresInSeconds: 1 });
    await db.pool.query(`UPDATE arkvory_api_keys SET expires_at = now() - interval '1 second' WHERE key_id = $1`, [
      expired.keyId,
    ]);
    const valid = await createServiceAccount(db.pool);
    const disabled = await createServiceAccount(db.pool);
    await store.setPrincipalDisabled(disabled.principalId, true);
    const wrongSecret = `ark_${valid.keyId}_${'A'.repeat(43)}`;
    const unknown = `ark_${'z'.repeat(16)}_${'B'.repeat(43)}`;
    const bodies = new Set<string>();
    for (const key of [undefined, 'not-a-key', unknown, wrongSecret, revoked.key, expired.key, disabled.key]) {
      const r = await call('GET', '/t/service', key);
      expect(r.status, String(key)).toBe(401);
      expect(r.headers.get('www-authenticate')).toBe('Bearer realm="arkvory", Basic realm="arkvory"');
      bodies.add(JSON.stringify(r.body));
    }
    expect([...bodies]).toEqual([JSON.stringify({ code: 'unauthorized', message: 'A valid API key is required.' })]);
    expect((await call('GET', '/t/service', valid.key)).status).toBe(200);
    expect((await call('GET', '/t/public')).status).toBe(200);
  });

  it('hides repositories without a grant (404) and refuses writes without the grant or scope (403)', async () => {
    const reader = await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { libs: 'read' } });
    const writer = await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { libs: 'write' } });
    const writerReadScope = await createServiceAccount(db.pool, { scopes: ['read'], grants: { libs: 'write' } });
    expect((await call('GET', '/t/repos/libs', reader.key)).status).toBe(200);
    expect((await call('GET', '/t/repos/secret', reader.key)).body.code).toBe('not_found');
    expect((await call('GET', '/t/repos/nope', reader.key)).status).toBe(404);
    expect((await call('PUT', '/t/repos/secret', reader.key)).status).toBe(404);
    const forbidden = await call('PUT', '/t/repos/libs', reader.key);
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.code).toBe('forbidden');
    expect((await call('PUT', '/t/repos/libs', writer.key)).status).toBe(200);
    expect((await call('PUT', '/t/repos/libs', writerReadScope.key)).status).toBe(403);
    expect((await call('GET', '/t/repos/libs', writerReadScope.key)).status).toBe(200);
  });

  it('requires the admin scope on admin routes', async () => {
    const plain = await createServiceAccount(db.pool, { scopes: ['read', 'write'] });
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    expect((await call('GET', '/t/admin', plain.key)).status).toBe(403);
    expect((await call('GET', '/t/admin', admin.key)).status).toBe(200);
  });

  it('resolves two keys of one principal to the same principal id; rotation keeps the old key until revoked', async () => {
    const store = new AdminStore(db.pool);
    const sa = await createServiceAccount(db.pool);
    const second = await store.createKey(sa.principalId, { scopes: ['read'] });
    expect((await call('GET', '/t/service', sa.key)).body.principal).toBe(sa.principalId);
    expect((await call('GET', '/t/service', second.key)).body.principal).toBe(sa.principalId);
    const rotated = await store.rotateKey(sa.keyId);
    expect(rotated.key).not.toBe(sa.key);
    expect(rotated.scopes).toEqual(['read', 'write']);
    expect((await call('GET', '/t/service', rotated.key)).body.principal).toBe(sa.principalId);
    expect((await call('GET', '/t/service', sa.key)).status).toBe(200);
    await store.revokeKey(sa.keyId);
    await expectWithin(2000, async () => (await call('GET', '/t/service', sa.key)).status === 401);
    expect((await call('GET', '/t/service', rotated.key)).status).toBe(200);
  });

  it('records last use, throttled to one write per key per interval', async () => {
    const sa = await createServiceAccount(db.pool);
    for (let i = 0; i < 20; i++) expect((await call('GET', '/t/service', sa.key)).status).toBe(200);
    await expectWithin(2000, async () => {
      const r = await db.pool.query('SELECT last_used_at FROM arkvory_api_keys WHERE key_id = $1', [sa.keyId]);
      return r.rows[0].last_used_at !== null;
    });
    const first = (await db.pool.query('SELECT last_used_at FROM arkvory_api_keys WHERE key_id = $1', [sa.keyId]))
      .rows[0].last_used_at as Date;
    await sleep(20);
    for (let i = 0; i < 5; i++) await call('GET', '/t/service', sa.key);
    await sleep(200);
    const after = (await db.pool.query('SELECT last_used_at FROM arkvory_api_keys WHERE key_id = $1', [sa.keyId]))
      .rows[0].last_used_at as Date;
    expect(after.getTime()).toBe(first.getTime());
  });
});

/** Checks at once, then every 25 ms until `ms` have passed; the time it took, or throws. */
async function expectWithin(ms: number, check: () => Promise<boolean>): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (await check()) return Date.now() - start;
    if (Date.now() - start >= ms) throw new Error(`condition not met within ${ms} ms`);
    await sleep(25);
  }
}

describe('auth across real gateway processes', () => {
  it('sees a revocation made through one gateway on a second gateway within 2 s', async () => {
    // One writer per database: the second gateway is a reader of the shared profile, on a database
    // of its own (the stored shared policy would refuse this file's standalone gateways).
    const own = await createTestDatabase();
    onTestFinished(() => own.drop());
    const admin = await createServiceAccount(own.pool, { scopes: ['admin'] });
    const victim = await createServiceAccount(own.pool, { scopes: ['read'] });
    const shared = {
      ARKVORY_DATABASE_URL: own.url,
      ARKVORY_REDIS_URL: inject('redisUrl'),
      ARKVORY_GATEWAY_SLOTS: '2',
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(64 * 1024 * 1024),
    };
    const a = await startGateway({ env: { ...shared, ARKVORY_GATEWAY_SLOT: '0' } });
    const b = await startGateway({
      env: { ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1' },
      dataDir: a.dataDir,
    });
    const ready = (gw: { url: string }, key: string) =>
      fetch(`${gw.url}/health/ready`, { headers: bearer(key) }).then((r) => r.status);
    expect(await ready(a, victim.key)).toBe(200);
    expect(await ready(b, victim.key)).toBe(200);
    const revoke = await fetch(`${a.url}/api/v1/admin/keys/${victim.keyId}/revoke`, {
      method: 'POST',
      headers: bearer(admin.key),
    });
    expect(revoke.status).toBe(200);
    const revokedAt = Date.now();
    const took = await expectWithin(2000, async () => (await ready(b, victim.key)) === 401);
    expect(took).toBeLessThan(2000);
    // The gateway that made the revocation learns of it as the other does (its notification): both
    // within the same 2 s of the revocation, in whichever order a loaded machine delivers them.
    await expectWithin(2000 - (Date.now() - revokedAt), async () => (await ready(a, victim.key)) === 401);
    // No log line of either gateway carries a secret.
    for (const gw of [a, b]) {
      const logs = gw.logs();
      for (const key of [admin.key, victim.key]) expect(logs).not.toContain(key.slice(21));
    }
    await Promise.all([a.stop('SIGKILL'), b.stop('SIGKILL')]);
  });

  it('answers 1,000 random and hostile Authorization values with 401, then bans the address (429), and stays healthy', async () => {
    const valid = await createServiceAccount(db.pool);
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const values = hostileValues(valid.key, 1000);
    let index = 0;
    const statuses = new Map<number, number>();
    const worker = async () => {
      while (index < values.length) {
        const value = values[index++]!;
        const status = await rawGetStatus(gw.port, '/health/ready', value);
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    // The shipped auth_failure ban (20 failures a minute) stops the flood: the first failures are 401,
    // then 429. Values HTTP itself refuses (control bytes) are answered 401 by the parser, ban or not.
    expect([...statuses.keys()].sort()).toEqual([401, 429]);
    expect(statuses.get(401)).toBeGreaterThanOrEqual(21);
    expect(statuses.get(429)).toBeGreaterThan(0);
    expect(statuses.get(401)! + statuses.get(429)!).toBe(1000);
    expect((await fetch(`${gw.url}/health/status`)).status).toBe(200);
    // The address is banned, whatever key it shows now.
    expect((await fetch(`${gw.url}/health/ready`, { headers: bearer(valid.key) })).status).toBe(429);
    expect(gw.logs()).not.toContain(valid.key.slice(21));
  });

  it('manages principals, keys, repositories and grants through the CLI; a key is printed once and works', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    const created = await runCli(['principals', 'create', 'ci-bot'], env);
    expect(created.code, created.stderr).toBe(0);
    const principal = JSON.parse(created.stdout) as { id: string };
    expect((await runCli(['repos', 'create', 'cli-repo'], env)).code).toBe(0);
    expect((await runCli(['grants', 'add', 'ci-bot', 'cli-repo', 'read'], env)).code).toBe(0);
    const key = JSON.parse(
      (await runCli(['keys', 'create', 'ci-bot', '--scopes', 'read', '--expires-in', '1d'], env)).stdout,
    ) as { key: string; keyId: string; expiresAt: string };
    expect(key.key).toMatch(/^ark_/);
    expect(Date.parse(key.expiresAt) - Date.now()).toBeGreaterThan(86_000_000);
    const listed = (await runCli(['keys', 'list', 'ci-bot'], env)).stdout;
    expect(listed).toContain(key.keyId);
    expect(listed).not.toContain(key.key.slice(21));
    const grants = (
      JSON.parse((await runCli(['grants', 'list', 'ci-bot'], env)).stdout) as { grants: Array<{ repository: string }> }
    ).grants;
    expect(grants.map((g) => g.repository)).toEqual(['cli-repo']);
    const gw = await startGateway({ env });
    expect((await fetch(`${gw.url}/health/ready`, { headers: bearer(key.key) })).status).toBe(200);
    const rotated = JSON.parse((await runCli(['keys', 'rotate', key.keyId], env)).stdout) as {
      key: string;
      principalId: string;
    };
    expect(rotated.principalId).toBe(principal.id);
    expect((await runCli(['keys', 'revoke', key.keyId], env)).code).toBe(0);
    expect((await runCli(['principals', 'disable', 'ci-bot'], env)).code).toBe(0);
    const dup = await runCli(['principals', 'create', 'ci-bot'], env);
    expect(dup.code).toBe(1);
    expect(dup.stderr).toContain('conflict');
    const usage = await runCli(['grants', 'add', 'ci-bot'], env);
    expect(usage.code).toBe(2);
    for (const cmd of ['principals', 'keys', 'repos', 'grants']) {
      const help = await runCli([cmd, '--help'], env);
      expect(help.code).toBe(0);
      expect(help.stdout).toContain(`arkvory ${cmd}`);
    }
  }, 180_000);
});

describe('first start on the embedded default', () => {
  it('creates an admin principal, writes its key to admin.key (0600) and never logs the key', async () => {
    const gw = await startGateway({ env: {}, timeoutMs: 60_000 });
    const { readFile, stat } = await import('node:fs/promises');
    const file = `${gw.dataDir}/admin.key`;
    const key = (await readFile(file, 'utf8')).trim();
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(gw.logs()).toContain('admin.key');
    expect(gw.logs()).not.toContain(key.slice(21));
    const principals = await fetch(`${gw.url}/api/v1/admin/principals`, { headers: bearer(key) });
    expect(principals.status).toBe(200);
    expect(
      ((await principals.json()) as { principals: Array<{ name: string }> }).principals.map((p) => p.name),
    ).toEqual(['admin']);
    // The CLI reaches the running embedded database through the data dir.
    const cli = await runCli(['repos', 'create', 'from-cli'], { ARKVORY_DATA_DIR: gw.dataDir });
    expect(cli.code, cli.stderr).toBe(0);
    expect(await gw.stop('SIGINT')).toBe(0);
    // A second start keeps the same admin and does not rewrite the key.
    const again = await startGateway({ env: {}, dataDir: gw.dataDir, timeoutMs: 60_000 });
    expect((await readFile(file, 'utf8')).trim()).toBe(key);
    expect((await fetch(`${again.url}/health/ready`, { headers: bearer(key) })).status).toBe(200);
    expect(await again.stop('SIGINT')).toBe(0);
  });
});

/** Random and hostile Authorization values; each is sent raw so that invalid bytes reach the server. */
function hostileValues(validKey: string, count: number): Buffer[] {
  const fixed = [
    '',
    ' ',
    'Bearer',
    'Bearer ',
    `Bearer  ${validKey}x`,
    `Basic ${Buffer.from('a:b').toString('base64')}`,
    `Token ${validKey}`,
    validKey,
    `Bearer ${validKey.toUpperCase()}`,
    `Bearer ${validKey.slice(0, 40)}`,
    `Bearer ${'x'.repeat(8000)}`,
    `Bearer ${' '.repeat(500)}${validKey}x`,
    `Bearer ark__${'a'.repeat(43)}`,
    `Bearer ark_${'a'.repeat(16)}_${'a'.repeat(43)}`,
    `Bearer\t${validKey}`,
  ].map((s) => Buffer.from(s, 'latin1'));
  const out: Buffer[] = [...fixed];
  let seed = 12345;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  while (out.length < count) {
    const kind = rand(6);
    const len = rand(kind === 5 ? 6000 : 120) + 1;
    const bytes = Buffer.alloc(len);
    for (let i = 0; i < len; i++) {
      bytes[i] =
        kind === 0
          ? rand(256)
          : kind === 1
            ? 0x20 + rand(95)
            : kind === 2
              ? rand(4) === 0
                ? 0
                : 0x41 + rand(26)
              : kind === 3
                ? 0x80 + rand(128)
                : 0x20 + rand(95);
    }
    // CR/LF would end the header line and make a different request, not a different value.
    for (let i = 0; i < len; i++) if (bytes[i] === 0x0d || bytes[i] === 0x0a) bytes[i] = 0x20;
    const prefix = kind === 4 ? `Bearer ark_${validKey.slice(4, 20)}_` : rand(2) ? 'Bearer ' : '';
    out.push(Buffer.concat([Buffer.from(prefix, 'latin1'), bytes]));
  }
  return out;
}

function rawGetStatus(port: number, path: string, authorization: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(
        Buffer.concat([
          Buffer.from(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: `),
          authorization,
          Buffer.from('\r\n\r\n'),
        ]),
      );
    });
    let head = '';
    socket.on('data', (d: Buffer) => (head += d.toString('latin1')));
    socket.on('close', () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
      if (m) resolve(Number(m[1]));
      else reject(new Error(`no status line: ${JSON.stringify(head.slice(0, 100))}`));
    });
    socket.on('error', reject);
  });
}
