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

/** Asks every gateway to drop its cached slices of `blobs`; old requests (a day) are cleared. */
export async function requestCachePurge(db: Queryable, blobs: readonly string[]): Promise<void> {
  if (blobs.length === 0) return;
  await db.query(`DELETE FROM arkvory_cache_purges WHERE requested_at < now() - interval '1 day'`);
  await db.query('INSERT INTO arkvory_cache_purges (sha256) SELECT unnest($1::text[])', [blobs]);
}

/** Purge requests after id `afterId` (all of them, from the newest id, when `afterId` is undefined). */
export async function purgesSince(
  db: Queryable,
  afterId: string | undefined,
): Promise<{ lastId: string | undefined; blobs: string[] }> {
  if (afterId === undefined) {
    const { rows } = await db.query<{ id: string | null }>('SELECT max(id)::text AS id FROM arkvory_cache_purges');
    return { lastId: rows[0]?.id ?? '0', blobs: [] };
  }
  const { rows } = await db.query<{ id: string; sha256: string }>(
    'SELECT id::text AS id, sha256 FROM arkvory_cache_purges WHERE id > $1::bigint ORDER BY id',
    [afterId],
  );
  return { lastId: rows.at(-1)?.id ?? afterId, blobs: rows.map((r) => r.sha256) };
}
