/**
 * Bans and headers behind a router (issue #35), with real gateway and router processes on loopback
 * and clients bound to their own loopback addresses (127.0.0.2, 127.0.0.3, …; Linux routes all of
 * 127/8): one client's failed keys through the router never lock out another, with the router
 * listed in ARKVORY_TRUSTED_PROXIES, with the default (no proxy trusted, loopback included), and
 * behind a trusted proxy that sends `Forwarded` alone (to the gateway, or to a router in front of it); a direct client naming a new
 * X-Forwarded-For with each bad key is banned all the same, and a local client cannot get another
 * address banned by naming it; IPv6 clients are banned by prefix and by canonical address; the ban lines a peer forging X-Forwarded-For can mint are bounded; two
 * Authorization headers are refused by gateway and router alike; every answer carries
 * `X-Content-Type-Options: nosniff`.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { roomInWindow, waitUntil } from '../../test/harness/index.ts';
import { FORWARDER_SHARE } from '../gates/ban-identity.ts';
import { BAN_LINES } from '../gates/rate-limit-gate.ts';

const db = useTestDatabase();
const ADMIN_PATH = '/api/v1/admin/rate-limits';

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One request from `localAddress` (a loopback address of its own), no agent, nothing rewritten. */
function from(localAddress: string, url: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { localAddress, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const BANNED = 'address banned after failed authentications';

/**
 * The addresses of the gateway's ban lines, once `count` of them are read: a line written before its
 * answer can still be read after it (stdout and the socket are two pipes, read in whichever order
 * the test's event loop gets to them; on a loaded machine, after the test's next request).
 */
async function banLines(gateway: GatewayProcess, count: number): Promise<unknown[]> {
  const lines = () => gateway.logLines().filter((l) => l.msg === BANNED);
  await waitUntil(() => lines().length >= count, { what: `${count} ban line(s)`, timeoutMs: 10_000 });
  return lines().map((l) => l.ip);
}

/** A request head written by hand (duplicate headers survive), and the raw answer up to close. */
function raw(url: string, head: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.write(head));
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (text += d));
    socket.on('close', () => resolve(text));
    socket.on('error', reject);
  });
}

async function startRouter(writer: GatewayProcess, env: Record<string, string> = {}): Promise<GatewayProcess> {
  return startGateway({ env: { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: writer.url, ...env } });
}

const badKey = (keyId: string) => `ark_${keyId}_${'A'.repeat(43)}`;

/** The shipped ban counts failures per wall-clock minute: a run of them must not straddle two. */
const oneMinute = () => roomInWindow(60_000, 10_000);

describe('no lockout through the router', () => {
  it('with the router listed: 25 bad keys from client A ban A only; client B still gets 200', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TRUSTED_PROXIES: '127.0.0.1' } });
    const router = await startRouter(writer);
    const get = (address: string, key: string) => from(address, `${router.url}${ADMIN_PATH}`, bearer(key));
    const statuses: number[] = [];
    await oneMinute();
    for (let i = 0; i < 25; i++) statuses.push((await get('127.0.0.2', badKey(admin.keyId))).status);
    // 20 failures are within the shipped limit; the 21st starts the ban.
    expect(statuses.slice(0, 21)).toEqual(new Array(21).fill(401));
    expect(statuses.slice(21)).toEqual([429, 429, 429, 429]);
    expect((await get('127.0.0.3', admin.key)).status).toBe(200);
    expect((await get('127.0.0.3', badKey(admin.keyId))).status).toBe(401);
    expect((await get('127.0.0.2', admin.key)).status).toBe(429);
    expect(await banLines(writer, 1)).toEqual(['127.0.0.2']);
    // The router is listed: nothing to warn about.
    expect(writer.logLines().filter((l) => l.code === 'untrusted_forwarder')).toEqual([]);
  });

  it('a gateway that does not trust the router (the default, even on one host) keys bans per router and client, warns once, and doctor reports it', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const env = { ARKVORY_DATABASE_URL: db.url };
    const writer = await startGateway({ env });
    const router = await startRouter(writer);
    const get = (address: string, key: string) => from(address, `${router.url}${ADMIN_PATH}`, bearer(key));
    await oneMinute();
    for (let i = 0; i < 21; i++) expect((await get('127.0.0.4', badKey(admin.keyId))).status).toBe(401);
    expect((await get('127.0.0.4', admin.key)).status).toBe(429);
    expect((await get('127.0.0.5', admin.key)).status).toBe(200);
    const warned = writer.logLines().filter((l) => l.code === 'untrusted_forwarder');
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 'warn', peer: '127.0.0.1' });
    expect(await banLines(writer, 1)).toEqual(['by=127.0.0.1;for=127.0.0.4']);

    const doctor = await runCli(['doctor'], { ...env, ARKVORY_DATA_DIR: writer.dataDir });
    expect(doctor.stdout).toMatch(
      /^FAIL proxies: 127\.0\.0\.1 sent X-Forwarded-For\/Forwarded .*not in ARKVORY_TRUSTED_PROXIES \(none\)/m,
    );
    // With the router listed, doctor has nothing to report.
    const trusted = await runCli(['doctor'], {
      ...env,
      ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
      ARKVORY_DATA_DIR: writer.dataDir,
    });
    expect(trusted.stdout).toMatch(/^ok {3}proxies: no untrusted peer/m);
  });
});

describe('a local client that is no configured proxy (the default trusts none, loopback included)', () => {
  it('cannot get the address it names in X-Forwarded-For or Forwarded banned: that address still gets 200', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const forged = (headers: Record<string, string>, key: string) =>
      from('127.0.0.1', `${writer.url}${ADMIN_PATH}`, { ...bearer(key), ...headers });
    await oneMinute();
    for (let i = 0; i < 21; i++)
      expect((await forged({ 'x-forwarded-for': '127.0.0.21' }, badKey(admin.keyId))).status).toBe(401);
    for (let i = 0; i < 21; i++)
      expect((await forged({ forwarded: 'for=127.0.0.22' }, badKey(admin.keyId))).status).toBe(401);
    // The victims, reaching the gateway themselves, are not banned.
    for (const victim of ['127.0.0.21', '127.0.0.22'])
      expect((await from(victim, `${writer.url}${ADMIN_PATH}`, bearer(admin.key))).status, victim).toBe(200);
    expect(await banLines(writer, 2)).toEqual(['by=127.0.0.1;for=127.0.0.21', 'by=127.0.0.1;for=127.0.0.22']);
  });
});

describe('a trusted proxy that names its clients with Forwarded alone (RFC 7239, no X-Forwarded-For)', () => {
  it("one client's failed keys ban that client, by address or /64, never the proxy or the proxy's other clients", async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TRUSTED_PROXIES: '127.0.0.2' } });
    const via = (forwarded: string | undefined, key: string) =>
      from('127.0.0.2', `${writer.url}${ADMIN_PATH}`, { ...bearer(key), ...(forwarded ? { forwarded } : {}) });
    await oneMinute();
    for (let i = 0; i < 21; i++)
      expect((await via('for=198.51.100.7;proto=http', badKey(admin.keyId))).status).toBe(401);
    expect((await via('for=198.51.100.7;proto=http', admin.key)).status).toBe(429);
    // A node the client wrote further left is not believed: the proxy's own node names the client.
    expect((await via('for=198.51.100.8, for=198.51.100.7', admin.key)).status).toBe(429);
    expect((await via('for=198.51.100.8;proto=http', admin.key)).status).toBe(200);
    expect((await via(undefined, admin.key)).status).toBe(200);
    await oneMinute();
    for (let i = 0; i < 21; i++)
      expect((await via('for="[2001:db8:5::1]:4711"', badKey(admin.keyId))).status).toBe(401);
    expect((await via('for="[2001:db8:5::2]:80"', admin.key)).status).toBe(429);
    expect((await via('for="[2001:db8:6::1]"', admin.key)).status).toBe(200);
    expect(await banLines(writer, 2)).toEqual(['198.51.100.7', '2001:db8:5::/64']);
    expect(writer.logLines().filter((l) => l.code === 'untrusted_forwarder')).toEqual([]);
  });
});

describe('a trusted proxy that sends Forwarded alone, in front of the router', () => {
  it("its client's failed keys ban that client at the gateway, not nobody: the router's X-Forwarded-For names the same hops", async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    // The front proxy at 127.0.0.2, the router on 127.0.0.1: both trusted by the gateway, the proxy by the router.
    const writer = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TRUSTED_PROXIES: '127.0.0.1,127.0.0.2' },
    });
    const router = await startRouter(writer, { ARKVORY_TRUSTED_PROXIES: '127.0.0.2' });
    const via = (client: string, key: string) =>
      from('127.0.0.2', `${router.url}${ADMIN_PATH}`, { ...bearer(key), forwarded: `for=${client};proto=http` });
    // 22 requests take well under a second: 3 s left in the ban's minute is room enough.
    await roomInWindow(60_000, 3_000);
    for (let i = 0; i < 21; i++) expect((await via('198.51.100.17', badKey(admin.keyId))).status).toBe(401);
    expect((await via('198.51.100.17', admin.key)).status).toBe(429);
    expect((await via('198.51.100.18', admin.key)).status).toBe(200);
    expect(await banLines(writer, 1)).toEqual(['198.51.100.17']);
  });
});

describe('a trusted TLS-terminating proxy that sends Forwarded alone, in front of the router', () => {
  it('its proto= reaches the gateway as X-Forwarded-Proto: a key sent over https is served, one over http refused', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_TRUSTED_PROXIES: '127.0.0.1,127.0.0.2',
        ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS: '1',
      },
    });
    const router = await startRouter(writer, { ARKVORY_TRUSTED_PROXIES: '127.0.0.2' });
    const via = (proto: string) =>
      from('127.0.0.2', `${router.url}${ADMIN_PATH}`, {
        ...bearer(admin.key),
        forwarded: `for=198.51.100.7, for=198.51.100.27;proto=${proto}`,
      });
    expect((await via('https')).status).toBe(200);
    const refused = await via('http');
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'tls_required' });
    // A proto the client wrote in an element of its own is not the proxy's.
    const planted = await from('127.0.0.2', `${router.url}${ADMIN_PATH}`, {
      ...bearer(admin.key),
      forwarded: 'for=198.51.100.7;proto=https, for=198.51.100.27',
    });
    expect(planted.status).toBe(403);
  });
});

describe('a client naming a new X-Forwarded-For with each bad key', () => {
  it('from an untrusted address: its claimed clients charge it, and it is banned after 160 failures, whatever it names', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const as = (client: string | undefined, key: string) =>
      from('127.0.0.9', `${writer.url}${ADMIN_PATH}`, {
        ...bearer(key),
        ...(client ? { 'x-forwarded-for': client } : {}),
      });
    const failures = 20 / FORWARDER_SHARE;
    const statuses: number[] = [];
    // Every failure of this run must fall in one window of the shipped rule.
    await roomInWindow(60_000, 30_000);
    for (let i = 0; i < failures + 4; i++)
      statuses.push((await as(`10.${(i >> 8) & 255}.${i & 255}.1`, badKey(admin.keyId))).status);
    // The failure past 160 starts the peer's ban; each claimed client failed once only.
    expect(statuses.slice(0, failures + 1)).toEqual(new Array(failures + 1).fill(401));
    expect(statuses.slice(failures + 1)).toEqual([429, 429, 429]);
    expect((await as('10.9.9.1', admin.key)).status).toBe(429);
    expect((await as(undefined, admin.key)).status).toBe(429);
    expect((await from('127.0.0.10', `${writer.url}${ADMIN_PATH}`, bearer(admin.key))).status).toBe(200);
    expect(await banLines(writer, 1)).toEqual(['127.0.0.9']);
  });

  it('through a trusted router: 9 clients failing 20 times each (180 failures) ban nobody, and the router keeps serving', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TRUSTED_PROXIES: '127.0.0.1' } });
    const router = await startRouter(writer);
    const get = (address: string, key: string) => from(address, `${router.url}${ADMIN_PATH}`, bearer(key));
    const clients = Array.from({ length: 9 }, (_, i) => `127.0.0.${i + 11}`);
    expect(clients.length * 20).toBeGreaterThan(20 / FORWARDER_SHARE);
    await roomInWindow(60_000, 30_000);
    for (const client of clients)
      for (let i = 0; i < 20; i++) expect((await get(client, badKey(admin.keyId))).status, client).toBe(401);
    for (const client of clients) expect((await get(client, admin.key)).status, client).toBe(200);
    expect((await get('127.0.0.20', admin.key)).status).toBe(200);
    expect(writer.logLines().filter((l) => l.msg === BANNED)).toEqual([]);
  });
});

describe('ban lines', () => {
  it('bans minted by an untrusted peer naming 7 clients: all enforced, at most 5 lines, and a real address still gets its own', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TRUSTED_PROXIES: 'none' } });
    const as = (client: string, key: string) =>
      from('127.0.0.1', `${writer.url}${ADMIN_PATH}`, { ...bearer(key), 'x-forwarded-for': client });
    // 7 × 21 failures: short of the 160 that would ban the peer itself (FORWARDER_SHARE).
    const claimed = Array.from({ length: 7 }, (_, i) => `198.51.100.${i + 1}`);
    await oneMinute();
    for (const client of claimed)
      for (let i = 0; i < 21; i++) expect((await as(client, badKey(admin.keyId))).status).toBe(401);
    // A client reached directly, banned after the peer's bans: its line is not the peer's to spend.
    for (let i = 0; i < 21; i++)
      expect((await from('127.0.0.6', `${writer.url}${ADMIN_PATH}`, bearer(badKey(admin.keyId)))).status).toBe(401);
    for (const client of claimed) expect((await as(client, admin.key)).status, client).toBe(429);
    expect((await from('127.0.0.6', `${writer.url}${ADMIN_PATH}`, bearer(admin.key))).status).toBe(429);
    expect((await from('127.0.0.7', `${writer.url}${ADMIN_PATH}`, bearer(admin.key))).status).toBe(200);
    // Once the line of a request sent after them is in, every ban line is too.
    await from('127.0.0.1', `${writer.url}/health/live`, { 'x-request-id': 'after-bans' });
    await expect
      .poll(() => writer.logLines().some((l) => l.clientReqId === 'after-bans'), { timeout: 5000 })
      .toBe(true);
    expect(await banLines(writer, BAN_LINES.linesPerInterval + 1)).toEqual([
      ...claimed.slice(0, BAN_LINES.linesPerInterval).map((client) => `by=127.0.0.1;for=${client}`),
      '127.0.0.6',
    ]);
  });
});

describe('IPv6 bans (through X-Forwarded-For from a trusted proxy: the test client on loopback)', () => {
  it('40 failures across one /64 ban the /64, spelled any way; another /64 and a mapped IPv4 spelling follow the same rule', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TRUSTED_PROXIES: '127.0.0.1' } });
    const as = (client: string, key: string) =>
      from('127.0.0.1', `${writer.url}${ADMIN_PATH}`, { ...bearer(key), 'x-forwarded-for': client });
    const statuses: number[] = [];
    // 40 addresses of 2001:db8:1:2::/64, one failure each: per exact address none would be banned.
    await oneMinute();
    for (let i = 1; i <= 40; i++)
      statuses.push((await as(`2001:db8:1:2::${i.toString(16)}`, badKey(admin.keyId))).status);
    expect(statuses.slice(0, 21).every((s) => s === 401)).toBe(true);
    expect(statuses.slice(21).every((s) => s === 429)).toBe(true);
    for (const spelling of [
      '2001:db8:1:2::ffff',
      '2001:0DB8:0001:0002:0000:0000:0000:0001',
      '[2001:db8:1:2:abcd::1]:443',
      '2001:DB8:1:2:0:0:0:9',
    ])
      expect((await as(spelling, admin.key)).status, spelling).toBe(429);
    expect((await as('2001:db8:1:3::1', admin.key)).status).toBe(200);
    expect(await banLines(writer, 1)).toEqual(['2001:db8:1:2::/64']);

    await oneMinute();
    for (let i = 0; i < 21; i++) await as('198.51.100.7', badKey(admin.keyId));
    expect((await as('::ffff:198.51.100.7', admin.key)).status).toBe(429);
    expect((await as('::FFFF:c633:6407', admin.key)).status).toBe(429);
    expect((await as('198.51.100.8', admin.key)).status).toBe(200);
  });

  it('ARKVORY_BAN_IPV6_PREFIX_LENGTH=128 keys bans by the exact address', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
        ARKVORY_BAN_IPV6_PREFIX_LENGTH: '128',
      },
    });
    const as = (client: string, key: string) =>
      from('127.0.0.1', `${writer.url}${ADMIN_PATH}`, { ...bearer(key), 'x-forwarded-for': client });
    for (let i = 1; i <= 40; i++) expect((await as(`2001:db8:7::${i}`, badKey(admin.keyId))).status).toBe(401);
    await oneMinute();
    for (let i = 0; i < 21; i++) await as('2001:db8:7::ff', badKey(admin.keyId));
    expect((await as('2001:db8:7:0:0:0:0:ff', admin.key)).status).toBe(429);
    expect((await as('2001:db8:7::fe', admin.key)).status).toBe(200);
  });
});

describe('two Authorization headers', () => {
  it('are refused with 400 duplicate_authorization by the gateway and by the router, which forwards nothing', async () => {
    const reader = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    await createRepository(db.pool, `dup${Date.now()}`);
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const router = await startRouter(writer);
    for (const target of [writer, router]) {
      const id = randomUUID();
      const answer = await raw(
        target.url,
        `GET ${ADMIN_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${reader.key}\r\nx-request-id: ${id}\r\nAuthorization: Bearer ${badKey(reader.keyId)}\r\nConnection: close\r\n\r\n`,
      );
      expect(answer, target === writer ? 'gateway' : 'router').toMatch(/^HTTP\/1\.1 400 /);
      expect(answer).toContain('"code":"duplicate_authorization"');
      expect(answer.toLowerCase()).toContain('x-content-type-options: nosniff');
      // Either spelling of the name counts; one header alone is fine.
      const mixed = await raw(
        target.url,
        `GET ${ADMIN_PATH} HTTP/1.1\r\nHost: x\r\nauthorization: Bearer ${reader.key}\r\nAUTHORIZATION: Bearer ${reader.key}\r\nConnection: close\r\n\r\n`,
      );
      expect(mixed).toMatch(/^HTTP\/1\.1 400 /);
      const single = await raw(
        target.url,
        `GET ${ADMIN_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${reader.key}\r\nConnection: close\r\n\r\n`,
      );
      expect(single).toMatch(/^HTTP\/1\.1 200 /);
      expect(answer.toLowerCase()).toContain(`x-request-id: ${id}`);
      if (target === router) {
        // Nothing forwarded: no gateway line carries the id the router gave the request.
        let fault: Record<string, unknown> | undefined;
        await expect
          .poll(() => (fault = router.logLines().find((l) => l.clientReqId === id)), { timeout: 5000 })
          .toMatchObject({ kind: 'duplicate_authorization' });
        expect(fault!.reqId).not.toBe(id);
        expect(writer.logLines().filter((l) => l.clientReqId === fault!.reqId || l.clientReqId === id)).toEqual([]);
      }
    }
  });
});

describe('X-Content-Type-Options: nosniff', () => {
  it('is on every answer: gateway JSON and errors, router health and errors, proxied answers, malformed heads', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const router = await startRouter(writer);
    for (const base of [writer.url, router.url]) {
      for (const [path, key] of [
        ['/health/live', undefined],
        ['/health/status', undefined],
        [ADMIN_PATH, admin.key],
        [ADMIN_PATH, undefined],
        ['/no/such/route', undefined],
        ['/api/v1/repositories/none/artifacts/x/content', admin.key],
      ] as const) {
        const res = await from('127.0.0.1', `${base}${path}`, key ? bearer(key) : {});
        expect(res.headers['x-content-type-options'], `${base}${path} → ${res.status}`).toBe('nosniff');
      }
      const malformed = await raw(base, 'GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n');
      expect(malformed).toMatch(/^HTTP\/1\.1 400 /);
      expect(malformed.toLowerCase()).toContain('x-content-type-options: nosniff');
    }
  });
});
