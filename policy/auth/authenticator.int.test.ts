/**
 * The authenticator's negative cache against a real PostgreSQL: a flood of unknown key ids costs no
 * query, a key created later is accepted once the epoch moves, and past `maxKnownKeys` the gateway
 * falls back to looking ids up. Queries are counted on a real pool (a spy, not a stand-in).
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { createLogger } from '../../proxy/server/logger.ts';
import { type Clock, ManualClock, systemClock } from '../clock.ts';
import { AdminStore } from './admin-store.ts';
import { Authenticator } from './authenticator.ts';
import { openPool, waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A real pool whose key lookups (the per-id SELECT) are counted. */
function countingPool(): { pool: pg.Pool; lookups: () => number } {
  const pool = openPool(db.url, 3);
  let lookups = 0;
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  (pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    if (typeof args[0] === 'string' && args[0].includes('WHERE k.key_id = $1')) lookups++;
    return query(...args);
  };
  cleanups.push(() => pool.end());
  return { pool, lookups: () => lookups };
}

async function started(
  pool: pg.Pool,
  options: { maxKnownKeys?: number; recheckBurst?: number; recheckPerSecond?: number; clock?: Clock } = {},
): Promise<Authenticator> {
  const auth = new Authenticator({
    pool,
    databaseUrl: db.url,
    clock: systemClock,
    log: createLogger('silent'),
    ...options,
  });
  await auth.start();
  cleanups.push(() => auth.stop());
  return auth;
}

const randomKey = () =>
  `Bearer ark_${Array.from(randomBytes(16), (b) => 'abcdefghijklmnopqrstuvwxyz0123456789'[b % 36]).join('')}_${randomBytes(32).toString('base64url')}`;

describe('negative cache of unknown key ids (real PostgreSQL)', () => {
  it('answers a flood of random key ids with no key lookup beyond the small recheck allowance', async () => {
    const existing = await createServiceAccount(db.pool);
    const { pool, lookups } = countingPool();
    const auth = await started(pool);
    expect(auth.knownKeyCount).toBeGreaterThanOrEqual(1);
    const floodStart = Date.now();
    const outcomes = await Promise.allSettled(Array.from({ length: 2000 }, () => auth.authenticate(randomKey())));
    expect(
      outcomes.every((o) => o.status === 'rejected' && (o.reason as { code?: string }).code === 'unauthorized'),
    ).toBe(true);
    // Only the recheck allowance (for keys newer than the set) was looked up: 10 at once, 5/s after.
    expect(lookups()).toBeLessThanOrEqual(10 + 5 * Math.ceil((Date.now() - floodStart) / 1000));
    const afterFlood = lookups();
    // A known id is still looked up (once, then cached) and works.
    expect((await auth.authenticate(`Bearer ${existing.key}`)).id).toBe(existing.principalId);
    expect(lookups()).toBe(afterFlood + 1);
  });

  it('accepts a key used the moment it is created, before its notification arrives (a bounded recheck)', async () => {
    const { pool } = countingPool();
    const auth = await started(pool);
    const fresh = await createServiceAccount(db.pool);
    expect((await auth.authenticate(`Bearer ${fresh.key}`)).id).toBe(fresh.principalId);
  });

  it('keeps its recheck allowance when an injected clock goes back', async () => {
    const clock = new ManualClock(Date.now(), 1_000_000);
    const auth = await started(countingPool().pool, { recheckBurst: 2, recheckPerSecond: 1, clock });
    expect(auth.allowRecheck()).toBe(true);
    // A test setting the wall clock to a past instant moves this clock back too: the token left
    // stays (it was taken away, 10 s × 1/s, before; a pre-signed link's key then went unchecked).
    clock.advance(-10_000);
    expect(auth.allowRecheck()).toBe(true);
    expect(auth.allowRecheck()).toBe(false);
    clock.advance(1000);
    expect(auth.allowRecheck()).toBe(true);
  });

  it('accepts a key created after start: creation moves the epoch and drops the set', async () => {
    const { pool } = countingPool();
    const auth = await started(pool, { recheckBurst: 0, recheckPerSecond: 0 });
    const fresh = await createServiceAccount(db.pool);
    await waitUntil(
      async () => {
        try {
          return (await auth.authenticate(`Bearer ${fresh.key}`)).id === fresh.principalId;
        } catch {
          return false;
        }
      },
      { what: 'the new key to be accepted' },
    );
    // The set is loaded again after the epoch moved, in the background: under load it may trail the lookup.
    await waitUntil(async () => (auth.knownKeyCount ?? 0) >= 1, { what: 'the set of known keys to be loaded again' });
  });

  it('past maxKnownKeys keeps no set and looks unknown ids up instead', async () => {
    await createServiceAccount(db.pool);
    await createServiceAccount(db.pool);
    const { pool, lookups } = countingPool();
    const auth = await started(pool, { maxKnownKeys: 1 });
    expect(auth.knownKeyCount).toBeUndefined();
    await expect(auth.authenticate(randomKey())).rejects.toMatchObject({ code: 'unauthorized' });
    expect(lookups()).toBe(1);
  });
});

describe('the verified-secret memo of a cached key', () => {
  it('still refuses a wrong secret (same length, one character off) after the right one was accepted, and keeps accepting the right one', async () => {
    const { pool, lookups } = countingPool();
    const auth = await started(pool);
    const account = await createServiceAccount(db.pool);
    await waitUntil(
      async () => {
        try {
          await auth.authenticate(`Bearer ${account.key}`);
          const before = lookups();
          await auth.authenticate(`Bearer ${account.key}`);
          return lookups() === before;
        } catch {
          return false;
        }
      },
      { what: 'the key to be accepted from the cache' },
    );
    const last = account.key.at(-1)!;
    const forged = `${account.key.slice(0, -1)}${last === 'A' ? 'B' : 'A'}`;
    await expect(auth.authenticate(`Bearer ${forged}`)).rejects.toMatchObject({ code: 'unauthorized' });
    await expect(auth.authenticate(`Bearer ${account.key}x`)).rejects.toMatchObject({ code: 'unauthorized' });
    expect((await auth.authenticate(`Bearer ${account.key}`)).id).toBe(account.principalId);
    // The forged secret did not replace the memo: it is refused again, the right one still accepted.
    await expect(auth.authenticate(`Bearer ${forged}`)).rejects.toMatchObject({ code: 'unauthorized' });
    expect((await auth.authenticate(`Bearer ${account.key}`)).id).toBe(account.principalId);
  });

  it('authenticateNow and grantNow answer at once (no promise) from the trusted cache, and throw a refusal at once', async () => {
    const { pool, lookups } = countingPool();
    const auth = await started(pool);
    await createRepository(db.pool, 'nowrepo');
    const account = await createServiceAccount(db.pool, { grants: { nowrepo: 'read' } });
    await waitUntil(
      async () => {
        try {
          await auth.authenticate(`Bearer ${account.key}`);
          await auth.grant(account.principalId, 'nowrepo');
          const before = lookups();
          await auth.authenticate(`Bearer ${account.key}`);
          await auth.grant(account.principalId, 'nowrepo');
          return lookups() === before;
        } catch {
          return false;
        }
      },
      { what: 'the key and grant to be cached' },
    );
    const principal = auth.authenticateNow(`Bearer ${account.key}`);
    expect(principal).not.toBeInstanceOf(Promise);
    expect((principal as { id: string }).id).toBe(account.principalId);
    expect(auth.grantNow(account.principalId, 'nowrepo')).toBe('read');
    expect(auth.grantNow(account.principalId, 'elsewhere')).toBeUndefined();
    const last = account.key.at(-1)!;
    expect(() => auth.authenticateNow(`Bearer ${account.key.slice(0, -1)}${last === 'A' ? 'B' : 'A'}`)).toThrow(
      expect.objectContaining({ code: 'unauthorized' }),
    );
  });

  it('refuses the remembered secret once the key is revoked', async () => {
    const { pool } = countingPool();
    const auth = await started(pool);
    const account = await createServiceAccount(db.pool);
    await auth.authenticate(`Bearer ${account.key}`);
    await auth.authenticate(`Bearer ${account.key}`);
    await new AdminStore(db.pool).revokeKey(account.keyId);
    await waitUntil(
      async () => {
        try {
          await auth.authenticate(`Bearer ${account.key}`);
          return false;
        } catch (err) {
          return (err as { code?: string }).code === 'unauthorized';
        }
      },
      { what: 'the revoked key to be refused' },
    );
  });
});

describe('the repository listing of a principal', () => {
  it('reads the database, not cached grants, once the cache is no longer trusted', async () => {
    // Made before the authenticator starts, so no notification of theirs clears its cache later.
    await createRepository(db.pool, 'lista');
    await createRepository(db.pool, 'listb');
    const account = await createServiceAccount(db.pool, { grants: { lista: 'read', listb: 'read' } });
    const clock = new ManualClock(Date.now(), 0);
    // No timer poll during the test: trust ends when the injected clock says so.
    const auth = new Authenticator({
      pool: db.pool,
      databaseUrl: db.url,
      clock,
      log: createLogger('silent'),
      pollIntervalMs: 3_600_000,
    });
    await auth.start();
    cleanups.push(() => auth.stop());
    expect(auth.isCacheTrusted).toBe(true);
    expect(await auth.readableRepositories(account.principalId)).toEqual(['lista', 'listb']);
    // The grant goes with neither a notification nor a moved epoch (both lost, as a stalled LISTEN
    // connection and a slow poll lose them): only the end of trust can make the gateway see it.
    const client = await db.pool.connect();
    try {
      await client.query("SET session_replication_role = 'replica'");
      await client.query("DELETE FROM arkvory_grants WHERE principal_id = $1 AND repository = 'listb'", [
        account.principalId,
      ]);
      await client.query('RESET session_replication_role');
    } finally {
      client.release();
    }
    clock.advance(2000);
    expect(auth.isCacheTrusted).toBe(false);
    expect(await auth.grant(account.principalId, 'listb')).toBeUndefined();
    expect(await auth.readableRepositories(account.principalId)).toEqual(['lista']);
  });
});

describe('the key id of a client certificate', () => {
  it('is cert:<the bound SAN first in byte order> whatever order PostgreSQL returns the bindings in, so its rate-limit identifier stays put', async () => {
    const account = await createServiceAccount(db.pool);
    // Bound in the opposite of byte order ('D' < 'U' < 'Z'), the last one updated since: the
    // table's rows lie, and a scan returns them, otherwise than sorted.
    const sans = ['URI:spiffe://example.org/ci', 'DNS:zz.example.org', 'DNS:ci.example.org'];
    for (const san of sans)
      await db.pool.query(
        "INSERT INTO arkvory_certificate_bindings (san, principal_id, scopes) VALUES ($1, $2, '{read}')",
        [san, account.principalId],
      );
    await db.pool.query("UPDATE arkvory_certificate_bindings SET scopes = '{read,write}' WHERE san = $1", [
      'URI:spiffe://example.org/ci',
    ]);
    // A scan in table order, as PostgreSQL picks for a table of many bindings: on a handful of rows
    // it reads the primary key's index, which happens to return them sorted.
    const scans = encodeURIComponent('-c enable_indexscan=off -c enable_bitmapscan=off -c enable_indexonlyscan=off');
    const scanning = openPool(`${db.url}${db.url.includes('?') ? '&' : '?'}options=${scans}`, 2);
    cleanups.push(() => scanning.end());
    const auth = await started(scanning);
    // Each order of the certificate's names is a cache entry of its own, looked up afresh.
    for (const order of [sans, [...sans].reverse(), [sans[1]!, sans[0]!, sans[2]!]]) {
      const outcome = await auth.certificatePrincipalNow([...order, 'DNS:unbound.example.org']);
      expect(outcome.ok && outcome.principal.keyId, order.join(' ')).toBe('cert:DNS:ci.example.org');
    }
  });
});
