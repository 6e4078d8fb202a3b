/**
 * Storage quotas on a real PostgreSQL: the usage rule (each blob once per repository), exact
 * reservations when many connections race (each pool stands for one gateway), settlement in the
 * catalog insert, growth of a chunked upload's reservation, and expiry of an abandoned one.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createCatalog, type NewCatalogEntry } from '../../storage-adapter/catalog/catalog.ts';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { openPool, waitUntil } from '../../test/harness/index.ts';
import { createStorageQuotas } from './storage-quotas.ts';

const db = useTestDatabase();
const pools: pg.Pool[] = [];
afterAll(async () => {
  for (const pool of pools) await pool.end();
});

const MiB = 1024 * 1024;
const sha = (n: number) => n.toString(16).padStart(64, '0');
let repoCount = 0;
async function freshRepository(): Promise<string> {
  const name = `quota-${++repoCount}-${randomUUID().slice(0, 8)}`;
  await createRepository(db.pool, name);
  return name;
}
const entry = (repository: string, name: string, sha256: string, sizeBytes: number, by: string | null = null) =>
  ({
    repository,
    kind: 'artifact',
    name,
    version: '',
    asset: '',
    sha256,
    sizeBytes,
    contentType: 'application/octet-stream',
    publishedBy: by,
  }) satisfies NewCatalogEntry;
const reservationRows = async (repository: string) =>
  (
    await db.pool.query<{ n: string }>(
      'SELECT count(*)::text AS n FROM arkvory_quota_reservations WHERE repository = $1',
      [repository],
    )
  ).rows[0]!.n;

describe('storage quotas (real PostgreSQL)', () => {
  it('counts each blob once per repository that references it, and once per repository for its publisher', async () => {
    const a = await freshRepository();
    const b = await freshRepository();
    const { principalId } = await createServiceAccount(db.pool);
    const catalog = createCatalog(db.pool);
    await catalog.insertOrGet(entry(a, 'one', sha(1), 1000, principalId));
    await catalog.insertOrGet(entry(a, 'same-bytes', sha(1), 1000, principalId)); // the same blob again: free
    await catalog.insertOrGet(entry(a, 'two', sha(2), 300));
    await catalog.insertOrGet(entry(b, 'one', sha(1), 1000, principalId)); // another repository: counted there
    const quotas = createStorageQuotas(db.pool);
    expect(await quotas.show('repository', a)).toEqual({
      scope: 'repository',
      subject: a,
      limitBytes: null,
      storedBytes: 1300,
      reservedBytes: 0,
      remainingBytes: null,
    });
    expect((await quotas.show('repository', b))!.storedBytes).toBe(1000);
    expect((await quotas.show('principal', principalId))!.storedBytes).toBe(2000);
    // A delete gives the bytes back at once (only when no other name in the repository holds the blob).
    await catalog.remove({ repository: a, kind: 'artifact', name: 'one', version: '', asset: '' });
    expect((await quotas.show('repository', a))!.storedBytes).toBe(1300);
    await catalog.remove({ repository: a, kind: 'artifact', name: 'same-bytes', version: '', asset: '' });
    expect((await quotas.show('repository', a))!.storedBytes).toBe(300);
    expect((await quotas.show('principal', principalId))!.storedBytes).toBe(1000);
  });

  it('shows nothing for a subject that does not exist, unless a quota is set under its name', async () => {
    const quotas = createStorageQuotas(db.pool);
    const missing = `quota-missing-${randomUUID().slice(0, 8)}`;
    expect(await quotas.show('repository', missing)).toBeUndefined();
    expect(await quotas.show('principal', randomUUID())).toBeUndefined();
    // A quota row its repository does not back (set before quotas were refused on missing ones) stays visible, as in list.
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', $1, 10)`,
      [missing],
    );
    try {
      expect(await quotas.show('repository', missing)).toMatchObject({ limitBytes: 10, storedBytes: 0 });
    } finally {
      await db.pool.query(`DELETE FROM arkvory_storage_quotas WHERE subject = $1`, [missing]);
    }
  });

  it('20 reservations from 3 connections pools racing for the last 100 MiB: exactly 10 of 10 MiB fit, never more', async () => {
    const repository = await freshRepository();
    await createCatalog(db.pool).insertOrGet(entry(repository, 'base', sha(3), 5 * MiB));
    await createStorageQuotas(db.pool).set('repository', repository, 105 * MiB);
    for (let i = 0; i < 3; i++) pools.push(openPool(db.url, 7));
    const gateways = pools.slice(-3).map((pool) => createStorageQuotas(pool));
    const outcomes = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) =>
        gateways[i % 3]!.reserve({ repository, principalId: null, bytes: 10 * MiB }),
      ),
    );
    const granted = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(granted).toHaveLength(10);
    expect(refused).toHaveLength(10);
    for (const r of refused)
      expect((r as PromiseRejectedResult).reason).toMatchObject({
        code: 'quota_exceeded',
        details: { scope: 'repository', subject: repository, quotaBytes: 105 * MiB, remainingBytes: 0 },
      });
    const usage = await gateways[0]!.show('repository', repository);
    expect(usage).toMatchObject({ storedBytes: 5 * MiB, reservedBytes: 100 * MiB, remainingBytes: 0 });

    // Publishing settles a reservation in the catalog insert: the bytes move from reserved to stored.
    const first = (granted[0] as PromiseFulfilledResult<Awaited<ReturnType<(typeof gateways)[0]['reserve']>>>).value!;
    await createCatalog(pools.at(-1)!).insertOrGet(entry(repository, 'published', sha(4), 10 * MiB), {
      settleReservation: first.id,
    });
    expect(await gateways[1]!.show('repository', repository)).toMatchObject({
      storedBytes: 15 * MiB,
      reservedBytes: 90 * MiB,
    });
    await first.release(); // already settled: a no-op
    // Releasing the others gives their bytes back.
    for (const g of granted.slice(1)) await (g as PromiseFulfilledResult<{ release(): Promise<void> }>).value.release();
    expect(await gateways[2]!.show('repository', repository)).toMatchObject({
      reservedBytes: 0,
      remainingBytes: 90 * MiB,
    });
    expect(await reservationRows(repository)).toBe('0');
  });

  it('a publish that commits while a reservation is being decided counts once, as its row or as its reservation', async () => {
    const repository = await freshRepository();
    const quotas = createStorageQuotas(db.pool);
    await quotas.set('repository', repository, 10 * MiB);
    const first = (await quotas.reserve({ repository, principalId: null, bytes: 10 * MiB }))!;
    // Another connection holds the reservations table: the next decision reads the catalog, then
    // waits for the table; meanwhile the first upload publishes, settling its reservation.
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE arkvory_quota_reservations IN ACCESS EXCLUSIVE MODE');
      const second = quotas.reserve({ repository, principalId: null, bytes: 10 * MiB }).then(
        () => 'granted',
        (err: unknown) => err,
      );
      await waitUntil(
        async () =>
          (
            await db.pool.query(
              `SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                WHERE c.relname = 'arkvory_quota_reservations' AND NOT l.granted`,
            )
          ).rowCount! > 0,
        { what: 'the second reservation to wait for the reservations table' },
      );
      // The catalog's own publish (its only use of the pool is `query`), in the holder's transaction.
      await createCatalog(holder as unknown as pg.Pool).insertOrGet(entry(repository, 'first', sha(21), 10 * MiB), {
        settleReservation: first.id,
      });
      await holder.query('COMMIT');
      // Read in one snapshot, the 10 MiB are the row; in two, they could be neither (granted, 20 MiB stored).
      expect(await second).toMatchObject({
        code: 'quota_exceeded',
        details: { usageBytes: 10 * MiB, remainingBytes: 0 },
      });
    } finally {
      holder.release();
      await first.release();
    }
    expect(await quotas.show('repository', repository)).toMatchObject({ storedBytes: 10 * MiB, reservedBytes: 0 });
  });

  it('a chunked upload grows its reservation by steps, then exactly, and is refused past the quota', async () => {
    const repository = await freshRepository();
    const quotas = createStorageQuotas(db.pool, { stepBytes: 1000 });
    await quotas.set('repository', repository, 2500);
    const reservation = (await quotas.reserve({ repository, principalId: null, bytes: 0 }))!;
    expect(reservation.bytes).toBe(0);
    await reservation.ensure(1);
    expect(reservation.bytes).toBe(1000);
    await reservation.ensure(1000);
    expect(reservation.bytes).toBe(1000);
    await reservation.ensure(2001); // the step (3000) does not fit; exactly 2001 does
    expect(reservation.bytes).toBe(2001);
    expect((await quotas.show('repository', repository))!.reservedBytes).toBe(2001);
    await expect(reservation.ensure(2501)).rejects.toMatchObject({
      code: 'quota_exceeded',
      details: { quotaBytes: 2500, usageBytes: 0, remainingBytes: 2500, requestedBytes: 2501 },
    });
    expect(reservation.bytes).toBe(2001);
    await reservation.release();
    expect(await reservation.release()).toBeUndefined();
    expect((await quotas.show('repository', repository))!.reservedBytes).toBe(0);
  });

  it('a reservation pinned to a blob the subject counts costs nothing, counts again if its last row goes, and counts once with others of the same blob', async () => {
    const repository = await freshRepository();
    const { principalId } = await createServiceAccount(db.pool);
    const catalog = createCatalog(db.pool);
    const quotas = createStorageQuotas(db.pool);
    await catalog.insertOrGet(entry(repository, 'held', sha(31), 1000, principalId));
    await quotas.set('repository', repository, 1000); // full
    const pinned = (await quotas.reserve({ repository, principalId, bytes: 1000, sha256: sha(31) }))!;
    expect(await quotas.show('repository', repository)).toMatchObject({ storedBytes: 1000, reservedBytes: 0 });
    // The same bytes unpinned, or new bytes pinned, still need room.
    await expect(quotas.reserve({ repository, principalId, bytes: 1000 })).rejects.toMatchObject({
      code: 'quota_exceeded',
      details: { requestedBytes: 1000, remainingBytes: 0 },
    });
    await expect(quotas.reserve({ repository, principalId, bytes: 1, sha256: sha(32) })).rejects.toMatchObject({
      code: 'quota_exceeded',
      details: { requestedBytes: 1 },
    });
    // The last row holding the blob goes while the upload runs: the delete frees no room the
    // upload will take back, the reservation counts the bytes now.
    await catalog.remove({ repository, kind: 'artifact', name: 'held', version: '', asset: '' });
    expect(await quotas.show('repository', repository)).toMatchObject({
      storedBytes: 0,
      reservedBytes: 1000,
      remainingBytes: 0,
    });
    await expect(quotas.reserve({ repository, principalId, bytes: 1 })).rejects.toMatchObject({
      code: 'quota_exceeded',
    });
    // Another upload of the same blob shares them: counted once.
    const second = (await quotas.reserve({ repository, principalId, bytes: 1000, sha256: sha(31) }))!;
    expect(await quotas.show('repository', repository)).toMatchObject({ reservedBytes: 1000 });
    // Publishing settles one; the other counts nothing again, the blob being stored.
    await catalog.insertOrGet(entry(repository, 'again', sha(31), 1000, principalId), {
      settleReservation: pinned.id,
    });
    expect(await quotas.show('repository', repository)).toMatchObject({ storedBytes: 1000, reservedBytes: 0 });
    await second.release();
    // A quota lowered below its usage still takes bytes it already counts, and no new ones.
    await quotas.set('repository', repository, 10);
    const over = await quotas.reserve({ repository, principalId, bytes: 1000, sha256: sha(31) });
    expect(over).toBeDefined();
    await over!.release();
    await expect(quotas.reserve({ repository, principalId, bytes: 0 })).rejects.toMatchObject({
      code: 'quota_exceeded',
    });
    expect(await reservationRows(repository)).toBe('0');
  });

  it("a pinned reservation larger than the held blob it names counts its bytes; a chunked one grows to the blob's size at no cost and is refused past it", async () => {
    const repository = await freshRepository();
    const catalog = createCatalog(db.pool);
    const quotas = createStorageQuotas(db.pool, { stepBytes: 4096 });
    await catalog.insertOrGet(entry(repository, 'held', sha(51), 1000));
    await quotas.set('repository', repository, 1000); // full
    // More bytes than the blob cannot be it, whatever they declare.
    await expect(quotas.reserve({ repository, principalId: null, bytes: 1001, sha256: sha(51) })).rejects.toMatchObject(
      { code: 'quota_exceeded', details: { requestedBytes: 1001, remainingBytes: 0 } },
    );
    const chunked = (await quotas.reserve({ repository, principalId: null, bytes: 0, sha256: sha(51) }))!;
    await chunked.ensure(10); // the step (4096) passes the blob: its size instead, free
    expect(chunked.bytes).toBe(1000);
    expect(await quotas.show('repository', repository)).toMatchObject({ reservedBytes: 0, remainingBytes: 0 });
    await expect(chunked.ensure(1001)).rejects.toMatchObject({
      code: 'quota_exceeded',
      details: { requestedBytes: 1001 },
    });
    expect(chunked.bytes).toBe(1000);
    await chunked.release();
    expect(await reservationRows(repository)).toBe('0');
  });

  it('a pinned reservation costs a principal the blob unless it published it in that repository', async () => {
    const repository = await freshRepository();
    const other = await freshRepository();
    const publisher = await createServiceAccount(db.pool);
    const uploader = await createServiceAccount(db.pool);
    const catalog = createCatalog(db.pool);
    const quotas = createStorageQuotas(db.pool);
    await catalog.insertOrGet(entry(repository, 'by-publisher', sha(41), 700, publisher.principalId));
    await catalog.insertOrGet(entry(repository, 'by-uploader', sha(42), 300, uploader.principalId));
    await catalog.insertOrGet(entry(other, 'by-uploader', sha(41), 700, uploader.principalId));
    await quotas.set('repository', repository, 1000); // full
    const request = { repository, principalId: uploader.principalId };
    // Only the repository's quota: every blob it holds is free again.
    await (await quotas.reserve({ ...request, bytes: 700, sha256: sha(41) }))!.release();
    // The uploader's quota counts what it published in each repository: the blob it published in
    // `other` is new to it in `repository`.
    await quotas.set('principal', uploader.principalId, 1000); // 300 + 700 used
    await expect(quotas.reserve({ ...request, bytes: 700, sha256: sha(41) })).rejects.toMatchObject({
      code: 'quota_exceeded',
      details: { scope: 'principal', requestedBytes: 700, remainingBytes: 0 },
    });
    const free = (await quotas.reserve({ ...request, bytes: 300, sha256: sha(42) }))!;
    expect(free).toBeDefined();
    await free.release();
    expect(await reservationRows(repository)).toBe('0');
  });

  it("a principal's quota applies to its uploads in every repository; no quota, no reservation", async () => {
    const a = await freshRepository();
    const b = await freshRepository();
    const { principalId, name } = await createServiceAccount(db.pool);
    const quotas = createStorageQuotas(db.pool);
    expect(await quotas.reserve({ repository: a, principalId, bytes: 10 })).toBeUndefined();
    expect(await quotas.subjectOf('principal', name)).toBe(principalId);
    expect(await quotas.subjectOf('principal', principalId)).toBe(principalId);
    expect(await quotas.subjectOf('principal', 'nobody-by-that-name')).toBeUndefined();
    await quotas.set('principal', principalId, 100);
    const held = (await quotas.reserve({ repository: a, principalId, bytes: 60 }))!;
    await expect(quotas.reserve({ repository: b, principalId, bytes: 41 })).rejects.toMatchObject({
      code: 'quota_exceeded',
      details: { scope: 'principal', subject: principalId, remainingBytes: 40 },
    });
    // Another principal is not bound by it.
    expect(await quotas.reserve({ repository: b, principalId: null, bytes: 1000 })).toBeUndefined();
    await held.release();
    expect(await quotas.list()).toContainEqual({
      scope: 'principal',
      subject: principalId,
      limitBytes: 100,
      storedBytes: 0,
      reservedBytes: 0,
      remainingBytes: 100,
    });
    expect(await quotas.remove('principal', principalId)).toBe(true);
    expect(await quotas.remove('principal', principalId)).toBe(false);
  });

  it('a reservation no longer renewed (its gateway died) stops counting after its time to live', async () => {
    const repository = await freshRepository();
    // Long enough that a loaded machine still asks again inside it (checked below, not assumed).
    const ttlMs = 2000;
    // No renewal timer: as if the process holding it was killed.
    const dead = createStorageQuotas(db.pool, { reservationTtlMs: ttlMs, setInterval: () => ({}) });
    await dead.set('repository', repository, 100);
    const started = performance.now();
    await dead.reserve({ repository, principalId: null, bytes: 100 });
    const live = createStorageQuotas(db.pool);
    await expect(live.reserve({ repository, principalId: null, bytes: 1 })).rejects.toMatchObject({
      code: 'quota_exceeded',
    });
    expect(performance.now() - started).toBeLessThan(ttlMs); // that refusal came inside its time to live
    // Expiry is PostgreSQL's clock: wait until it says so, then the bytes are free again.
    await waitUntil(
      async () =>
        (
          await db.pool.query<{ expired: boolean }>(
            'SELECT bool_and(expires_at <= now()) AS expired FROM arkvory_quota_reservations WHERE repository = $1',
            [repository],
          )
        ).rows[0]!.expired,
      { what: 'the reservation to expire', timeoutMs: 10 * ttlMs },
    );
    const after = await live.reserve({ repository, principalId: null, bytes: 100 });
    expect(after).toBeDefined();
    expect(await reservationRows(repository)).toBe('1'); // the expired one was deleted by that reservation
    await after!.release();
  });
  it("a completion's decision is kept counting until it is settled: holds and keep move its expiry on, never back", async () => {
    const repository = await freshRepository();
    const ttlMs = 60_000;
    const ticks: Array<() => void> = [];
    const handles: object[] = [];
    const stopped: unknown[] = [];
    // One connection: a query after a renewal tick runs after the renewal's own.
    const pool = openPool(db.url, 1);
    pools.push(pool);
    const renewed = async (tick: () => void) => {
      tick();
      await pool.query('SELECT 1');
    };
    const quotas = createStorageQuotas(pool, {
      reservationTtlMs: ttlMs,
      setInterval: (fn) => {
        ticks.push(fn);
        const handle = {};
        handles.push(handle);
        return handle;
      },
      clearInterval: (handle) => stopped.push(handle),
    });
    await quotas.set('repository', repository, 1000);
    /** Milliseconds until reservation `id` stops counting. */
    const expiry = async (id: string) =>
      Number(
        (
          await db.pool.query<{ left_ms: string }>(
            'SELECT extract(epoch FROM expires_at - now()) * 1000 AS left_ms FROM arkvory_quota_reservations WHERE id = $1',
            [id],
          )
        ).rows[0]!.left_ms,
      );
    const at = (id: string, seconds: number) =>
      db.pool.query(
        `UPDATE arkvory_quota_reservations SET expires_at = now() + make_interval(secs => $2) WHERE id = $1`,
        [id, seconds],
      );
    // A session's hold about to end (its session's expiry): holds() says so and moves it to the time to live.
    const session = randomUUID();
    await quotas.reserveAs(session, { repository, principalId: null, bytes: 600 });
    await at(session, 1);
    expect(await quotas.holds(session, 601)).toBe(false);
    expect(await expiry(session)).toBeLessThanOrEqual(1000);
    expect(await quotas.holds(session, 600)).toBe(true);
    expect(await expiry(session)).toBeGreaterThan(ttlMs - 10_000);
    // Each renewal moves it on to the time to live from then, until stopped.
    const stop = quotas.keep(session);
    const tick = ticks.at(-1)!;
    await at(session, 1);
    await renewed(tick);
    expect(await expiry(session)).toBeGreaterThan(ttlMs - 10_000);
    // A hold that lasts longer (a session's, far from its expiry) is not shortened.
    await at(session, 3600);
    await renewed(tick);
    expect(await expiry(session)).toBeGreaterThan(3_500_000);
    stop();
    expect(stopped).toHaveLength(1);
    expect(stopped[0]).toBe(handles.at(-1));
    await expect(quotas.reserve({ repository, principalId: null, bytes: 401 })).rejects.toMatchObject({
      code: 'quota_exceeded',
    });
    await quotas.release(session);
  });

  it("a completing session's hold counts until its completion ends: deciding its whole does not shorten it to a time to live", async () => {
    const repository = await freshRepository();
    const quotas = createStorageQuotas(db.pool);
    await quotas.set('repository', repository, 1000);
    const session = randomUUID();
    // A session's hold (until its expiry, a second away), then its completion queued.
    await db.pool.query(
      `INSERT INTO arkvory_quota_reservations (id, repository, bytes, expires_at) VALUES ($1, $2, 100, now() + interval '1 second')`,
      [session, repository],
    );
    await quotas.holdUntilCompleted(session);
    // The worker decides the whole (the session held less), then waits out a store failure, queued.
    await quotas.reserveAs(session, { repository, principalId: null, bytes: 600 });
    const held = await db.pool.query<{ bytes: string; forever: boolean }>(
      `SELECT bytes::text, expires_at = 'infinity' AS forever FROM arkvory_quota_reservations WHERE id = $1`,
      [session],
    );
    expect(held.rows).toEqual([{ bytes: '600', forever: true }]);
    await expect(quotas.reserve({ repository, principalId: null, bytes: 401 })).rejects.toMatchObject({
      code: 'quota_exceeded',
    });
    // The completion's end (the worker's outcome, the catalog insert) deletes it.
    await quotas.release(session);
    expect(await reservationRows(repository)).toBe('0');
  });
});
