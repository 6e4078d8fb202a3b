/**
 * The slice digests of blobs in PostgreSQL (`arkvory_blob_slices`, migration 0013) and the cache
 * purge requests (`arkvory_cache_purges`). Recorded at publish and by scrub's backfill; deleted by
 * gc and scrub for a blob they remove or quarantine (the delete bumps the catalog epoch).
 */
import type pg from 'pg';
import { isConsistent, type SliceDigests } from '../slice-digests.ts';

type Queryable = Pick<pg.Pool, 'query'>;

interface Row {
  sha256: string;
  size_bytes: string;
  slice_bytes: number;
  digests: Buffer;
}

/** Records a blob's slice digests; a row already there (same blob, so same bytes) is kept. */
export async function recordSliceDigests(db: Queryable, sha256: string, d: SliceDigests): Promise<void> {
  await db.query(
    `INSERT INTO arkvory_blob_slices (sha256, size_bytes, slice_bytes, digests) VALUES ($1, $2, $3, $4)
     ON CONFLICT (sha256) DO NOTHING`,
    [sha256, d.sizeBytes, d.sliceBytes, d.digests],
  );
}

/** The recorded digests, or undefined when none (or a row that does not add up: never trusted). */
export async function readSliceDigests(db: Queryable, sha256: string): Promise<SliceDigests | undefined> {
  const { rows } = await db.query<Row>(
    'SELECT sha256, size_bytes, slice_bytes, digests FROM arkvory_blob_slices WHERE sha256 = $1',
    [sha256],
  );
  const row = rows[0];
  if (!row) return undefined;
  const d = { sizeBytes: Number(row.size_bytes), sliceBytes: row.slice_bytes, digests: row.digests };
  return isConsistent(d) ? d : undefined;
}

/** Which of `blobs` have digests recorded. */
export async function blobsWithSliceDigests(db: Queryable, blobs: readonly string[]): Promise<Set<string>> {
  if (blobs.length === 0) return new Set();
  const { rows } = await db.query<{ sha256: string }>(
    'SELECT sha256 FROM arkvory_blob_slices WHERE sha256 = ANY($1::text[])',
    [blobs],
  );
  return new Set(rows.map((r) => r.sha256));
}

/** Forgets the digests of removed or quarantined blobs: every gateway's cache stops serving them. */
export async function deleteSliceDigests(db: Queryable, blobs: readonly string[]): Promise<number> {
  if (blobs.length === 0) return 0;
  const result = await db.query('DELETE FROM arkvory_blob_slices WHERE sha256 = ANY($1::text[])', [blobs]);
  return result.rowCount ?? 0;
}

/** How long purge requests are kept: a cache that applied none for longer may have missed some. */
export const PURGE_RETENTION_SECONDS = 24 * 3600;
/**
 * How far before its last sweep a cache looks again at start: a request is timed at its
 * transaction's start, so one committed just after a sweep's snapshot may carry an earlier time.
 */
export const PURGE_LOOKBACK_SECONDS = 60;

/** Asks every gateway to drop its cached slices of `blobs`; requests older than the retention are cleared. */
export async function requestCachePurge(db: Queryable, blobs: readonly string[]): Promise<void> {
  if (blobs.length === 0) return;
  await db.query(
    `DELETE FROM arkvory_cache_purges WHERE requested_at < now() - make_interval(secs => ${PURGE_RETENTION_SECONDS})`,
  );
  await db.query('INSERT INTO arkvory_cache_purges (sha256) SELECT unnest($1::text[])', [blobs]);
}

export interface Purges {
  /** PostgreSQL's time of the read: every request before it (less the lookback) is in `blobs`. */
  readonly now: Date;
  /** The newest request id seen, for the next `purgesSince`. */
  readonly lastId: string;
  readonly blobs: string[];
}

/** Purge requests after id `afterId`. */
export async function purgesSince(db: Queryable, afterId: string): Promise<Purges> {
  const { rows } = await db.query<{ now: Date; id: string | null; sha256: string | null }>(
    `SELECT now() AS now, p.id::text AS id, p.sha256 FROM (SELECT 1) AS one
     LEFT JOIN arkvory_cache_purges p ON p.id > $1::bigint ORDER BY p.id`,
    [afterId],
  );
  const found = rows.filter((r) => r.id !== null);
  return {
    now: rows[0]!.now,
    lastId: found.at(-1)?.id ?? afterId,
    blobs: found.map((r) => r.sha256!),
  };
}

/**
 * What a slice cache opening on disk must drop: the blobs purged since `appliedBefore` (its last
 * sweep's `now`, less the lookback), every retained request when it has no such time (or one later
 * than now), or `all` when that time is older than the retention (requests it never applied may have
 * been cleared).
 */
export async function purgesAtStart(
  db: Queryable,
  appliedBefore: Date | undefined,
): Promise<Omit<Purges, 'blobs'> & { blobs: string[] | 'all' }> {
  const { rows } = await db.query<{ now: Date; last_id: string | null; too_old: boolean }>(
    `SELECT now() AS now, (SELECT max(id)::text FROM arkvory_cache_purges) AS last_id,
       coalesce($1::timestamptz - make_interval(secs => ${PURGE_LOOKBACK_SECONDS})
         < now() - make_interval(secs => ${PURGE_RETENTION_SECONDS}), false) AS too_old`,
    [appliedBefore ?? null],
  );
  const head = rows[0]!;
  const lastId = head.last_id ?? '0';
  if (head.too_old) return { now: head.now, lastId, blobs: 'all' };
  // A note later than this server's clock (another server, a clock set back) says nothing.
  const since = appliedBefore !== undefined && appliedBefore <= head.now ? appliedBefore : null;
  const purged = await db.query<{ sha256: string }>(
    `SELECT DISTINCT sha256 FROM arkvory_cache_purges
     WHERE id <= $1::bigint AND ($2::timestamptz IS NULL OR requested_at >= $2::timestamptz - make_interval(secs => ${PURGE_LOOKBACK_SECONDS}))`,
    [lastId, since],
  );
  return { now: head.now, lastId, blobs: purged.rows.map((r) => r.sha256) };
}
