/**
 * Storage quotas in PostgreSQL (migrations/0050): the limits, the usage, and the reservations of
 * uploads in progress. Exact across gateways and connections: a reservation is decided under a
 * transaction-scoped advisory lock per quota subject (repository before principal, so two uploads
 * never wait on each other crosswise), reading the catalog's usage and the other live reservations
 * afresh in one statement; the catalog insert that publishes an upload deletes its reservation in
 * the same statement (storage-adapter/catalog/catalog.ts), so a reader of both in one snapshot sees
 * the bytes once, as a row or as a reservation. A reservation is renewed while its upload runs; one
 * whose gateway died stops counting `reservationTtlMs` after its last renewal and is deleted by the
 * next reservation that meets it.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { withTransaction } from '../../lib/transaction.ts';
import { CURSORS, decodeCursor, encodeCursor, type Page, type PageRequest, pageLimit } from '../auth/page.ts';
import { nextReservationBytes, type QuotaScope, type QuotaState, quotaExceeded, quotaRefusal } from './quota-check.ts';

/** Class id of the quota advisory locks (two-int4 form, a lock space of its own: 'ARKQ'). */
const QUOTA_LOCK_CLASS = 0x41524b51;
/** How long a reservation counts after its last renewal: the bound on a crashed gateway's holdings. */
export const DEFAULT_RESERVATION_TTL_MS = 60_000;
/** A chunked upload's reservation grows by this much at a time (one round trip per step). */
export const DEFAULT_RESERVATION_STEP_BYTES = 8 * 1024 * 1024;

/** Which catalog rows and reservations count against a subject ($1). */
const FILTERS: Record<QuotaScope, { readonly artifacts: string; readonly reservations: string }> = {
  repository: { artifacts: 'repository = $1', reservations: 'repository = $1' },
  principal: { artifacts: 'published_by = $1::uuid', reservations: 'principal_id = $1::uuid' },
};
/**
 * Stored and reserved bytes in one statement, so in one snapshot: a publish that commits between two
 * statements (read committed) would be counted in neither, its row not yet seen and its reservation
 * already gone, and a concurrent reservation could take the same room twice.
 *
 * Stored: each blob once per repository (`sha256` is the blob). Reserved: an ordinary reservation
 * counts its bytes; one pinned to a blob (`sha256`) counts nothing while the subject's catalog rows
 * in its repository hold that blob and it is no larger (more bytes cannot be that blob, whatever
 * digest they declare), and those pinned to the same blob count once, the largest (they publish
 * one blob). Reservation `$2` is left out; `$3, $4, $5` (repository, sha256, bytes; bytes
 * null for none) is the one being decided, and `with_candidate` is the reserved bytes with it.
 */
const USAGE_SQL: Record<QuotaScope, string> = {
  repository: usageSql(FILTERS.repository),
  principal: usageSql(FILTERS.principal),
};

function usageSql(filter: (typeof FILTERS)[QuotaScope]): string {
  return `WITH stored AS (SELECT DISTINCT repository, sha256, size_bytes FROM arkvory_artifacts WHERE ${filter.artifacts}),
     held AS (SELECT repository, sha256, bytes, false AS candidate FROM arkvory_quota_reservations
               WHERE ${filter.reservations} AND expires_at > now() AND id IS DISTINCT FROM $2::uuid
              UNION ALL
              SELECT $3::text, $4::text, $5::bigint, true WHERE $5::bigint IS NOT NULL),
     counted AS (SELECT * FROM held h
                  WHERE h.sha256 IS NULL
                     OR NOT EXISTS (SELECT 1 FROM stored s
                                     WHERE s.repository = h.repository AND s.sha256 = h.sha256 AND h.bytes <= s.size_bytes)),
     pinned AS (SELECT max(bytes) FILTER (WHERE NOT candidate) AS without_candidate, max(bytes) AS with_candidate
                  FROM counted WHERE sha256 IS NOT NULL GROUP BY repository, sha256)
SELECT (SELECT coalesce(sum(size_bytes), 0) FROM stored)::text AS stored,
       ((SELECT coalesce(sum(bytes) FILTER (WHERE NOT candidate), 0) FROM counted WHERE sha256 IS NULL)
        + (SELECT coalesce(sum(without_candidate), 0) FROM pinned))::text AS reserved,
       ((SELECT coalesce(sum(bytes), 0) FROM counted WHERE sha256 IS NULL)
        + (SELECT coalesce(sum(with_candidate), 0) FROM pinned))::text AS with_candidate`;
}

export interface ReservationRequest {
  readonly repository: string;
  /** The uploading principal; null for none (then only the repository's quota applies). */
  readonly principalId: string | null;
  readonly bytes: number;
  /**
   * The blob the bytes are declared to be (lowercase hex): the reservation is pinned to it and costs
   * nothing to a quota that already counts it in `repository`. Undefined: the bytes count.
   */
  readonly sha256?: string | undefined;
}

/** An upload's claim on its quotas, from before its body is read until it is published or fails. */
export interface QuotaReservation {
  readonly id: string;
  /** Bytes reserved now. */
  readonly bytes: number;
  /** Grows the reservation to cover `totalBytes` (a chunked upload); rejects with `quota_exceeded` when that would not fit. */
  ensure(totalBytes: number): Promise<void>;
  /** Gives it back and stops renewing it; a no-op once publish settled it. Idempotent. */
  release(): Promise<void>;
}

/** One quota with its usage, or (no limit set) the usage alone. */
export interface QuotaUsage {
  readonly scope: QuotaScope;
  readonly subject: string;
  readonly limitBytes: number | null;
  readonly storedBytes: number;
  readonly reservedBytes: number;
  /** limit − stored − reserved, at least 0; null without a limit. */
  readonly remainingBytes: number | null;
}

export interface StorageQuotas {
  /**
   * Reserves `bytes` against every quota that applies; undefined when none does; rejects with
   * `quota_exceeded`.
   */
  reserve(request: ReservationRequest): Promise<QuotaReservation | undefined>;
  /**
   * Gives back reservation `id` if it exists (an aborted multipart session's); `on`: the transaction
   * that aborts the session, so the two end together.
   */
  release(id: string, on?: Queryable): Promise<void>;
  /**
   * Whether reservation `id` exists, counts (not past its expiry) and holds at least `bytes`; when it
   * does, it counts for at least its time to live from now (its bytes are about to be committed).
   */
  holds(id: string, bytes: number): Promise<boolean>;
  /**
   * Keeps reservation `id` counting until the returned function is called: its expiry is moved to
   * its time to live from now, at a third of it, never earlier than it was. For a decision that is
   * not an upload's own `reserve` (which renews itself): a multipart completion's bytes may take
   * longer to commit than its reservation's time to live or its session's expiry.
   */
  keep(id: string): () => void;
  /**
   * Sets reservation `id` to `request` if that fits every quota that applies, its own bytes left out
   * (a multipart completion's decision on its assembled bytes, under its session's id); not renewed
   * here: its caller `keep`s it until it is settled or given back. Rejects with `quota_exceeded`.
   */
  reserveAs(id: string, request: ReservationRequest): Promise<void>;
  /** Rejects with `quota_exceeded` when `bytes` would not fit now; reserves nothing (a multipart session's declared size). */
  check(request: ReservationRequest): Promise<void>;
  /**
   * Adds a part of `partBytes` just recorded to multipart session `sessionId`'s reservation, until
   * the session's expiry, while it is open: at most the bytes of the parts it holds (a replaced part
   * may lower it). The part's own reservation decided the room; this carries only bytes granted,
   * never those of parts stored while no quota applied (its completion decides those). `on`: the
   * transaction recording the part, so the part is held from the instant it is recorded.
   */
  holdSessionParts(
    sessionId: string,
    request: Omit<ReservationRequest, 'bytes'>,
    partBytes: number,
    on?: Queryable,
  ): Promise<void>;
  /**
   * Keeps multipart session `sessionId`'s hold counting until its completion ends (the worker's
   * outcome deletes it, in the transaction that records it): no longer only until the session's
   * expiry, which a completion queued, waiting out a store failure or still assembling outlives.
   * `on`: the transaction that queues the completion.
   */
  holdUntilCompleted(sessionId: string, on?: Queryable): Promise<void>;
  /** Every quota set, with its usage. */
  list(): Promise<QuotaUsage[]>;
  /**
   * One page of the quotas set, repositories first, each with its usage (policy/auth/page.ts: a bad
   * `limit` or cursor is `invalid_request`). Each quota's usage is a query of its own, so a listing
   * is paged like every other: all at once, thousands of principal quotas made one request run
   * thousands of queries.
   */
  listPage(page?: PageRequest): Promise<Page<QuotaUsage>>;
  /**
   * One subject's usage, and its limit if one is set; undefined when the repository (by name) or
   * principal (by id) does not exist and no quota is set for it (a mistyped name, which would
   * otherwise read as an empty subject). A quota row its subject no longer backs is still shown, as
   * `list` shows it, so it can be seen and unset.
   */
  show(scope: QuotaScope, subject: string): Promise<QuotaUsage | undefined>;
  /** Sets the limit; false when the repository (by name) or principal (by id) does not exist. */
  set(scope: QuotaScope, subject: string, limitBytes: number): Promise<boolean>;
  /** Removes the limit; false when none was set. */
  remove(scope: QuotaScope, subject: string): Promise<boolean>;
  /** The subject a quota of `scope` is kept under: the repository name, or a principal's id (by name or id); undefined when there is none. */
  subjectOf(scope: QuotaScope, nameOrId: string): Promise<string | undefined>;
}

export interface StorageQuotaOptions {
  readonly reservationTtlMs?: number;
  readonly stepBytes?: number;
  /** Renewal timers; tests may inject theirs. */
  readonly setInterval?: (fn: () => void, ms: number) => { unref?(): unknown };
  readonly clearInterval?: (handle: never) => void;
}

type Queryable = Pick<pg.ClientBase, 'query'>;

/** A query finding subject `$2` (a repository by name, a principal by id) where it is kept. */
const SUBJECT_EXISTS: Record<QuotaScope, string> = {
  repository: 'SELECT 1 FROM arkvory_repositories WHERE name = $2::text',
  principal: 'SELECT 1 FROM arkvory_principals WHERE id = $2::text::uuid',
};

/**
 * A subject's stored and reserved bytes, read at one instant (`USAGE_SQL`); `except` is left out of
 * the reserved, and `withCandidateBytes` is the reserved with `candidate` too.
 */
async function usageBytes(
  client: Queryable,
  scope: QuotaScope,
  subject: string,
  except: string | null,
  candidate?: ReservationRequest,
): Promise<{ storedBytes: number; reservedBytes: number; withCandidateBytes: number }> {
  const { rows } = await client.query<{ stored: string; reserved: string; with_candidate: string }>(USAGE_SQL[scope], [
    subject,
    except,
    candidate?.repository ?? null,
    candidate?.sha256 ?? null,
    candidate?.bytes ?? null,
  ]);
  return {
    storedBytes: Number(rows[0]!.stored),
    reservedBytes: Number(rows[0]!.reserved),
    withCandidateBytes: Number(rows[0]!.with_candidate),
  };
}

/** As arkvory_repositories.name (0002): a quota may name a repository before it exists. */
const REPOSITORY_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A principal subject must be an id: a name would silently never match `published_by`. */
export function isPrincipalId(subject: string): boolean {
  return UUID.test(subject);
}

export function createStorageQuotas(pool: pg.Pool, options: StorageQuotaOptions = {}): StorageQuotas {
  const ttlMs = options.reservationTtlMs ?? DEFAULT_RESERVATION_TTL_MS;
  const stepBytes = options.stepBytes ?? DEFAULT_RESERVATION_STEP_BYTES;
  const every = options.setInterval ?? setInterval;
  const stopEvery = (options.clearInterval ?? clearInterval) as (handle: unknown) => void;

  /** The quotas that apply, locked in a fixed order (repository, then principal) for this transaction. */
  const lockedStates = async (
    client: pg.PoolClient,
    request: ReservationRequest,
    except: string | null,
  ): Promise<QuotaState[]> => {
    const { rows } = await client.query<{ scope: QuotaScope; subject: string; limit_bytes: string }>(
      `SELECT scope, subject, limit_bytes::text FROM arkvory_storage_quotas
        WHERE (scope = 'repository' AND subject = $1) OR (scope = 'principal' AND subject = $2)
        ORDER BY scope DESC`,
      [request.repository, request.principalId ?? ''],
    );
    const states: QuotaState[] = [];
    for (const row of rows) {
      await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [
        QUOTA_LOCK_CLASS,
        `${row.scope}:${row.subject}`,
      ]);
      const usage = await usageBytes(client, row.scope, row.subject, except, request);
      states.push({
        scope: row.scope,
        subject: row.subject,
        limitBytes: Number(row.limit_bytes),
        storedBytes: usage.storedBytes,
        reservedBytes: usage.reservedBytes,
        // Pinned to a blob, it adds what the subject does not already count (or hold reserved).
        ...(request.sha256 !== undefined ? { addedBytes: usage.withCandidateBytes - usage.reservedBytes } : {}),
      });
    }
    return states;
  };

  /** Sets reservation `id` to `bytes` if that fits every quota (under their locks); throws `quota_exceeded`. */
  const claim = (id: string, request: ReservationRequest, isNew: boolean): Promise<boolean> =>
    withTransaction(pool, async (client) => {
      const states = await lockedStates(client, request, id);
      if (states.length === 0) return false;
      const refusal = quotaRefusal(states, request.bytes);
      if (refusal) throw quotaExceeded(refusal);
      if (isNew)
        await client.query(
          `DELETE FROM arkvory_quota_reservations
            WHERE expires_at <= now() AND (repository = $1 OR principal_id = $2::uuid)`,
          [request.repository, request.principalId],
        );
      await client.query(
        `INSERT INTO arkvory_quota_reservations (id, repository, principal_id, bytes, expires_at, sha256)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5::double precision / 1000), $6)
         ON CONFLICT (id) DO UPDATE SET bytes = EXCLUDED.bytes, sha256 = EXCLUDED.sha256,
           expires_at = greatest(arkvory_quota_reservations.expires_at, EXCLUDED.expires_at)`,
        [id, request.repository, request.principalId, request.bytes, ttlMs, request.sha256 ?? null],
      );
      return true;
    });

  /** The size of the blob `request` is pinned to, when its repository holds it. */
  const heldBlobBytes = async (request: ReservationRequest): Promise<number | undefined> => {
    const { rows } = await pool.query<{ size_bytes: string }>(
      'SELECT size_bytes::text FROM arkvory_artifacts WHERE sha256 = $1 AND repository = $2 LIMIT 1',
      [request.sha256, request.repository],
    );
    return rows[0] ? Number(rows[0].size_bytes) : undefined;
  };

  /** Renews reservation `id` every third of its time to live until stopped; a failed renewal is retried at the next tick. */
  const renewing = (id: string): (() => void) => {
    const renewal = every(() => {
      pool
        .query(
          `UPDATE arkvory_quota_reservations
              SET expires_at = greatest(expires_at, now() + make_interval(secs => $2::double precision / 1000))
            WHERE id = $1`,
          [id, ttlMs],
        )
        .catch(() => {});
    }, ttlMs / 3);
    renewal.unref?.();
    return () => stopEvery(renewal);
  };

  const release = async (id: string, on: Queryable = pool): Promise<void> => {
    await on.query('DELETE FROM arkvory_quota_reservations WHERE id = $1', [id]);
  };

  const usageOf = async (scope: QuotaScope, subject: string, limitBytes: number | null): Promise<QuotaUsage> => {
    const { storedBytes: stored, reservedBytes: reserved } = await usageBytes(pool, scope, subject, null);
    return {
      scope,
      subject,
      limitBytes,
      storedBytes: stored,
      reservedBytes: reserved,
      remainingBytes: limitBytes === null ? null : Math.max(0, limitBytes - stored - reserved),
    };
  };

  return {
    release,
    async holds(id, bytes) {
      const { rowCount } = await pool.query(
        `UPDATE arkvory_quota_reservations
            SET expires_at = greatest(expires_at, now() + make_interval(secs => $3::double precision / 1000))
          WHERE id = $1 AND expires_at > now() AND bytes >= $2`,
        [id, bytes, ttlMs],
      );
      return (rowCount ?? 0) > 0;
    },
    keep: renewing,
    async reserveAs(id, request) {
      await claim(id, request, true);
    },
    async check(request) {
      await withTransaction(pool, async (client) => {
        const refusal = quotaRefusal(await lockedStates(client, request, null), request.bytes);
        if (refusal) throw quotaExceeded(refusal);
      });
    },
    async holdSessionParts(sessionId, request, partBytes, on = pool) {
      await on.query(
        `INSERT INTO arkvory_quota_reservations (id, repository, principal_id, bytes, expires_at)
         SELECT $1, $2, $3,
                least((SELECT coalesce(sum(size_bytes), 0) FROM arkvory_upload_parts WHERE session_id = $1),
                      coalesce((SELECT bytes FROM arkvory_quota_reservations WHERE id = $1 AND expires_at > now()), 0)
                        + $4::bigint),
                s.expires_at
           FROM arkvory_upload_sessions s WHERE s.id = $1 AND s.state = 'open'
         ON CONFLICT (id) DO UPDATE SET bytes = EXCLUDED.bytes, expires_at = EXCLUDED.expires_at`,
        [sessionId, request.repository, request.principalId, partBytes],
      );
    },
    async holdUntilCompleted(sessionId, on = pool) {
      await on.query(
        `UPDATE arkvory_quota_reservations SET expires_at = 'infinity' WHERE id = $1 AND expires_at > now()`,
        [sessionId],
      );
    },
    async reserve(request) {
      // Most uploads meet no quota: one plain query, no transaction, decides that.
      const { rowCount } = await pool.query(
        `SELECT 1 FROM arkvory_storage_quotas
          WHERE (scope = 'repository' AND subject = $1) OR (scope = 'principal' AND subject = $2)`,
        [request.repository, request.principalId ?? ''],
      );
      if (!rowCount) return undefined;
      const id = randomUUID();
      if (!(await claim(id, request, true))) return undefined;
      let bytes = request.bytes;
      let released = false;
      const stopRenewing = renewing(id);
      /** Sets the reservation to `to` if that fits; false when refused, unless `last` (then it rejects). */
      const grow = async (to: number, last: boolean): Promise<boolean> => {
        try {
          await claim(id, { ...request, bytes: to }, false);
          bytes = to;
          return true;
        } catch (err) {
          if (last || (err as { code?: unknown }).code !== 'quota_exceeded') throw err;
          return false;
        }
      };
      return {
        id,
        get bytes() {
          return bytes;
        },
        async ensure(totalBytes) {
          if (totalBytes <= bytes) return;
          const step = nextReservationBytes(totalBytes, stepBytes);
          if (await grow(step, step === totalBytes)) return;
          // The step does not fit. A pinned reservation grows to its blob's size when the repository
          // holds it (free to a quota that counts it: one round trip for the rest of the blob), any
          // other exactly to the bytes received.
          const blobBytes = request.sha256 === undefined ? undefined : await heldBlobBytes(request);
          if (blobBytes !== undefined && blobBytes > totalBytes && blobBytes < step && (await grow(blobBytes, false)))
            return;
          await grow(totalBytes, true);
        },
        async release() {
          if (released) return;
          released = true;
          stopRenewing();
          await release(id);
        },
      };
    },
    async list() {
      const { rows } = await pool.query<{ scope: QuotaScope; subject: string; limit_bytes: string }>(
        'SELECT scope, subject, limit_bytes::text FROM arkvory_storage_quotas ORDER BY scope DESC, subject',
      );
      const out: QuotaUsage[] = [];
      for (const row of rows) out.push(await usageOf(row.scope, row.subject, Number(row.limit_bytes)));
      return out;
    },
    async listPage(page = {}) {
      const limit = pageLimit(page.limit);
      const after = decodeCursor(page.cursor, CURSORS.quotas);
      const { rows } = await pool.query<{ scope: QuotaScope; subject: string; limit_bytes: string }>(
        `SELECT scope, subject, limit_bytes::text FROM arkvory_storage_quotas
          WHERE $1::text IS NULL OR scope::text < $1 OR (scope::text = $1 AND subject > $2)
          ORDER BY scope DESC, subject LIMIT $3`,
        [after?.[0] ?? null, after?.[1] ?? null, limit + 1],
      );
      const items: QuotaUsage[] = [];
      for (const row of rows.slice(0, limit))
        items.push(await usageOf(row.scope, row.subject, Number(row.limit_bytes)));
      const last = items[items.length - 1];
      return {
        items,
        nextCursor: rows.length > limit && last ? encodeCursor(CURSORS.quotas, [last.scope, last.subject]) : null,
      };
    },
    async show(scope, subject) {
      const { rows } = await pool.query<{ limit_bytes: string | null; found: boolean }>(
        `SELECT (SELECT limit_bytes::text FROM arkvory_storage_quotas WHERE scope = $1 AND subject = $2) AS limit_bytes,
                EXISTS (${SUBJECT_EXISTS[scope]}) AS found`,
        [scope, subject],
      );
      const { limit_bytes: limit, found } = rows[0]!;
      if (!found && limit === null) return undefined;
      return usageOf(scope, subject, limit === null ? null : Number(limit));
    },
    async set(scope, subject, limitBytes) {
      // In one statement: a subject deleted meanwhile gets no quota either.
      const exists = SUBJECT_EXISTS[scope];
      const result = await pool.query(
        `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) SELECT $1::text, $2::text, $3::bigint WHERE EXISTS (${exists})
         ON CONFLICT (scope, subject) DO UPDATE SET limit_bytes = EXCLUDED.limit_bytes, updated_at = now()`,
        [scope, subject, limitBytes],
      );
      return (result.rowCount ?? 0) > 0;
    },
    async subjectOf(scope, nameOrId) {
      if (scope === 'repository') return REPOSITORY_NAME.test(nameOrId) ? nameOrId : undefined;
      const { rows } = await pool.query<{ id: string }>(
        `SELECT id::text AS id FROM arkvory_principals WHERE ${isPrincipalId(nameOrId) ? 'id = $1::uuid' : 'name = $1'}`,
        [nameOrId],
      );
      return rows[0]?.id;
    },
    async remove(scope, subject) {
      const result = await pool.query('DELETE FROM arkvory_storage_quotas WHERE scope = $1 AND subject = $2', [
        scope,
        subject,
      ]);
      return (result.rowCount ?? 0) > 0;
    },
  };
}
