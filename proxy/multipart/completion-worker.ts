/**
 * The single multipart completion worker of a database. It holds the `worker` barrier on a
 * connection of its own; a second instance logs `worker.standby` once and tries the lock every 5 s,
 * taking over without a restart when the first stops. A worker whose lock connection dies stops
 * claiming, aborts its job and goes back to standby. A claimed job is held by a session advisory
 * lock (class 'ARKJ') on the connection it runs with, and finishes only under its claim (state
 * `running` with the attempt count it was claimed at): a `running` job is queued again only once no
 * live connection holds its lock (at take-over, resume and every sweep), and a worker that lost it
 * can neither run it beside the new one nor overwrite its outcome. When
 * PostgreSQL drops out of reach during a job (nothing is visible before the catalog insert commits),
 * the job is not failed: it is queued again once the database answers and retried (up to maxAttempts,
 * each retry after a longer wait: retry-delay.ts). A store failure that passes (a full disk, a store
 * down or timing out) is retried the same way, past maxAttempts while its session is unexpired, its
 * parts kept (assembly-failure.ts). Before each attempt and again before it publishes, a job's
 * principal must still be enabled and hold write on the repository (completion-authority.ts).
 * Queued jobs run in round robin across the principals that opened their sessions (fair-turns.ts),
 * not first in, first out. Every 30 s it also expires sessions past their TTL and deletes those
 * finished more than FINISHED_SESSION_KEEP_DAYS ago, and removes the parts a finished session
 * still has (its removal was cut short).
 */
import type pg from 'pg';
import { PgClient } from '../../lib/pg-client.ts';
import type { Logger } from 'pino';
import { isUnreachable } from '../server/database.ts';
import { toHttpError } from '../server/http-errors.ts';
import { tryLockExclusive, tryLockShared } from '../../policy/lease/barriers.ts';
import type { Catalog } from '../../storage-adapter/catalog/catalog.ts';
import type { ArtifactStore } from '../../storage-adapter/store.ts';
import { assembleJob, type Job } from '../../storage-adapter/multipart/assemble.ts';
import { FINISHED_SESSION_KEEP_DAYS, type UploadSessions } from '../../storage-adapter/multipart/sessions.ts';
import { withTransaction } from '../../lib/transaction.ts';
import { keepIdleSession } from '../../lib/idle-session.ts';
import { currentUrl, type ConnectionUrl } from '../../lib/connection-url.ts';
import { CodedError } from '../../lib/coded-error.ts';
import { FairTurns, type QueueHead } from './fair-turns.ts';
import { DEFAULT_RETRY_DELAY_MS, retryDelayMs, retryDueSql } from './retry-delay.ts';
import { classifyAssemblyFailure, retriesAfter } from './assembly-failure.ts';
import type { StorageQuotas } from '../../policy/quota/storage-quotas.ts';
import { completionRefusal, completionRefusalOf } from './completion-authority.ts';

/** Class id of the per-job claim locks (two-int4 form, a lock space of its own: 'ARKJ'). */
const JOB_LOCK_CLASS = 0x41524b4a;
/** The job's id folded into an int4 key (ids past 2^31 share keys: a collision only delays a requeue). */
const JOB_KEY = (param: string) => `(${param}::bigint % 2147483648)::int`;
/**
 * Queues `running` jobs whose claim lock no live connection holds (the try-lock fails on a held one).
 * Only the `running` rows are tried (the CTE is materialized first): the table keeps a week of
 * finished jobs, and a lock taken for each would fill the lock table.
 */
const REQUEUE_ORPHANS = `WITH running AS MATERIALIZED (SELECT id FROM arkvory_upload_jobs WHERE state = 'running'),
  orphans AS MATERIALIZED (SELECT id FROM running WHERE pg_try_advisory_xact_lock(${JOB_LOCK_CLASS}, ${JOB_KEY('id')}))
  UPDATE arkvory_upload_jobs j SET state = 'queued', updated_at = now()
  FROM orphans o WHERE j.id = o.id AND j.state = 'running'`;

interface Claim {
  job: Job;
  /** The connection that holds the job's claim lock while it runs. */
  client: pg.Client;
  /** The store failure its last attempt was queued again for (the job's `error`), if that was one. */
  waiting: string | null;
}

export interface CompletionWorkerOptions {
  pool: pg.Pool;
  databaseUrl: ConnectionUrl;
  store: ArtifactStore;
  catalog: Catalog;
  sessions: UploadSessions;
  /**
   * Storage quotas: a completion whose session holds no live reservation (no quota applied to its
   * parts, or the session expired while it was queued) is decided by its assembled bytes before they
   * are published. Absent: none checked.
   */
  quotas?: StorageQuotas | undefined;
  log: Logger;
  /** Also take the shared maintenance barrier (a separate worker process does; the writer already holds it). */
  holdMaintenanceBarrier: boolean;
  standbyRetryMs?: number;
  pollMs?: number;
  expirySweepMs?: number;
  maxAttempts?: number;
  /** The wait before a job's second attempt, doubled for each later one (retry-delay.ts). */
  retryDelayMs?: number;
  /** Pause before the next cycle after PostgreSQL was out of reach. */
  unreachableRetryMs?: number;
}

export class CompletionWorker {
  readonly #o: CompletionWorkerOptions;
  #client: pg.Client | undefined;
  /** The lock connection's backend (pid and start), ended by this worker if it outlives its client. */
  #lockBackend: { pid: number; start: string } | undefined;
  /**
   * A connection of its own for the claim locks: not from the pool, which assembleJob needs while
   * the lock is held (ARKVORY_DATABASE_POOL_SIZE may be 1).
   */
  #claimClient: pg.Client | undefined;
  #active = false;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  /** Aborts the job in progress: on stop after the grace, or at once when the worker lock is lost. */
  #jobAbort: AbortController | undefined;
  #lastSweep = 0;
  /** A cycle lost PostgreSQL: a job may be left `running` by this worker; queue it again first. */
  #requeueOrphans = false;
  readonly #turns = new FairTurns();

  constructor(options: CompletionWorkerOptions) {
    this.#o = options;
  }

  get isActive(): boolean {
    return this.#active;
  }

  async start(): Promise<void> {
    await this.#connectLock();
    if (this.#o.holdMaintenanceBarrier && !(await tryLockShared(this.#client!, 'maintenance'))) {
      throw new Error('offline maintenance holds the maintenance barrier; start the worker after it finishes');
    }
    await this.#tryTakeOver(true);
  }

  async #connectLock(): Promise<void> {
    const client = new PgClient({
      connectionString: currentUrl(this.#o.databaseUrl),
      application_name: 'arkvory-worker-lock',
      keepAlive: true,
    });
    client.on('error', (err) => this.#lockLost(client, err));
    client.on('end', () => this.#lockLost(client, new Error('the connection ended')));
    try {
      await client.connect();
      // Idle between sweeps, yet its end gives up the worker lock (and aborts a job in progress).
      await keepIdleSession(client);
      const me = await client.query<{ pid: number; start: string }>(
        'SELECT pid, backend_start::text AS start FROM pg_stat_activity WHERE pid = pg_backend_pid()',
      );
      this.#lockBackend = me.rows[0];
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    this.#client = client;
  }

  /**
   * After a lost lock connection, the server may keep its backend (and the worker lock) until it
   * notices the peer is gone: end it, so that this or another worker can take the lock over. The
   * start time (as text: a Date would lose its microseconds) makes sure it is that backend and not
   * a later one given the same pid.
   */
  async #endStaleBackend(stale: { pid: number; start: string }): Promise<void> {
    try {
      const r = await this.#o.pool.query<{ ended: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE pid = $1 AND backend_start::text = $2`,
        [stale.pid, stale.start],
      );
      if (r.rows[0]?.ended)
        this.#o.log.warn({ pid: stale.pid }, 'ended the lingering backend of the lost worker lock connection');
    } catch (err) {
      this.#o.log.warn({ err: { message: (err as Error).message } }, 'ending the lost lock connection failed');
    }
  }

  /**
   * The lock connection died: PostgreSQL released the worker lock (and the maintenance barrier with
   * it), so another worker may take over now. Stop claiming, abort the job, and try to become
   * active again like a standby.
   */
  #lockLost(client: pg.Client, err: Error): void {
    if (this.#client !== client || this.#stopped) return;
    this.#client = undefined;
    client.end().catch(() => {});
    this.#o.log.error(
      { event: 'worker.lock_lost', err: { message: err.message }, wasActive: this.#active },
      'worker lock connection failed; stopping work until the lock is taken again',
    );
    this.#active = false;
    clearTimeout(this.#timer);
    this.#jobAbort?.abort(new Error('the worker lock was lost'));
    this.#timer = setTimeout(() => void this.#reconnect(), this.#o.standbyRetryMs ?? 5000);
  }

  async #reconnect(): Promise<void> {
    if (this.#stopped) return;
    const stale = this.#lockBackend;
    if (stale) await this.#endStaleBackend(stale);
    try {
      await this.#connectLock();
      if (this.#o.holdMaintenanceBarrier && !(await tryLockShared(this.#client!, 'maintenance')))
        throw new Error('offline maintenance holds the maintenance barrier');
    } catch (err) {
      this.#o.log.warn({ err: { message: (err as Error).message } }, 'worker lock reconnect failed; retrying');
      const client = this.#client;
      this.#client = undefined;
      await client?.end().catch(() => {});
      if (!this.#stopped) this.#timer = setTimeout(() => void this.#reconnect(), this.#o.standbyRetryMs ?? 5000);
      return;
    }
    await this.#tryTakeOver(false);
  }

  async #tryTakeOver(first: boolean): Promise<void> {
    if (this.#stopped || !this.#client) return;
    let got = false;
    try {
      got = await tryLockExclusive(this.#client, 'worker');
    } catch (err) {
      this.#o.log.warn({ err: { message: (err as Error).message } }, 'worker lock attempt failed');
    }
    if (this.#stopped || !this.#client) return; // stopped, or the connection died (#lockLost retries)
    if (!got) {
      if (first)
        this.#o.log.info(
          { event: 'worker.standby' },
          'worker.standby: another completion worker is active; retrying every 5 s',
        );
      this.#timer = setTimeout(() => void this.#tryTakeOver(false), this.#o.standbyRetryMs ?? 5000);
      return;
    }
    // A cycle of this worker from before a lost lock may still be ending its aborted job.
    await this.#running;
    if (this.#stopped || !this.#client) return;
    this.#active = true;
    // What an earlier worker left staged (a crash, or a lost lock: that job is aborted and handed back).
    await this.#o.store.clearStaging?.().catch((err: unknown) => {
      this.#o.log.warn(
        { err: { message: (err as Error).message } },
        'clearing the staging left by earlier workers failed',
      );
    });
    let requeued: number | null = null;
    try {
      requeued = (await this.#o.pool.query(REQUEUE_ORPHANS)).rowCount;
    } catch (err) {
      this.#requeueOrphans = true; // the first cycle tries again
      this.#o.log.warn({ err: { message: (err as Error).message } }, 'queueing interrupted jobs again failed');
    }
    this.#o.log.info({ event: 'worker.active', requeued }, 'completion worker active');
    this.#schedule(0);
  }

  #schedule(delayMs: number): void {
    if (this.#stopped || !this.#active) return;
    this.#timer = setTimeout(() => {
      this.#running = this.#tick().finally(() => {
        this.#running = undefined;
      });
    }, delayMs);
  }

  async #tick(): Promise<void> {
    if (!this.#active) return;
    let worked = false;
    let unreachable = false;
    try {
      if (this.#requeueOrphans) {
        // Only jobs no live connection holds: one whose worker still runs it keeps its claim.
        const requeued = await this.#o.pool.query(REQUEUE_ORPHANS);
        this.#requeueOrphans = false;
        this.#o.log.info(
          { event: 'worker.resumed', requeued: requeued.rowCount },
          'PostgreSQL reachable again; interrupted jobs queued again',
        );
      }
      if (Date.now() - this.#lastSweep >= (this.#o.expirySweepMs ?? 30_000)) {
        this.#lastSweep = Date.now();
        // A job whose worker died after this one took over (its claim lock went with it).
        const orphans = await this.#o.pool.query(REQUEUE_ORPHANS);
        if (orphans.rowCount) this.#o.log.info({ requeued: orphans.rowCount }, 'interrupted jobs queued again');
        const expired = await this.#o.sessions.expire();
        if (expired) this.#o.log.info({ expired }, 'expired upload sessions removed');
        const left = await this.#o.sessions.removeLeftParts((upload, err) =>
          this.#o.log.warn(
            {
              event: 'upload.parts_left',
              upload,
              err: { message: (err as Error).message, code: (err as { code?: string }).code },
            },
            'removing the parts of a finished upload failed; retried at the next sweep',
          ),
        );
        if (left) this.#o.log.info({ sessions: left }, 'parts left by finished upload sessions removed');
        const pruned = await this.#o.sessions.prune();
        if (pruned)
          this.#o.log.info(
            { pruned, keepDays: FINISHED_SESSION_KEEP_DAYS },
            'upload sessions finished past their retention deleted',
          );
      }
      const claim = await this.#claim();
      if (claim) {
        worked = true;
        await this.#runClaimed(claim);
      }
    } catch (err) {
      if (isUnreachable(err)) {
        unreachable = true;
        if (!this.#requeueOrphans)
          this.#o.log.warn(
            {
              event: 'worker.db_unreachable',
              err: { message: (err as Error).message, code: (err as { code?: string }).code },
            },
            'a completion cycle lost its connection; the interrupted job is retried once PostgreSQL answers',
          );
        this.#requeueOrphans = true;
      } else {
        this.#o.log.error({ err }, 'completion worker cycle failed');
      }
    }
    this.#schedule(unreachable ? (this.#o.unreachableRetryMs ?? 1000) : worked ? 0 : (this.#o.pollMs ?? 250));
  }

  async #claim(): Promise<Claim | undefined> {
    // Each principal's oldest queued job whose wait after its last attempt is over; the round robin
    // picks among them.
    const heads = await this.#o.pool.query<QueueHead>(
      `SELECT DISTINCT ON (COALESCE(s.principal_id::text, '')) j.id::text AS "jobId", COALESCE(s.principal_id::text, '') AS principal
       FROM arkvory_upload_jobs j JOIN arkvory_upload_sessions s ON s.id = j.session_id
       WHERE j.state = 'queued' AND ${retryDueSql('j', '$1')}
       ORDER BY COALESCE(s.principal_id::text, ''), j.id`,
      [this.#o.retryDelayMs ?? DEFAULT_RETRY_DELAY_MS],
    );
    const chosen = this.#turns.next(heads.rows);
    if (!chosen) return undefined;
    const client = await this.#claimConnection();
    let claimed = false;
    try {
      // The claim lock first: a `running` job whose lock is free is then surely nobody's.
      const locked = await client.query<{ ok: boolean }>(
        `SELECT pg_try_advisory_lock(${JOB_LOCK_CLASS}, ${JOB_KEY('$1')}) AS ok`,
        [chosen.jobId],
      );
      if (!locked.rows[0]!.ok) return undefined; // a worker that lost the lock is still ending it
      const r = await client.query(
        `UPDATE arkvory_upload_jobs SET state = 'running', attempts = attempts + 1, updated_at = now()
         WHERE id = $1 AND state = 'queued'
         RETURNING id::text, session_id, parts, attempts, error`,
        [chosen.jobId],
      );
      const row = r.rows[0];
      if (!row) return undefined;
      claimed = true;
      return {
        job: { id: row.id, sessionId: row.session_id, parts: row.parts, attempts: row.attempts },
        client,
        waiting: row.error,
      };
    } finally {
      if (!claimed) await this.#release(client, chosen.jobId);
    }
  }

  async #claimConnection(): Promise<pg.Client> {
    if (this.#claimClient) return this.#claimClient;
    const client = new PgClient({
      connectionString: currentUrl(this.#o.databaseUrl),
      application_name: 'arkvory-worker-claim',
      keepAlive: true,
    });
    // Its death releases the claim of a job in progress: that job still finishes only under its claim.
    client.on('error', () => this.#dropClaimConnection(client));
    client.on('end', () => this.#dropClaimConnection(client));
    try {
      await client.connect();
      // Idle while its job runs on the pool, yet its end gives the job's claim up.
      await keepIdleSession(client);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    this.#claimClient = client;
    return client;
  }

  #dropClaimConnection(client: pg.Client): void {
    if (this.#claimClient !== client) return;
    this.#claimClient = undefined;
    client.end().catch(() => {});
  }

  /** Ends a claim: unlocks the job; a connection that cannot say so is closed (which unlocks too). */
  async #release(client: pg.Client, jobId: string): Promise<void> {
    try {
      await client.query(`SELECT pg_advisory_unlock(${JOB_LOCK_CLASS}, ${JOB_KEY('$1')})`, [jobId]);
    } catch {
      this.#dropClaimConnection(client);
    }
  }

  async #runClaimed({ job, client, waiting }: Claim): Promise<void> {
    const abort = new AbortController();
    this.#jobAbort = abort;
    try {
      // The lock was lost while this cycle claimed: the job is for whichever worker is active now.
      if (!this.#active) return await this.#requeue(job);
      await this.#run(job, abort.signal, waiting);
    } finally {
      this.#jobAbort = undefined;
      await this.#release(client, job.id);
    }
  }

  async #run(job: Job, signal: AbortSignal, waiting: string | null): Promise<void> {
    const log = this.#o.log.child({ job: job.id });
    const maxAttempts = this.#o.maxAttempts ?? 5;
    // Past its attempts (a worker lost mid-job again and again) a job runs on only while it waits
    // out a store failure and its session is unexpired: a crash loop is bounded either way.
    if (job.attempts > maxAttempts && !(waiting && !(await this.#sessionExpired(job)))) {
      if (await this.#finish(job, 'failed', waiting ?? `gave up after ${job.attempts - 1} attempts`))
        await this.#removeParts(job, log);
      return;
    }
    let published: Awaited<ReturnType<typeof assembleJob>>;
    const quotas = this.#o.quotas;
    let stopKeeping: (() => void) | undefined;
    try {
      // Asked before the work (each attempt: one waiting out a store failure too) and again once the
      // bytes are staged, before they are published (completion-authority.ts).
      await this.#checkAuthority(job);
      published = await assembleJob(
        {
          pool: this.#o.pool,
          store: this.#o.store,
          catalog: this.#o.catalog,
          // Staged: asked again, also when the same bytes are already published under the name.
          authorize: () => this.#checkAuthority(job),
          // And by the catalog insert itself, once the bytes are committed (a long S3 copy).
          refuse: (verdict) => completionRefusalOf(verdict),
          admit: async (session, staged) => {
            // No quotas: the session's own reservation (its id), as when nothing is admitted.
            if (!quotas) return job.sessionId;
            // The session holds the whole (its parts were all granted room): published as is.
            // Otherwise (parts stored while no quota applied, or held past the session's expiry)
            // the whole is decided now, pinned to its blob so bytes already counted cost nothing.
            if (!(await quotas.holds(job.sessionId, staged.sizeBytes)))
              await quotas.reserveAs(job.sessionId, { ...session, bytes: staged.sizeBytes, sha256: staged.sha256 });
            // Held until the catalog insert settles it: committing the bytes (an S3 copy of a large
            // blob, read back) may outlast the reservation's time to live or the session's expiry,
            // and room that stopped counting could be granted to another upload meanwhile.
            stopKeeping = quotas.keep(job.sessionId);
            return job.sessionId;
          },
        },
        job,
        signal,
      );
    } catch (err) {
      if (this.#stopped) return; // left `running`; the next active worker queues it again
      if (signal.aborted) {
        // The worker lock was lost: hand the job back for whichever worker is active now.
        await this.#requeue(job);
        log.warn({ event: 'upload.interrupted' }, 'multipart upload interrupted: the worker lock was lost');
        return;
      }
      if (isUnreachable(err)) throw err; // not the upload's fault: #tick queues the job again
      // Ours (a staged temporary gone, offline maintenance holding the store, an fs error) and a
      // store failure that passes (a full disk, a store down) are retried, each after a longer wait
      // (retry-delay.ts), the parts kept; the upload's own failure is final (assembly-failure.ts).
      const failure = classifyAssemblyFailure(err);
      const reason = err instanceof CodedError ? reasonOf(err) : undefined;
      if (failure !== 'upload') {
        const expired = failure === 'store' && job.attempts >= maxAttempts && (await this.#sessionExpired(job));
        if (retriesAfter(failure, job.attempts, maxAttempts, expired)) {
          log.error(
            {
              event: 'upload.retry',
              err,
              code: failure === 'store' ? (err as CodedError).code : undefined,
              retryInMs: retryDelayMs(job.attempts, this.#o.retryDelayMs ?? DEFAULT_RETRY_DELAY_MS),
            },
            failure === 'store'
              ? 'multipart upload waits for the artifact store; queued again, its parts kept'
              : 'multipart upload failed on the worker; queued again',
          );
          // A store failure is told to the uploader (session.error, while still `completing`);
          // ours, its detail (paths, raw messages), stays in the log.
          await this.#requeue(job, failure === 'store' ? (reason ?? null) : null);
          return;
        }
        if (failure === 'ours') {
          log.error({ event: 'upload.failed', err }, 'multipart upload failed on the worker; no attempt left');
          if (await this.#finish(job, 'failed', `gave up after ${job.attempts} attempts`))
            await this.#removeParts(job, log);
          return;
        }
        // A store failure still there when its session has expired: final, as the upload's own.
      }
      if (await this.#finish(job, 'failed', reason!)) {
        log.warn({ event: 'upload.failed', code: (err as CodedError).code, err }, `multipart upload failed: ${reason}`);
        await this.#removeParts(job, log);
      }
      return;
    } finally {
      stopKeeping?.();
    }
    const { entry, assembly } = published;
    if (!(await this.#finish(job, 'done', null, { sha256: entry.sha256, size: entry.sizeBytes }))) {
      log.warn({ event: 'upload.claim_lost' }, 'multipart upload published, but its job was claimed again meanwhile');
      return;
    }
    log.info({ event: 'upload.completed', sizeBytes: entry.sizeBytes, assembly }, 'multipart upload published');
    await this.#removeParts(job, log);
  }

  /**
   * A finished session's parts are of no more use (a failed one cannot be completed again), and
   * they no longer count against its principal's pending bytes: kept, a writer completing sessions
   * bound to fail would fill the disk. Outside the outcome: it stands whatever removing them does
   * (the sweep tries again while their rows remain).
   */
  async #removeParts(job: Job, log: Logger): Promise<void> {
    await this.#o.sessions.removeParts(job.sessionId).catch((err: unknown) => {
      log.warn(
        { event: 'upload.parts_left', err: { message: (err as Error).message, code: (err as { code?: string }).code } },
        'removing the parts of a finished upload failed; retried at the next sweep',
      );
    });
  }

  /**
   * Queues the job again if this claim still holds it. `waiting` (after a failed attempt): the store
   * failure it waits out, kept as the job's and the session's `error` (what the uploader reads while
   * it is `completing`), or null after a failure of ours; left as it was when absent (a lost claim).
   */
  async #requeue(job: Job, waiting?: string | null): Promise<void> {
    if (waiting === undefined) {
      await this.#o.pool.query(
        `UPDATE arkvory_upload_jobs SET state = 'queued', updated_at = now() WHERE id = $1 AND state = 'running' AND attempts = $2`,
        [job.id, job.attempts],
      );
      return;
    }
    await this.#o.pool.query(
      `WITH j AS (
         UPDATE arkvory_upload_jobs SET state = 'queued', error = $3, updated_at = now()
         WHERE id = $1 AND state = 'running' AND attempts = $2 RETURNING session_id)
       UPDATE arkvory_upload_sessions s SET error = $3 FROM j WHERE s.id = j.session_id AND s.state = 'completing'`,
      [job.id, job.attempts, waiting],
    );
  }

  /**
   * Throws the refusal of a completion whose principal is disabled (or gone) or no longer holds write
   * on the repository: read from the database, not a cache, so a revocation committed before this
   * read is seen. A session records its principal, not its key: a key revoked alone stops nothing here.
   */
  async #checkAuthority(job: Job): Promise<void> {
    const r = await this.#o.pool.query<{
      principal_id: string | null;
      found: boolean;
      disabled: boolean | null;
      permission: string | null;
    }>(
      // Disabled since the session was opened counts as disabled, even if enabled again: re-enabling
      // restores the principal's keys, not what was under way when it was disabled (database clock both).
      `SELECT s.principal_id, p.id IS NOT NULL AS found, p.disabled OR p.disabled_at >= s.created_at AS disabled, g.permission
         FROM arkvory_upload_sessions s
         LEFT JOIN arkvory_principals p ON p.id = s.principal_id
         LEFT JOIN arkvory_grants g ON g.principal_id = s.principal_id AND g.repository = s.repository
        WHERE s.id = $1`,
      [job.sessionId],
    );
    const row = r.rows[0];
    if (!row) return; // the session is gone: the assembly fails it as not_found
    const refusal = completionRefusal({
      principalId: row.principal_id,
      principalFound: row.found,
      disabled: row.disabled === true,
      permission: row.permission,
    });
    if (refusal) throw refusal;
  }

  /** Whether the job's session is past its expiry, on PostgreSQL's clock (as every request judges it); gone counts. */
  async #sessionExpired(job: Job): Promise<boolean> {
    const r = await this.#o.pool.query<{ expired: boolean }>(
      'SELECT expires_at <= now() AS expired FROM arkvory_upload_sessions WHERE id = $1',
      [job.sessionId],
    );
    return r.rows[0]?.expired ?? true;
  }

  /**
   * Records the outcome if this claim still holds the job (still `running` at the attempt it was
   * claimed at), so neither a late worker nor a failure after `done` changes an outcome; returns whether it did.
   */
  async #finish(
    job: Job,
    state: 'done' | 'failed',
    error: string | null,
    result?: { sha256: string; size: number },
  ): Promise<boolean> {
    return withTransaction(this.#o.pool, async (client) => {
      const r = await client.query(
        `UPDATE arkvory_upload_jobs SET state = $2, error = $3, updated_at = now() WHERE id = $1 AND state = 'running' AND attempts = $4`,
        [job.id, state, error, job.attempts],
      );
      if (!r.rowCount) return false;
      await client.query(
        'UPDATE arkvory_upload_sessions SET state = $2, error = $3, result_sha256 = $4, result_size = $5, finished_at = now() WHERE id = $1',
        [job.sessionId, state, error, result?.sha256 ?? null, result?.size ?? null],
      );
      // The session's storage-quota reservation ends with it: the catalog insert settled it when
      // it published, but an unchanged re-upload or a failure inserts nothing.
      await client.query('DELETE FROM arkvory_quota_reservations WHERE id = $1', [job.sessionId]);
      return true;
    });
  }

  /** Stops taking jobs; a job in progress may finish within `graceMs`, else it is left for the next worker. */
  async stop(graceMs: number): Promise<void> {
    this.#stopped = true;
    this.#active = false;
    clearTimeout(this.#timer);
    if (this.#running) {
      const timer = setTimeout(() => this.#jobAbort?.abort(), graceMs);
      await this.#running.catch(() => {});
      clearTimeout(timer);
    }
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => {});
    const claims = this.#claimClient;
    this.#claimClient = undefined;
    await claims?.end().catch(() => {});
  }
}

/**
 * What the uploader reads (session.error): a store's failure in the catalogue's words, as its HTTP
 * answers are (http-errors.ts); the store's own (address, bucket, keys) only in the log.
 */
function reasonOf(err: CodedError): string {
  const mapped = toHttpError(err);
  return `${err.code}: ${mapped.code === err.code ? mapped.message : err.message}`;
}
