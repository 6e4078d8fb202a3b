/**
 * Multipart upload sessions on the writer: session rows, part objects under `uploads/<session>/` on
 * the store (a directory or the static-HTTP store), and completion jobs. A part is written to a new
 * name, made durable, then recorded (replacing an earlier upload of the same number); the old one is
 * removed afterwards, so a crash leaves at most an unreferenced part (gc removes it).
 */
import { createHash, randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { ArtifactKey } from '../catalog/catalog.ts';
import { StorageError } from '../errors.ts';
import type { ByteMeter } from '../byte-meter.ts';
import type { PartStore } from '../store.ts';
import { type ListedPart, MAX_PARTS, parseListedParts, planCompletion, type ReceivedPart } from './completion-plan.ts';
import { withTransaction } from '../../lib/transaction.ts';
import { BARRIER_LOCK_CLASS, BARRIERS } from '../../lib/advisory-barriers.ts';
import {
  checkAssembledSize,
  checkPartCount,
  checkSessionCount,
  partBound,
  type MultipartLimits,
  type StoredBytes,
} from './bounds.ts';

/** Class id of the per-principal advisory locks (two-int4 form, a lock space of its own: 'ARKM'). */
export const PRINCIPAL_LOCK_CLASS = 0x41524b4d;
/**
 * Days a finished session (done, failed, aborted, expired) is kept, so a client polling for its
 * outcome still finds it; then it goes with its parts' rows and job (docs/multipart-and-maintenance.md).
 */
export const FINISHED_SESSION_KEEP_DAYS = 7;
/** Sessions deleted per statement, and statements per sweep: a backlog drains without holding up jobs. */
const PRUNE_BATCH = 1000;
const PRUNE_BATCHES_PER_SWEEP = 10;

/** States whose parts are stored and not yet assembled (and that count as open sessions). */
const PENDING_STATES = `('open', 'completing')`;

/**
 * A row's state as of now, on PostgreSQL's clock (the sweep's): an open session past its expiry is
 * `expired` to every route from that instant, not only once the 30 s sweep has marked it.
 */
const STATE_NOW = `CASE WHEN state = 'open' AND expires_at <= now() THEN 'expired' ELSE state END AS state_now`;

/**
 * The completion job of session `id` if it lists exactly `listed` (the same parts, in order, with
 * the same sha256): a completion asked for again. Read from the job, as the session's parts rows
 * are removed once it has ended.
 */
async function sameCompletion(
  client: pg.PoolClient,
  id: string,
  listed: readonly ListedPart[],
): Promise<{ jobId: string; totalBytes: number } | undefined> {
  const { rows } = await client.query<{ id: string; parts: ReceivedPart[] }>(
    'SELECT id::text, parts FROM arkvory_upload_jobs WHERE session_id = $1',
    [id],
  );
  const job = rows[0];
  if (!job || job.parts.length !== listed.length) return undefined;
  const same = job.parts.every((p, i) => p.partNumber === listed[i]!.partNumber && p.sha256 === listed[i]!.sha256);
  return same ? { jobId: job.id, totalBytes: job.parts.reduce((sum, p) => sum + p.sizeBytes, 0) } : undefined;
}

/** Serialises the checks of one principal's bounds with the writes they guard (a transaction's lock). */
async function lockPrincipal(client: pg.PoolClient, principalId: string | null): Promise<void> {
  await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [PRINCIPAL_LOCK_CLASS, principalId ?? '']);
}

/** A SQL condition on `principal_id` that can use the index (IS NOT DISTINCT FROM cannot). */
function principalIs(column: string, principalId: string | null, param: number): string {
  return principalId === null ? `${column} IS NULL AND $${param}::uuid IS NULL` : `${column} = $${param}`;
}

export type SessionState = 'open' | 'completing' | 'done' | 'failed' | 'aborted' | 'expired';

export interface UploadSession {
  id: string;
  key: ArtifactKey;
  contentType: string;
  expectedSize: number | null;
  expectedSha256: string | null;
  state: SessionState;
  error: string | null;
  resultSha256: string | null;
  resultSize: number | null;
  createdAt: string;
  expiresAt: string;
  parts: ReceivedPart[];
}

/**
 * Who asks about a session: its repository and the principal that opened it. A session belongs to
 * its principal: any other one (even a writer of the same repository) is told `not_found`.
 */
export interface SessionScope {
  repository: string;
  principalId: string | null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function toSession(row: Record<string, unknown>, parts: ReceivedPart[]): UploadSession {
  return {
    id: row.id as string,
    key: {
      repository: row.repository as string,
      kind: row.kind as ArtifactKey['kind'],
      name: row.name as string,
      version: row.version as string,
      asset: row.asset as string,
    },
    contentType: row.content_type as string,
    expectedSize: row.expected_size === null ? null : Number(row.expected_size),
    expectedSha256: (row.expected_sha256 as string | null) ?? null,
    state: (row.state_now ?? row.state) as SessionState,
    error: (row.error as string | null) ?? null,
    resultSha256: (row.result_sha256 as string | null) ?? null,
    resultSize: row.result_size === null ? null : Number(row.result_size),
    createdAt: (row.created_at as Date).toISOString(),
    expiresAt: (row.expires_at as Date).toISOString(),
    parts,
  };
}

/** Throws the error a part sent to a session in `state` (as of now: STATE_NOW) gets, unless it is open. */
function checkTakesParts(state: SessionState): void {
  if (state === 'expired') throw new StorageError('upload_expired');
  if (state !== 'open') throw new StorageError('conflict', `The upload is ${state}; it takes no more parts.`);
}

export class UploadSessions {
  readonly #pool: pg.Pool;
  readonly #parts: PartStore;
  readonly #ttlSeconds: number;
  readonly #limits: MultipartLimits;

  constructor(options: { pool: pg.Pool; parts: PartStore; ttlSeconds: number; limits: MultipartLimits }) {
    this.#pool = options.pool;
    this.#parts = options.parts;
    this.#ttlSeconds = options.ttlSeconds;
    this.#limits = options.limits;
  }

  /** Parts stored for `principalId` (bytes and count), and for session `id`, not counting part `partNumber`. */
  async #storedBytes(
    db: pg.Pool | pg.PoolClient,
    id: string,
    partNumber: number,
    principalId: string | null,
  ): Promise<StoredBytes> {
    const r = await db.query<{ session: string; principal: string; parts: number }>(
      `SELECT COALESCE(SUM(p.size_bytes) FILTER (WHERE p.session_id = $1), 0)::text AS session,
              COALESCE(SUM(p.size_bytes), 0)::text AS principal, count(*)::int AS parts
       FROM arkvory_upload_parts p JOIN arkvory_upload_sessions s ON s.id = p.session_id
       WHERE ${principalIs('s.principal_id', principalId, 3)} AND s.state IN ${PENDING_STATES}
         AND NOT (p.session_id = $1 AND p.part_number = $2)`,
      [id, partNumber, principalId],
    );
    const row = r.rows[0]!;
    return { session: Number(row.session), principal: Number(row.principal), principalParts: row.parts };
  }

  async create(
    key: ArtifactKey,
    options: {
      contentType: string;
      expectedSize?: number;
      expectedSha256?: string;
      principalId: string | null;
    },
  ): Promise<UploadSession> {
    if (options.expectedSize !== undefined && options.expectedSize > this.#limits.maxUploadBytes)
      throw new StorageError(
        'upload_too_large',
        `The declared size ${options.expectedSize} is larger than ARKVORY_MAX_UPLOAD_BYTES (${this.#limits.maxUploadBytes}).`,
      );
    const id = randomUUID();
    return withTransaction(this.#pool, async (client) => {
      await lockPrincipal(client, options.principalId);
      // Every session that still holds its parts counts, whatever its expiry, as in the part bounds:
      // a completing one until the worker ends it (a stalled worker, a store failure waited out), an
      // open one past its expiry until the sweep marks it and removes its parts.
      const open = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM arkvory_upload_sessions
         WHERE ${principalIs('principal_id', options.principalId, 1)} AND state IN ${PENDING_STATES}`,
        [options.principalId],
      );
      checkSessionCount(open.rows[0]!.n, this.#limits);
      const r = await client.query(
        `INSERT INTO arkvory_upload_sessions (id, repository, kind, name, version, asset, content_type, expected_size, expected_sha256, principal_id, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now() + make_interval(secs => $11)) RETURNING *`,
        [
          id,
          key.repository,
          key.kind,
          key.name,
          key.version,
          key.asset,
          options.contentType,
          options.expectedSize ?? null,
          options.expectedSha256 ?? null,
          options.principalId,
          this.#ttlSeconds,
        ],
      );
      return toSession(r.rows[0], []);
    });
  }

  /** The session in `scope`, or `not_found` (also for another repository's or another principal's session). */
  async get(scope: SessionScope, id: string): Promise<UploadSession> {
    if (!UUID.test(id)) throw new StorageError('not_found', 'No such upload.');
    const r = await this.#pool.query(
      `SELECT *, ${STATE_NOW} FROM arkvory_upload_sessions WHERE id = $1 AND repository = $2 AND principal_id IS NOT DISTINCT FROM $3`,
      [id, scope.repository, scope.principalId],
    );
    if (!r.rows[0]) throw new StorageError('not_found', 'No such upload.');
    // An expired session's parts are no longer its own (the sweep removes them): none are listed.
    if (r.rows[0].state_now === 'expired') return toSession(r.rows[0], []);
    const parts = await this.#pool.query<{ part_number: number; size_bytes: string; sha256: string }>(
      'SELECT part_number, size_bytes, sha256 FROM arkvory_upload_parts WHERE session_id = $1 ORDER BY part_number',
      [id],
    );
    return toSession(
      r.rows[0],
      parts.rows.map((p) => ({ partNumber: p.part_number, sizeBytes: Number(p.size_bytes), sha256: p.sha256 })),
    );
  }

  /**
   * The size of part `partNumber` as recorded now (0 when there is none), once the part number is
   * valid and the session in `scope` takes parts: what a part's storage-quota reservation leaves out.
   * Checked before that reservation, so a part to a session that is gone, ended or someone else's
   * is told so (404, 409, 410), not 507 `quota_exceeded` under a full quota.
   */
  async replaceablePartSize(scope: SessionScope, id: string, partNumber: number): Promise<number> {
    if (!Number.isInteger(partNumber) || partNumber < 1 || partNumber > MAX_PARTS)
      throw new StorageError('invalid_request', `Part numbers run from 1 to ${MAX_PARTS}.`);
    if (!UUID.test(id)) throw new StorageError('not_found', 'No such upload.');
    const r = await this.#pool.query<{ state_now: SessionState; size: string | null }>(
      `SELECT ${STATE_NOW}, (SELECT size_bytes::text FROM arkvory_upload_parts WHERE session_id = s.id AND part_number = $4) AS size
         FROM arkvory_upload_sessions s WHERE id = $1 AND repository = $2 AND principal_id IS NOT DISTINCT FROM $3`,
      [id, scope.repository, scope.principalId, partNumber],
    );
    const row = r.rows[0];
    if (!row) throw new StorageError('not_found', 'No such upload.');
    checkTakesParts(row.state_now);
    return row.size === null ? 0 : Number(row.size);
  }

  /** An open, unexpired session, or the error that says why not. */
  async #open(scope: SessionScope, id: string): Promise<UploadSession> {
    const session = await this.get(scope, id);
    checkTakesParts(session.state);
    return session;
  }

  /** Streams one part to the store while hashing (paced by `meter`); re-sending a part number replaces it. */
  async putPart(
    scope: SessionScope,
    id: string,
    partNumber: number,
    body: AsyncIterable<Uint8Array>,
    options: {
      maxBytes: number;
      expectedLength?: number;
      meter?: ByteMeter;
      /** Called with the bytes received so far before they are written (a storage-quota reservation's growth). */
      reserve?: (totalBytes: number) => Promise<void>;
      /**
       * Called in the transaction that records the part, after its row, while the session is locked
       * open: what must count the part from the instant it is recorded (its session's storage-quota
       * hold), since a completion listing it may be queued the moment this commits.
       */
      recorded?: (client: pg.PoolClient, sizeBytes: number) => Promise<void>;
      /**
       * The size of the part this one replaces, as its storage-quota reservation left it out: the
       * part is refused (409) if that part has meanwhile been replaced by a smaller one, whose
       * bytes the reservation would then not cover.
       */
      replacedBytes?: number;
      /** Called once the session and the bounds allow the part, before its body is read (100 Continue). */
      beforeBody?: () => void;
      signal?: AbortSignal;
    },
  ): Promise<ReceivedPart> {
    if (!Number.isInteger(partNumber) || partNumber < 1 || partNumber > MAX_PARTS)
      throw new StorageError('invalid_request', `Part numbers run from 1 to ${MAX_PARTS}.`);
    await this.#open(scope, id);
    // The part is bounded by what the session's and the principal's other parts already hold.
    const held = await this.#storedBytes(this.#pool, id, partNumber, scope.principalId);
    checkPartCount(held, this.#limits);
    const bound = partBound(options.maxBytes, this.#limits, held);
    if (options.expectedLength !== undefined && options.expectedLength > bound.maxBytes)
      throw bound.refuse(options.expectedLength);
    options.beforeBody?.();
    const fileName = `${String(partNumber).padStart(5, '0')}-${randomUUID()}.part`;
    const hash = createHash('sha256');
    let size = 0;
    // Checks run inside the body, so a bad part fails the write itself and nothing is kept.
    async function* checked(): AsyncGenerator<Buffer> {
      for await (const chunk of body) {
        options.signal?.throwIfAborted();
        const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
        for (let offset = 0; offset < bytes.length; ) {
          const slice = options.meter
            ? bytes.subarray(offset, offset + Math.max(1, options.meter.quantumBytes))
            : bytes.subarray(offset);
          if (options.meter) await options.meter.take(slice.length, options.signal);
          size += slice.length;
          if (size > bound.maxBytes) throw bound.refuse(size);
          if (options.reserve) await options.reserve(size);
          hash.update(slice);
          yield slice;
          offset += slice.length;
        }
      }
      if (options.expectedLength !== undefined && size !== options.expectedLength) {
        throw new StorageError(
          'invalid_request',
          `The part has ${size} bytes, its Content-Length said ${options.expectedLength}.`,
        );
      }
    }
    try {
      await this.#parts.write(id, fileName, checked(), options.signal);
    } catch (err) {
      await this.#dropRefused(id, fileName);
      // An abort or expiry while the part streamed removes the session's parts under the write (an
      // ENOENT of the store): the client is told what became of its session, not our 500.
      if (!(err instanceof StorageError)) await this.#open(scope, id);
      throw err;
    }
    const sha256 = hash.digest('hex');
    const limits = this.#limits;
    const record = () =>
      withTransaction(this.#pool, async (client) => {
        // Parts sent in parallel were each checked against what was stored when they began: the
        // check is made again under the principal's lock, where it cannot race.
        await lockPrincipal(client, scope.principalId);
        // Still open: an abort, expiry or completion since the write began wins (and waits for this
        // share lock, so none of them misses the part recorded here).
        const session = await client.query<{ state_now: SessionState }>(
          `SELECT ${STATE_NOW} FROM arkvory_upload_sessions WHERE id = $1 FOR SHARE`,
          [id],
        );
        if (!session.rows[0]) throw new StorageError('not_found', 'No such upload.');
        checkTakesParts(session.rows[0].state_now);
        await this.#checkPartKept(client, id, fileName);
        if (options.replacedBytes) {
          // Under the principal's lock: no other part of this session is recorded meanwhile.
          const old = await client.query<{ size: string }>(
            'SELECT size_bytes::text AS size FROM arkvory_upload_parts WHERE session_id = $1 AND part_number = $2',
            [id, partNumber],
          );
          if (Number(old.rows[0]?.size ?? 0) < options.replacedBytes)
            throw new StorageError(
              'conflict',
              `Part ${partNumber} was replaced by a smaller one while this one was sent; send it again.`,
            );
        }
        const stored = await this.#storedBytes(client, id, partNumber, scope.principalId);
        checkPartCount(stored, limits);
        const now = partBound(Number.MAX_SAFE_INTEGER, limits, stored);
        if (size > now.maxBytes) throw now.refuse(size);
        const recorded = await client.query<{ file_name: string }>(
          `WITH old AS (SELECT file_name FROM arkvory_upload_parts WHERE session_id = $1 AND part_number = $2)
       INSERT INTO arkvory_upload_parts (session_id, part_number, size_bytes, sha256, file_name) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (session_id, part_number) DO UPDATE SET size_bytes = EXCLUDED.size_bytes, sha256 = EXCLUDED.sha256, file_name = EXCLUDED.file_name, received_at = now()
       RETURNING (SELECT file_name FROM old) AS file_name`,
          [id, partNumber, size, sha256, fileName],
        );
        await options.recorded?.(client, size);
        return recorded;
      });
    let previous: Awaited<ReturnType<typeof record>>;
    try {
      previous = await record();
    } catch (err) {
      // Refused (or not recorded): the part written for it is nobody's. Unless the error came after
      // the COMMIT went through (the connection lost as it answered): then a row names the file.
      if (!(await this.#recordedAnyway(id, fileName))) await this.#dropRefused(id, fileName);
      throw err;
    }
    const replaced = previous.rows[0]?.file_name;
    // The new part is recorded: it stands whatever the store does with the old file, which no row
    // names any more and which the session's own removal (its end, or the sweep) takes with it.
    if (replaced && replaced !== fileName) await this.#parts.remove(id, replaced).catch(() => {});
    return { partNumber, sizeBytes: size, sha256 };
  }

  /**
   * Whether a row names `fileName` after its recording failed: a COMMIT whose answer was lost may have
   * gone through. When that cannot be told (the database still unreachable), true: a file left over
   * goes with its session, a file removed under its row would fail the upload's completion.
   */
  async #recordedAnyway(id: string, fileName: string): Promise<boolean> {
    try {
      const r = await this.#pool.query('SELECT 1 FROM arkvory_upload_parts WHERE session_id = $1 AND file_name = $2', [
        id,
        fileName,
      ]);
      return r.rowCount !== 0;
    } catch {
      return true;
    }
  }

  /**
   * Removes a part that was not recorded; once its session has ended, the session's folder too: the
   * part's write may have made it again after the session's parts were removed (an abort or expiry
   * between the part's open check and its write), and nothing else would remove it but offline gc.
   */
  async #dropRefused(id: string, fileName: string): Promise<void> {
    try {
      const r = await this.#pool.query<{ state: SessionState }>(
        'SELECT state FROM arkvory_upload_sessions WHERE id = $1',
        [id],
      );
      const state = r.rows[0]?.state;
      if (state === 'open' || state === 'completing') await this.#parts.remove(id, fileName);
      else await this.#parts.removeSession(id);
    } catch {
      // Left for the session's own removal (its end, or the sweep of its expiry) or offline gc.
    }
  }

  /**
   * Offline gc removes every part file no row names, and the row of a part is written only after
   * its file. A gateway holds the maintenance barrier on its lease connection, but one whose lease
   * connection ended (fenced) still finishes the parts it is receiving, and gc may run meanwhile.
   * So the row goes in only while this transaction holds the barrier shared (gc then waits for the
   * commit and sees the row), and only if the file is still there (no gc ran since it was written):
   * otherwise 503 `unavailable`, nothing recorded, rather than a 200 for a part that is gone.
   */
  async #checkPartKept(client: pg.PoolClient, id: string, fileName: string): Promise<void> {
    const barrier = await client.query<{ held: boolean }>('SELECT pg_try_advisory_xact_lock_shared($1, $2) AS held', [
      BARRIER_LOCK_CLASS,
      BARRIERS.maintenance,
    ]);
    if (!barrier.rows[0]!.held)
      throw new StorageError(
        'unavailable',
        'Offline maintenance (gc or scrub) holds the store; the part was not recorded. Send it again once it is done.',
      );
    if (!(await this.#parts.has(id, fileName)))
      throw new StorageError(
        'unavailable',
        'Offline maintenance removed the part before it was recorded; the part was not recorded. Send it again.',
      );
  }

  /**
   * Validates the ordered part list and queues one completion job (state `completing`). The same
   * list sent again once the session is `completing`, `done` or `failed` answers that job, queuing
   * nothing: a client whose 202 was lost retries, as S3 clients retry CompleteMultipartUpload, and
   * must learn of the completion it began, not get 409. Another list is still `conflict`. `queued`
   * runs in the transaction that queues the job, for what must begin with it (its quota hold);
   * `committed` once that transaction committed (or the same completion was found), before the
   * worker is notified: from then on the completion is under way whatever fails after.
   */
  async complete(
    scope: SessionScope,
    id: string,
    listedParts: unknown,
    options: {
      queued?: (client: pg.PoolClient) => Promise<void>;
      committed?: (job: { jobId: string; totalBytes: number; again?: true }) => void;
    } = {},
  ): Promise<{ jobId: string; totalBytes: number; again?: true }> {
    // Not an id we issue (PostgreSQL would refuse it as a uuid with a 500): no such upload.
    if (!UUID.test(id)) throw new StorageError('not_found', 'No such upload.');
    const listed = parseListedParts(listedParts);
    const queued = await withTransaction(this.#pool, async (client) => {
      const r = await client.query(
        `SELECT ${STATE_NOW}, expected_size FROM arkvory_upload_sessions WHERE id = $1 AND repository = $2 AND principal_id IS NOT DISTINCT FROM $3 FOR UPDATE`,
        [id, scope.repository, scope.principalId],
      );
      const row = r.rows[0];
      if (!row) throw new StorageError('not_found', 'No such upload.');
      if (row.state_now === 'expired') throw new StorageError('upload_expired');
      if (row.state_now !== 'open') {
        const earlier = await sameCompletion(client, id, listed);
        if (earlier) return { ...earlier, again: true as const };
        throw new StorageError('conflict', `The upload is ${row.state_now}; it cannot be completed again.`);
      }
      const parts = await client.query<{ part_number: number; size_bytes: string; sha256: string }>(
        'SELECT part_number, size_bytes, sha256 FROM arkvory_upload_parts WHERE session_id = $1',
        [id],
      );
      const plan = planCompletion(
        listed,
        parts.rows.map((p) => ({ partNumber: p.part_number, sizeBytes: Number(p.size_bytes), sha256: p.sha256 })),
        row.expected_size === null ? null : Number(row.expected_size),
      );
      // Parts stored under a higher ARKVORY_MAX_UPLOAD_BYTES are refused here, before any assembly.
      checkAssembledSize(plan.totalBytes, this.#limits);
      const job = await client.query<{ id: string }>(
        'INSERT INTO arkvory_upload_jobs (session_id, parts) VALUES ($1, $2) RETURNING id::text',
        [id, JSON.stringify(plan.parts)],
      );
      await client.query(`UPDATE arkvory_upload_sessions SET state = 'completing' WHERE id = $1`, [id]);
      await options.queued?.(client);
      return { jobId: job.rows[0]!.id, totalBytes: plan.totalBytes };
    });
    options.committed?.(queued);
    if ('again' in queued) return queued;
    await this.#pool.query(`SELECT pg_notify('arkvory_upload_jobs', $1)`, [queued.jobId]);
    return queued;
  }

  /**
   * Aborts an open, unexpired session: its parts are removed. An expired one (marked or not yet
   * swept) is `upload_expired`, as its parts and completion are: it has ended already. `ended` runs
   * in the transaction that aborts it, for what must end with it (its storage-quota hold): done
   * apart, a connection lost or a process stopped between the two left an aborted session holding
   * its bytes until its expiry.
   */
  async abort(
    scope: SessionScope,
    id: string,
    options: { ended?: (client: pg.PoolClient) => Promise<void> } = {},
  ): Promise<void> {
    if (!UUID.test(id)) throw new StorageError('not_found', 'No such upload.');
    const aborted = await withTransaction(this.#pool, async (client) => {
      const r = await client.query(
        `UPDATE arkvory_upload_sessions SET state = 'aborted', finished_at = now() WHERE id = $1 AND repository = $2 AND principal_id IS NOT DISTINCT FROM $3 AND state = 'open' AND expires_at > now() RETURNING id`,
        [id, scope.repository, scope.principalId],
      );
      if (r.rowCount) await options.ended?.(client);
      return Boolean(r.rowCount);
    });
    if (!aborted) {
      if ((await this.get(scope, id)).state === 'expired') throw new StorageError('upload_expired');
      throw new StorageError('conflict', 'Only an open upload can be aborted.');
    }
    await this.#removeEndedParts(id);
  }

  /**
   * Removes the parts of a session just ended (aborted, expired). Its end stands whatever the
   * store does: a removal that fails (the store unreachable, `rm -r` meeting a part written into
   * the folder meanwhile) leaves the part rows, and the worker's sweep (`removeLeftParts`) tries again.
   */
  async #removeEndedParts(id: string): Promise<void> {
    await this.removeParts(id).catch(() => {});
  }

  /**
   * Removes a finished session's part files, then their rows: rows left by a removal cut short
   * (a crash, a store failure) name the session to `removeLeftParts`, which tries again.
   */
  async removeParts(id: string): Promise<void> {
    await this.#parts.removeSession(id);
    await this.#pool.query('DELETE FROM arkvory_upload_parts WHERE session_id = $1', [id]);
  }

  /**
   * Removes the parts still recorded for finished sessions (a worker killed between recording an
   * outcome and removing them, an abort or expiry whose removal failed); returns how many sessions.
   * A session whose removal fails again is told to `failed` and tried at the next sweep.
   */
  async removeLeftParts(failed: (id: string, err: unknown) => void): Promise<number> {
    const r = await this.#pool.query<{ id: string }>(
      // From the parts (only pending sessions' as a rule): the sessions kept a week are many more.
      `SELECT s.id FROM (SELECT DISTINCT session_id FROM arkvory_upload_parts) p
         JOIN arkvory_upload_sessions s ON s.id = p.session_id
        WHERE s.state NOT IN ${PENDING_STATES}
        LIMIT ${PRUNE_BATCH}`,
    );
    let removed = 0;
    for (const row of r.rows) {
      try {
        await this.removeParts(row.id);
        removed++;
      } catch (err) {
        failed(row.id, err);
      }
    }
    return removed;
  }

  /**
   * Deletes sessions finished more than FINISHED_SESSION_KEEP_DAYS ago, with their job, through the
   * owner's function (migrations/0071, 0081); returns how many. One still holding part rows is kept:
   * they name its files to `removeLeftParts`, and nothing else would remove those but offline gc.
   */
  async prune(): Promise<number> {
    let pruned = 0;
    for (let i = 0; i < PRUNE_BATCHES_PER_SWEEP; i++) {
      const r = await this.#pool.query<{ n: string }>('SELECT arkvory_upload_sessions_prune($1, $2)::text AS n', [
        FINISHED_SESSION_KEEP_DAYS,
        PRUNE_BATCH,
      ]);
      const n = Number(r.rows[0]!.n);
      pruned += n;
      if (n < PRUNE_BATCH) break;
    }
    return pruned;
  }

  /** Marks open sessions past their expiry `expired` and removes their parts; returns how many. */
  async expire(): Promise<number> {
    const r = await this.#pool.query<{ id: string }>(
      `UPDATE arkvory_upload_sessions SET state = 'expired', finished_at = now() WHERE state = 'open' AND expires_at <= now() RETURNING id`,
    );
    for (const row of r.rows) await this.#removeEndedParts(row.id);
    return r.rowCount ?? 0;
  }
}
