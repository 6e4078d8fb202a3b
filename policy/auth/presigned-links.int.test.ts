/**
 * PresignedLinks against a real PostgreSQL with an injected clock: a link verifies until its
 * expiry and not a millisecond after; a rotation with a grace period keeps old links until the
 * grace ends (by the clock), a rotation without one kills them at once; a tampered path, a key
 * revoked or expired after the link was made, or an unknown secret is the same 401.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../proxy/server/logger.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { ManualClock } from '../clock.ts';
import { AdminStore } from './admin-store.ts';
import { Authenticator } from './authenticator.ts';
import { PresignedLinks, rotatePresignSecret } from './presigned-links.ts';

const db = useTestDatabase();
const clock = new ManualClock(Date.now(), 0);
let auth: Authenticator;
let links: PresignedLinks;
const PATH = '/api/v1/repositories/libs/artifacts/a.bin/content';
const SHA = 'ab'.repeat(32);

beforeAll(async () => {
  auth = new Authenticator({ pool: db.pool, databaseUrl: db.url, clock, log: createLogger('silent') });
  await auth.start();
  links = new PresignedLinks({ pool: db.pool, auth, clock, maxLifetimeSeconds: 604800 });
  await createRepository(db.pool, 'libs');
});
afterAll(async () => {
  await auth?.stop();
});

async function principalOf(key: { principalId: string; keyId: string; name: string }) {
  return { id: key.principalId, keyId: key.keyId, name: key.name, scopes: new Set(['read'] as const) };
}

function verify(pathAndQuery: string) {
  const url = new URL(pathAndQuery, 'http://gw.invalid');
  return links.authenticate(url.pathname, url.searchParams).then((r) => r.principal);
}

describe('pre-signed links (injected clock, real PostgreSQL)', () => {
  it('verify until the expiry and not after it', async () => {
    const sa = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    const before = Date.now();
    const link = await links.issue(await principalOf(sa), PATH, SHA, 600, 'libs');
    // Dated by the database's clock (this host's), not by the injected one.
    expect(link.expiresAt.getTime()).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 600_000);
    expect(link.expiresAt.getTime()).toBeLessThanOrEqual(Date.now() + 600_000);
    expect((await verify(link.pathAndQuery)).id).toBe(sa.principalId);
    clock.advance(link.expiresAt.getTime() - clock.wallMs() - 1);
    expect((await verify(link.pathAndQuery)).keyId).toBe(sa.keyId);
    clock.advance(1);
    await expect(verify(link.pathAndQuery)).rejects.toMatchObject({ code: 'unauthorized' });
  });

  it('refuse a tampered path, an unknown secret, and a key revoked or expired after the link was made', async () => {
    const sa = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    // Longer than the lead the first test gave the injected clock over the database's.
    const link = await links.issue(await principalOf(sa), PATH, SHA, 3600, 'libs');
    expect((await verify(link.pathAndQuery)).id).toBe(sa.principalId);
    await expect(verify(link.pathAndQuery.replace('a.bin', 'b.bin'))).rejects.toMatchObject({ code: 'unauthorized' });
    await expect(
      verify(link.pathAndQuery.replace(/X-Arkvory-Secret=\d+/, 'X-Arkvory-Secret=999999')),
    ).rejects.toMatchObject({ code: 'unauthorized' });
    const expiring = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    // The key expires 60 s after now on this test's clock (which earlier tests moved ahead of the database's).
    await db.pool.query('UPDATE arkvory_api_keys SET expires_at = to_timestamp($1 / 1000.0) WHERE key_id = $2', [
      clock.wallMs() + 60_000,
      expiring.keyId,
    ]);
    const expiringLink = await links.issue(await principalOf(expiring), PATH, SHA, 3600, 'libs');
    expect((await verify(expiringLink.pathAndQuery)).id).toBe(expiring.principalId);
    clock.advance(61_000);
    await expect(verify(expiringLink.pathAndQuery)).rejects.toMatchObject({ code: 'unauthorized' });
    expect((await verify(link.pathAndQuery)).id).toBe(sa.principalId);
    await new AdminStore(db.pool).revokeKey(sa.keyId);
    // A revocation reaches the remembered key by the database's notification, not before the next
    // statement (a loaded machine delivers it later); its bound is tested over HTTP (auth.int.test.ts).
    await waitUntil(
      () =>
        verify(link.pathAndQuery).then(
          () => false,
          (err: { code?: string }) => err.code === 'unauthorized',
        ),
      { what: 'the link of a revoked key to be refused', timeoutMs: 10_000 },
    );
  });

  it('survive a rotation until its grace period ends, and die at once without one', async () => {
    const sa = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
    const principal = await principalOf(sa);
    const old = await links.issue(principal, PATH, SHA, 3600, 'libs');
    const rotated = await rotatePresignSecret(db.pool, 120);
    const fresh = await links.issue(principal, PATH, SHA, 3600, 'libs');
    expect(fresh.pathAndQuery).toContain(`X-Arkvory-Secret=${rotated.secretId}&`);
    // The gateway clock is this test's; the grace end is the database's now() + 120 s.
    clock.advance(Date.parse(rotated.oldLinksValidUntil) - clock.wallMs() - 1000);
    expect((await verify(old.pathAndQuery)).id).toBe(sa.principalId);
    clock.advance(1000);
    await expect(verify(old.pathAndQuery)).rejects.toMatchObject({ code: 'unauthorized' });
    expect((await verify(fresh.pathAndQuery)).id).toBe(sa.principalId);
    await rotatePresignSecret(db.pool, 0);
    // No grace: dead as soon as the rotation's NOTIFY (or the next epoch poll) clears the cache, within 2 s.
    const deadline = performance.now() + 2000;
    while (
      await verify(fresh.pathAndQuery).then(
        () => true,
        () => false,
      )
    ) {
      expect(performance.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 20));
    }
    await expect(verify(fresh.pathAndQuery)).rejects.toMatchObject({ code: 'unauthorized' });
  });
});

/** Runs `body` with an authenticator and links of their own on `clock` (stopped after, whatever happens). */
async function withOwnClock(
  clock: ManualClock,
  body: (auth: Authenticator, links: PresignedLinks) => Promise<void>,
): Promise<void> {
  const ownAuth = new Authenticator({ pool: db.pool, databaseUrl: db.url, clock, log: createLogger('silent') });
  await ownAuth.start();
  try {
    await body(ownAuth, new PresignedLinks({ pool: db.pool, auth: ownAuth, clock, maxLifetimeSeconds: 604800 }));
  } finally {
    await ownAuth.stop();
  }
}

describe('a link and the disabling of its principal, on a gateway whose clock is off', () => {
  it('made before the principal was disabled stays dead once it is enabled again, with the clock 30 s ahead', async () => {
    // disabled_at is the database's time: a link dated by this gateway's clock would count as made after it.
    await withOwnClock(new ManualClock(Date.now() + 30_000, 0), async (_auth, aheadLinks) => {
      const check = (pathAndQuery: string) => {
        const url = new URL(pathAndQuery, 'http://gw.invalid');
        return aheadLinks.authenticate(url.pathname, url.searchParams).then((r) => r.principal);
      };
      const sa = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
      const principal = await principalOf(sa);
      const before = await aheadLinks.issue(principal, PATH, SHA, 600, 'libs');
      const store = new AdminStore(db.pool);
      await store.setPrincipalDisabled(sa.principalId, true);
      await store.setPrincipalDisabled(sa.principalId, false);
      await expect(check(before.pathAndQuery)).rejects.toMatchObject({ code: 'unauthorized' });
      // A link asked for at once is dated in a later second (of the database's clock) than the disable, and works.
      const after = await aheadLinks.issue(principal, PATH, SHA, 600, 'libs');
      expect((await check(after.pathAndQuery)).id).toBe(sa.principalId);
    });
  });
});

describe('a link made in the very millisecond its principal was disabled', () => {
  it('counts as made before the disable: it stays dead once the principal is enabled again', async () => {
    await withOwnClock(new ManualClock(Date.now(), 0), async (freshAuth, freshLinks) => {
      const sa = await createServiceAccount(db.pool, { grants: { libs: 'read' } });
      const link = await freshLinks.issue(await principalOf(sa), PATH, SHA, 600, 'libs');
      const url = new URL(link.pathAndQuery, 'http://gw.invalid');
      const issuedAtS = Number(url.searchParams.get('X-Arkvory-Date'));
      const store = new AdminStore(db.pool);
      await store.setPrincipalDisabled(sa.principalId, true);
      await store.setPrincipalDisabled(sa.principalId, false);
      // The disable stamped at the link's own second, to the millisecond: its date cannot tell which came first.
      await db.pool.query('UPDATE arkvory_principals SET disabled_at = to_timestamp($2) WHERE id = $1', [
        sa.principalId,
        issuedAtS,
      ]);
      await waitUntil(async () => (await freshAuth.authenticateKeyId(sa.keyId)).disabledAtMs === issuedAtS * 1000, {
        what: 'the stamped disable to reach the cache',
        timeoutMs: 5000,
      });
      await expect(freshLinks.authenticate(url.pathname, url.searchParams)).rejects.toMatchObject({
        code: 'unauthorized',
      });
    });
  });
});

describe('the removal of a grant, as the database records it', () => {
  it('is stamped by each path that removes one, kept when it is given back, not by a lowered grant', async () => {
    const sa = await createServiceAccount(db.pool, { grants: { libs: 'write' } });
    const store = new AdminStore(db.pool);
    const removals = () =>
      db.pool
        .query<{ repository: string; removed_at: Date }>(
          'SELECT repository, removed_at FROM arkvory_grant_removals WHERE principal_id = $1 ORDER BY 1',
          [sa.principalId],
        )
        .then((r) => r.rows);
    await store.addGrant(sa.principalId, 'libs', 'read');
    expect(await removals()).toEqual([]);
    const link = await links.issue(await principalOf(sa), PATH, SHA, 600, 'libs');
    await store.removeGrant(sa.principalId, 'libs');
    const stamped = await removals();
    expect(stamped.map((r) => r.repository)).toEqual(['libs']);
    await store.addGrant(sa.principalId, 'libs', 'read');
    expect(await removals()).toEqual(stamped);
    const issuedAt = (pathAndQuery: string) =>
      Number(new URL(pathAndQuery, 'http://gw.invalid').searchParams.get('X-Arkvory-Date'));
    // The grant is back, but not for the link made before its removal (once this cache has seen it).
    await waitUntil(
      async () => (await auth.grantForLinkNow(sa.principalId, 'libs', issuedAt(link.pathAndQuery))) === undefined,
      { what: 'the removal to reach the grant cache', timeoutMs: 10_000 },
    );
    expect(await auth.grant(sa.principalId, 'libs')).toBe('read');
    // Made at once: dated in a later second than the removal, so it acts with the new grant.
    const after = await links.issue(await principalOf(sa), PATH, SHA, 600, 'libs');
    expect(issuedAt(after.pathAndQuery) * 1000).toBeGreaterThan(stamped[0]!.removed_at.getTime());
    expect(await auth.grantForLinkNow(sa.principalId, 'libs', issuedAt(after.pathAndQuery))).toBe('read');

    // A repository's cascade removes its grants too.
    await createRepository(db.pool, 'gone');
    await store.addGrant(sa.principalId, 'gone', 'read');
    await db.pool.query(`DELETE FROM arkvory_repositories WHERE name = 'gone'`);
    expect((await removals()).map((r) => r.repository)).toEqual(['gone', 'libs']);
    // A principal deleted with its grants takes its removals along (and its deletion is not refused).
    await db.pool.query('DELETE FROM arkvory_principals WHERE id = $1', [sa.principalId]);
    expect(await removals()).toEqual([]);
  });
});
