/**
 * The `auth_failure` ban counts guesses, not stale credentials: an address whose one client keeps
 * sending a revoked, expired or disabled key (with its right secret), or an expired pre-signed link
 * whose signature holds, is not banned, so the other clients behind it (a NAT, a proxy) keep working.
 * A wrong secret or a forged link still counts and bans. An expired link is not counted either while
 * PostgreSQL is out of reach (its signature cannot be told from a forged one then, and no expired
 * link is ever served). Real auth gate and PostgreSQL, in-process server, the shipped ban rule on
 * in-memory counters.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { Authenticator } from '../../policy/auth/authenticator.ts';
import { PresignedLinks, rotatePresignSecret } from '../../policy/auth/presigned-links.ts';
import { ManualClock, systemClock } from '../../policy/clock.ts';
import { createLimiter, createMemoryCounterStore, type Limiter } from '../../policy/rate-limit/index.ts';
import { defineRule } from '../../policy/rate-limit/rules.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { openPool, waitUntil } from '../../test/harness/index.ts';
import { startCountingLink } from '../../test/support/counting-link.ts';
import { sendJson } from '../server/http-errors.ts';
import { createGatewayServer, type GatewayServer } from '../server/http-server.ts';
import { Lifecycle } from '../server/lifecycle.ts';
import { createLogger } from '../server/logger.ts';
import { createAuthGate } from './auth-gate.ts';
import { guardAuthGate } from './rate-limit-gate.ts';

const db = useTestDatabase();

/** The shipped rule (docs/rate-limits.md): 20 failures in 60 s ban the address for 900 s. */
const BAN = defineRule({
  name: 'ban_ip_after_auth_failures',
  action: 'limit',
  characteristics: ['ip'],
  limit: 20,
  periodS: 60,
  banForS: 900,
});

const CONTENT = '/t/repos/libs/content';

describe('auth_failure bans and stale credentials (in-process server, real PostgreSQL)', () => {
  let server: GatewayServer;
  let auth: Authenticator;
  let limiter: Limiter;
  let base: string;
  /** The links' clock: moved past a link's expiry by hand; keys and the ban run on the system clock. */
  const linkClock = new ManualClock(Date.now(), 0);
  let links: PresignedLinks;

  beforeAll(async () => {
    const log = createLogger('silent');
    auth = new Authenticator({ pool: db.pool, databaseUrl: db.url, clock: systemClock, log });
    await auth.start();
    links = new PresignedLinks({ pool: db.pool, auth, clock: linkClock, maxLifetimeSeconds: 604800 });
    limiter = createLimiter(
      { store: createMemoryCounterStore(), clock: systemClock, log: pino({ level: 'silent' }) },
      { name: 'auth_failure', rules: [BAN] },
    );
    const lifecycle = new Lifecycle();
    lifecycle.set('serving');
    server = createGatewayServer({
      log,
      gates: [guardAuthGate(createAuthGate(auth, lifecycle, undefined, links), limiter, systemClock)],
      routes: [
        {
          methods: ['GET', 'HEAD'],
          template: '/t/repos/:repo/content',
          access: 'read',
          handle: async (ctx) => sendJson(ctx.res, 200, { principal: ctx.principal?.id ?? null }),
        },
      ],
    });
    base = `http://127.0.0.1:${(await server.listen(0, '127.0.0.1')).port}`;
    await createRepository(db.pool, 'libs');
  });
  afterAll(async () => {
    await server?.close(1000);
    await auth?.stop();
  });
  beforeEach(async () => {
    await limiter.clear({ ip: '127.0.0.1' });
  });

  const get = async (pathAndQuery: string, key?: string) =>
    (await fetch(`${base}${pathAndQuery}`, { headers: key ? bearer(key) : {} })).status;

  it('does not ban an address for a revoked, expired or disabled key sent with its secret; a wrong secret bans it', async () => {
    const store = new AdminStore(db.pool);
    const revoked = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    await store.revokeKey(revoked.keyId);
    const expired = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    await db.pool.query(`UPDATE arkvory_api_keys SET expires_at = now() - interval '1 second' WHERE key_id = $1`, [
      expired.keyId,
    ]);
    const disabled = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    await store.setPrincipalDisabled(disabled.principalId, true);
    const neighbour = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    // A build job still configured with old keys, retrying well past the rule's 20 a minute.
    for (let i = 0; i < 10; i++)
      for (const stale of [revoked, expired, disabled]) expect(await get(CONTENT, stale.key)).toBe(401);
    expect(await get(CONTENT, neighbour.key)).toBe(200);

    // A guessed secret counts: the rule bans on the 21st failure in a minute.
    const guess = `ark_${neighbour.keyId}_${'A'.repeat(43)}`;
    for (let i = 0; i < 21; i++) expect(await get(CONTENT, guess)).toBe(401);
    expect(await get(CONTENT, neighbour.key)).toBe(429);
  });

  it('does not ban an address for an expired link whose signature holds; a forged signature bans it', async () => {
    const { principal, neighbour } = await linkOwnerAndNeighbour();
    const link = await links.issue(principal, CONTENT, 'ab'.repeat(32), 60, 'libs');
    expect(await get(link.pathAndQuery)).toBe(200);
    linkClock.advance(link.expiresAt.getTime() - linkClock.wallMs());
    // A cache or a download manager refetching a link that has just expired.
    for (let i = 0; i < 25; i++) expect(await get(link.pathAndQuery)).toBe(401);
    expect(await get(CONTENT, neighbour.key)).toBe(200);

    const forged = link.pathAndQuery.replace(/X-Arkvory-Signature=[^&]+/, `X-Arkvory-Signature=${'A'.repeat(43)}`);
    for (let i = 0; i < 21; i++) expect(await get(forged)).toBe(401);
    expect(await get(CONTENT, neighbour.key)).toBe(429);
  });

  it('does not ban an address for a link whose secret was rotated out', async () => {
    const { principal, neighbour } = await linkOwnerAndNeighbour();
    const link = await links.issue(principal, CONTENT, 'ab'.repeat(32), 3600, 'libs');
    expect(await get(link.pathAndQuery)).toBe(200);
    // After a leak: the old secret retires at once, and its links die.
    await rotatePresignSecret(db.pool, 0);
    await waitUntil(async () => (await get(link.pathAndQuery)) === 401, { what: 'the rotation to reach the gateway' });
    // Mirrors and download managers still holding links of the old secret.
    for (let i = 0; i < 25; i++) expect(await get(link.pathAndQuery)).toBe(401);
    expect(await get(CONTENT, neighbour.key)).toBe(200);
  });

  it('does not ban an address for expired links while PostgreSQL is out of reach', async () => {
    const { principal, neighbour } = await linkOwnerAndNeighbour();
    // A second gateway server whose database connections pass a relay that the test cuts; it
    // shares the ban counters (and the address) with the first, which keeps its database.
    const dbUrl = new URL(db.url);
    const relay = await startCountingLink({ host: dbUrl.hostname, port: Number(dbUrl.port) });
    const cutUrl = new URL(db.url);
    cutUrl.hostname = relay.host;
    cutUrl.port = String(relay.port);
    const pool = openPool(cutUrl.href, 2);
    const clock = new ManualClock(Date.now(), 0);
    const log = createLogger('silent');
    // No timer poll: the cache stops being trusted when the injected clock says so.
    const cutAuth = new Authenticator({ pool, databaseUrl: cutUrl.href, clock, log, pollIntervalMs: 3_600_000 });
    await cutAuth.start();
    const cutLinks = new PresignedLinks({ pool, auth: cutAuth, clock, maxLifetimeSeconds: 604800 });
    const lifecycle = new Lifecycle();
    lifecycle.set('serving');
    const cutServer = createGatewayServer({
      log,
      gates: [guardAuthGate(createAuthGate(cutAuth, lifecycle, undefined, cutLinks), limiter, systemClock)],
      routes: [
        {
          methods: ['GET', 'HEAD'],
          template: '/t/repos/:repo/content',
          access: 'read',
          handle: async (ctx) => sendJson(ctx.res, 200, { principal: ctx.principal?.id ?? null }),
        },
      ],
    });
    const cutBase = `http://127.0.0.1:${(await cutServer.listen(0, '127.0.0.1')).port}`;
    try {
      const link = await cutLinks.issue(principal, CONTENT, 'ab'.repeat(32), 60, 'libs');
      const viaCut = async () => (await fetch(`${cutBase}${link.pathAndQuery}`)).status;
      expect(await viaCut()).toBe(200);
      // PostgreSQL out of reach, the cache no longer trusted, the link past its expiry: a download
      // manager behind a NAT keeps refetching it.
      await relay.stop();
      clock.advance(link.expiresAt.getTime() - clock.wallMs() + 2000);
      expect(cutAuth.isCacheTrusted).toBe(false);
      for (let i = 0; i < 25; i++) expect(await viaCut()).toBe(401);
      // Another client behind the same address is not locked out.
      expect(await get(CONTENT, neighbour.key)).toBe(200);
    } finally {
      await cutServer.close(1000);
      await cutAuth.stop();
      await pool.end();
    }
  });
});

/** A reader whose links the tests issue, and another reader behind the same address. */
async function linkOwnerAndNeighbour() {
  const owner = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
  const neighbour = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
  const principal = {
    id: owner.principalId,
    keyId: owner.keyId,
    name: owner.name,
    scopes: new Set(['read'] as const),
  };
  return { principal, neighbour };
}
