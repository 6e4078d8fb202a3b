/**
 * The single multipart completion worker of a database. It holds the `worker` barrier on a
 * connection of its own; a second instance logs `worker.standby` once and tries the lock every 5 s,
 * taking over without a restart when the first stops. Jobs are claimed with FOR UPDATE SKIP LOCKED;
 * jobs left `running` by a worker that died are queued again when the lock is taken. When
 * PostgreSQL drops out of reach during a job (nothing is visible before the catalog insert commits),
 * the job is not failed: it is queued again once the database answers and retried (up to maxAttempts).
 * Queued jobs run in round robin across the principals that opened their sessions (fair-turns.ts),
 * not first in, first out. Every 30 s it also expires sessions past their TTL and deletes those
 * finished more than FINISHED_SESSION_KEEP_DAYS ago.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import { isUnreachable } from '../server/database.ts';
import { tryLockExclusive, tryLockShared } from '../../policy/lease/barriers.ts';
import type { Catalog } from '../../storage-adapter/catalog/catalog.ts';
import type { ArtifactStore } from '../../storage-adapter/store.ts';
import { assembleJob, type Job } from '../../storage-adapter/multipart/assemble.ts';
import { FINISHED_SESSION_KEEP_DAYS, type UploadSessions } from '../../storage-adapter/multipart/sessions.ts';
import { withTransaction } from '../../lib/transaction.ts';
import { currentUrl, type ConnectionUrl } from '../../lib/connection-url.ts';
import { FairTurns, type QueueHead } from './fair-turns.ts';

export interface CompletionWorkerOptions {
  pool: pg.Pool;
  databaseUrl: ConnectionUrl;
  store: ArtifactStore;
  catalog: Catalog;
  sessions: UploadSessions;
  log: Logger;
  /** Also take the shared maintenance barrier (a separate worker process does; the writer already holds it). */
  holdMaintenanceBarrier: boolean;
  standbyRetryMs?: number;
  pollMs?: number;
  expirySweepMs?: number;
  maxAttempts?: number;
  /** Pause before the next cycle after PostgreSQL was out of reach. */
  unreachableRetryMs?: number;
}

export class CompletionWorker {
  readonly #o: CompletionWorkerOptions;
  #client: pg.Client | undefined;
  #active = false;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #abort = new AbortController();
  #lastSweep = 0;
  /** A cycle lost PostgreSQL: a job may be left `running` by this worker; queue it again first. */
  #requeueOwn = false;
  readonly #turns = new FairTurns();

  constructor(options: CompletionWorkerOptions) {
    this.#o = options;
  }

  get isActive(): boolean {
    return this.#active;
  }

  async start(): Promise<void> {
    this.#client = new pg.Client({
      connectionString: currentUrl(this.#o.databaseUrl),
      application_name: 'arkvory-worker-lock',
      keepAlive: true,
    });
    this.#client.on('error', (err) =>
      this.#o.log.error({ err: { message: err.message } }, 'worker lock connection failed; stopping work'),
    );
    await this.#client.connect();
    if (this.#o.holdMaintenanceBarrier && !(await tryLockShared(this.#client, 'maintenance'))) {
      throw new Error('offline maintenance holds the maintenance barrier; start the worker after it finishes');
    }
    await this.#tryTakeOver(true);
  }

  async #tryTakeOver(first: boolean): Promise<void> {
    if (this.#stopped) return;
    let got = false;
    try {
      got = await tryLockExclusive(this.#client!, 'worker');
    } catch (err) {
      this.#o.log.warn({ err: { message: (err as Error).message } }, 'worker lock attempt failed');
    }
    if (!got) {
      if (first)
        this.#o.log.info(
          { event: 'worker.standby' },
          'worker.standby: another completion worker is active; retrying every 5 s',
        );
      this.#timer = setTimeout(() => void this.#tryTakeOver(false), this.#o.standbyRetryMs ?? 5000);
      return;
    }
    this.#active = true;
    const requeued = await this.#o.pool.query(
      `UPDATE arkvory_upload_jobs SET state = 'queued', updated_at = now() WHERE state = 'running'`,
    );
    this.#o.log.info({ event: 'worker.active', requeued: requeued.rowCount }, 'completion worker active');
    this.#schedule(0);
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#running = this.#tick().finally(() => {
        this.#running = undefined;
      });
    }, delayMs);
  }

  async #tick(): Promise<void> {
    let worked = false;
    let unreachable = false;
    try {
      if (this.#requeueOwn) {
        // This worker holds the exclusive worker lock and runs nothing now: every `running` job is its own.
        const requeued = await this.#o.pool.query(
          `UPDATE arkvory_upload_jobs SET state = 'queued', updated_at = now() WHERE state = 'running'`,
        );
        this.#requeueOwn = false;
        this.#o.log.info(
          { event: 'worker.resumed', requeued: requeued.rowCount },
          'PostgreSQL reachable again; interrupted jobs queued again',
        );
      }
      if (Date.now() - this.#lastSweep >= (this.#o.expirySweepMs ?? 30_000)) {
        this.#lastSweep = Date.now();
        const expired = await this.#o.sessions.expire();
        if (expired) this.#o.log.info({ expired }, 'expired upload sessions removed');
        const pruned = await this.#o.sessions.prune();
        if (pruned)
          this.#o.log.info(
            { pruned, keepDays: FINISHED_SESSION_KEEP_DAYS },
            'upload sessions finished past their retention deleted',
          );
      }
      const job = await this.#claim();
      if (job) {
        worked = true;
        await this.#run(job);
      }
    } catch (err) {
      if (isUnreachable(err)) {
        unreachable = true;
        if (!this.#requeueOwn)
          this.#o.log.warn(
            {
              event: 'worker.db_unreachable',
              err: { message: (err as Error).message, code: (err as { code?: string }).code },
            },
            'a completion cycle lost its connection; the interrupted job is retried once PostgreSQL answers',
          );
        this.#requeueOwn = true;
      } else {
        this.#o.log.error({ err }, 'completion worker cycle failed');
      }
    }
    this.#schedule(unreachable ? (this.#o.unreachableRetryMs ?? 1000) : worked ? 0 : (this.#o.pollMs ?? 250));
  }

  async #claim(): Promise<Job | undefined> {
    // Each principal's oldest queued job; the round robin picks among them. One active worker
    // claims (the exclusive worker lock), so the head read here is still queued when claimed.
    const heads = await this.#o.pool.query<QueueHead>(
      `SELECT DISTINCT ON (COALESCE(s.principal_id::text, '')) j.id::text AS "jobId", COALESCE(s.principal_id::text, '') AS principal
       FROM arkvory_upload_jobs j JOIN arkvory_upload_sessions s ON s.id = j.session_id
       WHERE j.state = 'queued'
       ORDER BY COALESCE(s.principal_id::text, ''), j.id`,
    );
    const chosen = this.#turns.next(heads.rows);
    if (!chosen) return undefined;
    const r = await this.#o.pool.query(
      `UPDATE arkvory_upload_jobs SET state = 'running', attempts = attempts + 1, updated_at = now()
       WHERE id = $1 AND state = 'queued'
       RETURNING id::text, session_id, parts, attempts`,
      [chosen.jobId],
    );
    const row = r.rows[0];
    return row ? { id: row.id, sessionId: row.session_id, parts: row.parts, attempts: row.attempts } : undefined;
  }

  async #run(job: Job): Promise<void> {
    const log = this.#o.log.child({ job: job.id });
    if (job.attempts > (this.#o.maxAttempts ?? 5)) {
      await this.#finish(job, 'failed', `gave up after ${job.attempts - 1} attempts`);
      return;
    }
    try {
      const { entry, assembly } = await assembleJob(
        { pool: this.#o.pool, store: this.#o.store, catalog: this.#o.catalog },
        job,
        this.#abort.signal,
      );
      await this.#finish(job, 'done', null, { sha256: entry.sha256, size: entry.sizeBytes });
      log.info({ event: 'upload.completed', sizeBytes: entry.sizeBytes, assembly }, 'multipart upload published');
    } catch (err) {
      if (this.#stopped) return; // left `running`; the next active worker queues it again
      if (isUnreachable(err)) throw err; // not the upload's fault: #tick queues the job again
      const code = (err as { code?: string }).code;
      const reason = code ? `${code}: ${(err as Error).message}` : `internal: ${(err as Error).message}`;
      await this.#finish(job, 'failed', reason);
      log.warn({ event: 'upload.failed', code }, `multipart upload failed: ${reason}`);
    }
  }

  async #finish(
    job: Job,
    state: 'done' | 'failed',
    error: string | null,
    result?: { sha256: string; size: number },
  ): Promise<void> {
    await withTransaction(this.#o.pool, async (client) => {
      await client.query('UPDATE arkvory_upload_jobs SET state = $2, error = $3, updated_at = now() WHERE id = $1', [
        job.id,
        state,
        error,
      ]);
      await client.query(
        'UPDATE arkvory_upload_sessions SET state = $2, error = $3, result_sha256 = $4, result_size = $5, finished_at = now() WHERE id = $1',
        [job.sessionId, state, error, result?.sha256 ?? null, result?.size ?? null],
      );
      // The session's storage-quota reservation ends with it: the catalog insert settled it when
      // it published, but an unchanged re-upload or a failure inserts nothing.
      await client.query('DELETE FROM arkvory_quota_reservations WHERE id = $1', [job.sessionId]);
    });
    if (state === 'done') await this.#o.sessions.removeParts(job.sessionId);
  }

  /** Stops taking jobs; a job in progress may finish within `graceMs`, else it is left for the next worker. */
  async stop(graceMs: number): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    if (this.#running) {
      const timer = setTimeout(() => this.#abort.abort(), graceMs);
      await this.#running.catch(() => {});
      clearTimeout(timer);
    }
    await this.#client?.end().catch(() => {});
  }
}
