/**
 * The artifact catalog in PostgreSQL: which name in which repository points at which blob. A row
 * is inserted only after its blob is durable, so a reader that finds a row finds whole bytes.
 */
import type pg from 'pg';
import { BARRIER_LOCK_CLASS, BARRIERS } from '../../lib/advisory-barriers.ts';
import { StorageError } from '../errors.ts';
import { DEFAULT_SLICE_BYTES, type SliceDigests } from '../slice-digests.ts';
import { recordSliceDigests } from './slice-rows.ts';

export const ARTIFACT_KINDS = ['artifact', 'package', 'asset'] as const;
export type ArtifactKind = (typeof ARTIFACT_KINDS)[number];

/** Names one published object. `version`/`asset` are '' where the kind has none. */
export interface ArtifactKey {
  readonly repository: string;
  readonly kind: ArtifactKind;
  readonly name: string;
  readonly version: string;
  readonly asset: string;
}

export interface CatalogEntry extends ArtifactKey {
  readonly sha256: string;
  readonly sizeBytes: number;
  readonly contentType: string;
  readonly publishedBy: string | null;
  /**
   * Whole seconds (the column is truncated), so Last-Modified round-trips exactly. Later than every
   * earlier version of the name (migrations/0075): one published again within the second of the
   * version it replaces is dated a second later, so a date alone never validates the old bytes.
   */
  readonly createdAtMs: number;
}

export type NewCatalogEntry = Omit<CatalogEntry, 'createdAtMs'>;

interface Row {
  repository: string;
  kind: ArtifactKind;
  name: string;
  version: string;
  asset: string;
  sha256: string;
  size_bytes: string;
  content_type: string;
  published_by: string | null;
  created_at: Date;
}

const COLUMNS = 'repository, kind, name, version, asset, sha256, size_bytes, content_type, published_by, created_at';

function toEntry(row: Row): CatalogEntry {
  return {
    repository: row.repository,
    kind: row.kind,
    name: row.name,
    version: row.version,
    asset: row.asset,
    sha256: row.sha256,
    sizeBytes: Number(row.size_bytes),
    contentType: row.content_type,
    publishedBy: row.published_by,
    createdAtMs: row.created_at.getTime(),
  };
}

function keyParams(key: ArtifactKey): string[] {
  return [key.repository, key.kind, key.name, key.version, key.asset];
}

const KEY_WHERE = 'repository = $1 AND kind = $2 AND name = $3 AND version = $4 AND asset = $5';

/**
 * Who publishes, checked by the catalog insert's own statement (one snapshot, taken once the bytes
 * are committed, however long that took): a verdict other than `ok` inserts nothing and settles
 * nothing, and `refuse(verdict)` is thrown. `request`: an upload's principal, the key that sent it
 * (unrevoked, with the `write` scope; undefined for a client certificate) and the principal's
 * `disabled_at` as its authentication read it (a disable since, even undone, voids it). `session`:
 * a multipart session's principal (none: nothing to check), disabled since the session was opened
 * (even if enabled again) or gone voids it. Both need the principal's grant on the repository to be
 * `write`: none is `not_found` for a request (`forbidden` for a session), a read grant `forbidden`.
 */
export type PublishAuthority =
  | {
      readonly kind: 'request';
      readonly principalId: string;
      readonly keyId: string | undefined;
      readonly disabledAtMs: number | undefined;
      readonly refuse: (verdict: AuthorityVerdict) => Error;
    }
  | { readonly kind: 'session'; readonly sessionId: string; readonly refuse: (verdict: AuthorityVerdict) => Error };

export type AuthorityVerdict = 'unauthorized' | 'forbidden' | 'not_found';

export interface Catalog {
  get(key: ArtifactKey): Promise<CatalogEntry | undefined>;
  /**
   * Optional (a caching catalog): the entry at once when a trusted cache holds it; undefined means
   * nothing is known without asking (`get`), never "absent".
   */
  peek?(key: ArtifactKey): CatalogEntry | undefined;
  /**
   * Inserts in one statement; returns the row now stored under the key (ours or an earlier one).
   * `settleReservation`: the storage-quota reservation (migrations/0050) the same statement deletes,
   * so the bytes count once, as the reservation or as the row, to every concurrent reader.
   * Refused (503 `unavailable`, nothing inserted or settled) while offline maintenance holds the
   * maintenance barrier: gc may have removed the blob the row would name.
   */
  insertOrGet(
    entry: NewCatalogEntry,
    options?: { settleReservation?: string | undefined; authority?: PublishAuthority | undefined },
  ): Promise<{ inserted: boolean; entry: CatalogEntry }>;
  /**
   * Removes the catalog row only; the blob stays until offline gc. With `precondition`, it is
   * called with the row read from the database (never a cache) and may throw to refuse, and only
   * that very row is deleted: a row replaced meanwhile is read and checked again.
   */
  remove(key: ArtifactKey, precondition?: (current: CatalogEntry) => void): Promise<boolean>;
  /** Every sha256 some row references (for gc and tests). */
  referencedBlobs(): Promise<Set<string>>;
  /** Records a blob's slice digests (slice-rows.ts) before its first catalog row is inserted. */
  recordSlices?(sha256: string, digests: SliceDigests): Promise<void>;
  /** The slice size publish digests with (with `recordSlices`). */
  readonly sliceBytes?: number;
}

/** `sliceBytes`: the slice size new blobs' digests are recorded with (ARKVORY_CACHE_SLICE_BYTES). */
export function createCatalog(pool: pg.Pool, options: { sliceBytes?: number } = {}): Catalog {
  return {
    sliceBytes: options.sliceBytes ?? DEFAULT_SLICE_BYTES,
    async get(key) {
      const { rows } = await pool.query<Row>(
        `SELECT ${COLUMNS} FROM arkvory_artifacts WHERE ${KEY_WHERE}`,
        keyParams(key),
      );
      return rows[0] ? toEntry(rows[0]) : undefined;
    },
    async insertOrGet(entry, options) {
      const params: unknown[] = [
        ...keyParams(entry),
        entry.sha256,
        entry.sizeBytes,
        entry.contentType,
        entry.publishedBy,
      ];
      // The maintenance barrier, shared, for this statement's transaction. A gateway holds it on its
      // lease connection, but a fenced one (that connection ended) may still be committing an
      // upload whose blob is linked already: the row goes in only while no gc or scrub holds the
      // barrier, and holding it here keeps them out until the row is committed, so gc either sees
      // the row or ran before it and the insert is refused. A try, never a wait: once gc is done
      // the blob may be gone.
      params.push(BARRIER_LOCK_CLASS, BARRIERS.maintenance);
      const barrier = `barrier AS (SELECT pg_try_advisory_xact_lock_shared($${params.length - 1}, $${params.length}) AS held)`;
      // Who publishes, judged in this statement's snapshot: a revocation committed while the bytes
      // were being committed (an S3 copy of a large blob) is seen, not only one before the last check.
      const authority = options?.authority ? `, ${authorityCte(options.authority, params)}` : '';
      const allowed = options?.authority
        ? `(SELECT held FROM barrier) AND (SELECT verdict FROM authority) = 'ok'`
        : '(SELECT held FROM barrier)';
      // A data-modifying WITH runs to completion whether or not the query reads it: the reservation
      // goes in the same transaction as the row.
      let settle = '';
      if (options?.settleReservation !== undefined) {
        params.push(options.settleReservation);
        settle = `, settled AS (DELETE FROM arkvory_quota_reservations WHERE id = $${params.length} AND ${allowed})`;
      }
      // One statement is one transaction: either our row is inserted, or we read the winner's.
      const { rows } = await pool.query<Row & { inserted: boolean; held: boolean; verdict: string }>(
        `WITH ${barrier}${authority},
         ins AS (
           INSERT INTO arkvory_artifacts (repository, kind, name, version, asset, sha256, size_bytes, content_type, published_by)
           SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE ${allowed}
           ON CONFLICT (repository, kind, name, version, asset) DO NOTHING
           RETURNING ${COLUMNS}
         )${settle}
         SELECT ins.*, ins.sha256 IS NOT NULL AS inserted, barrier.held,
                ${options?.authority ? '(SELECT verdict FROM authority)' : "'ok'"} AS verdict
         FROM barrier LEFT JOIN ins ON true`,
        params,
      );
      if (!rows[0]!.held)
        throw new StorageError(
          'unavailable',
          'Offline maintenance (gc or scrub) holds the store; nothing was published. Retry once it is done.',
        );
      const verdict = rows[0]!.verdict;
      if (verdict !== 'ok') throw options!.authority!.refuse(verdict as AuthorityVerdict);
      if (rows[0]!.inserted) return { inserted: true, entry: toEntry(rows[0]!) };
      const existing = await this.get(entry);
      if (!existing) throw new Error('catalog row vanished between insert and read');
      return { inserted: false, entry: existing };
    },
    async remove(key, precondition) {
      if (!precondition) {
        const result = await pool.query(`DELETE FROM arkvory_artifacts WHERE ${KEY_WHERE}`, keyParams(key));
        return (result.rowCount ?? 0) > 0;
      }
      // Compare and delete: the writer may delete rows but not lock them (FOR UPDATE needs UPDATE).
      for (;;) {
        const current = await this.get(key);
        if (!current) return false;
        precondition(current);
        const result = await pool.query(
          `DELETE FROM arkvory_artifacts WHERE ${KEY_WHERE} AND sha256 = $6 AND created_at = $7`,
          [...keyParams(key), current.sha256, new Date(current.createdAtMs)],
        );
        if ((result.rowCount ?? 0) > 0) return true;
      }
    },
    recordSlices: (sha256, digests) => recordSliceDigests(pool, sha256, digests),
    async referencedBlobs() {
      const { rows } = await pool.query<{ sha256: string }>('SELECT DISTINCT sha256 FROM arkvory_artifacts');
      return new Set(rows.map((r) => r.sha256));
    },
  };
}

/**
 * The `authority` CTE of the insert (`PublishAuthority`): one row, `verdict` 'ok' or the refusal.
 * Its parameters are appended to `params`; `$1` is the key's repository.
 */
function authorityCte(authority: PublishAuthority, params: unknown[]): string {
  if (authority.kind === 'session') {
    params.push(authority.sessionId);
    const s = `$${params.length}`;
    // A session gone meanwhile publishes nothing either (coalesce: no row).
    return `authority AS (SELECT coalesce((
      SELECT CASE
        WHEN s.principal_id IS NULL THEN 'ok'
        WHEN p.id IS NULL OR p.disabled OR p.disabled_at >= s.created_at THEN 'unauthorized'
        WHEN g.permission IS DISTINCT FROM 'write' THEN 'forbidden'
        ELSE 'ok' END
      FROM arkvory_upload_sessions s
      LEFT JOIN arkvory_principals p ON p.id = s.principal_id
      LEFT JOIN arkvory_grants g ON g.principal_id = s.principal_id AND g.repository = s.repository
      WHERE s.id = ${s}::uuid), 'unauthorized') AS verdict)`;
  }
  params.push(
    authority.principalId,
    authority.keyId ?? null,
    authority.disabledAtMs === undefined ? null : new Date(authority.disabledAtMs),
  );
  const [p, k, d] = [params.length - 2, params.length - 1, params.length].map((i) => `$${i}`);
  // disabled_at as the authentication read it: a JavaScript Date, whole milliseconds (truncated).
  return `authority AS (SELECT CASE
      WHEN p.id IS NULL OR p.disabled
        OR date_trunc('milliseconds', p.disabled_at) IS DISTINCT FROM ${d}::timestamptz
        OR (${k}::text IS NOT NULL AND (k.key_id IS NULL OR k.revoked_at IS NOT NULL OR k.principal_id <> p.id)) THEN 'unauthorized'
      WHEN g.permission IS NULL THEN 'not_found'
      WHEN g.permission <> 'write' OR (${k}::text IS NOT NULL AND NOT 'write' = ANY (k.scopes)) THEN 'forbidden'
      ELSE 'ok' END AS verdict
    FROM (SELECT ${p}::uuid AS id) who
    LEFT JOIN arkvory_principals p ON p.id = who.id
    LEFT JOIN arkvory_grants g ON g.principal_id = who.id AND g.repository = $1
    LEFT JOIN arkvory_api_keys k ON k.key_id = ${k}::text)`;
}
