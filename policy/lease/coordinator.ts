/**
 * A gateway's standing in the database, on a connection of its own held from start to stop (the
 * shared pool may be busy longer than a lease lasts):
 * - barriers: the writer lock (one writer per database, standalone included) and the shared
 *   maintenance barrier (offline maintenance refuses while any gateway runs);
 * - the stored download policy check;
 * - in the shared profile, the slot lease: acquired at start (waiting out a stopped owner's
 *   reservation, refusing a live one), renewed 2 s after each confirmation, fenced for good when
 *   the permit lapses or the database no longer holds it.
 * Losing the connection loses the barriers, so it fences too.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { PgClient } from '../../lib/pg-client.ts';
import type { Logger } from 'pino';
import { currentUrl, type ConnectionUrl } from '../../lib/connection-url.ts';
import { keepIdleSession } from '../../lib/idle-session.ts';
import type { Clock } from '../clock.ts';
import { systemTimers, type TimerHandle, type Timers } from '../timers.ts';
import { tryLockExclusive, tryLockShared, unlockExclusive, unlockShared } from './barriers.ts';
import { checkPolicy, PolicyRefusal, type DownloadPolicy } from './download-policy.ts';
import {
  acquired,
  confirmRenewal,
  isPermitValid,
  nextRenewalAt,
  observe,
  PERMIT_MS,
  renewalRejected,
  RESERVATION_MS,
  type Instant,
  type PermitState,
} from './lease-permit.ts';

export interface CoordinatorOptions {
  databaseUrl: ConnectionUrl;
  /** `worker` takes only the shared maintenance barrier: no writer lock, no policy, no lease. */
  role: 'api' | 'reader' | 'worker';
  /** A worker of a writer instance: it also holds the writer workers' barrier shared (`releaseWriterWorker`). */
  writerWorker?: boolean;
  /** Shared profile only. */
  shared?: { slot: number; policy: DownloadPolicy; advertiseUrl?: string };
  clock: Clock;
  /** The renewal, expiry and acquire-wait timers (tests drive them with ManualTimers on a ManualClock). */
  timers?: Timers;
  log: Logger;
  /** Longest wait for a stopped owner's reservation to expire. */
  acquireTimeoutMs?: number;
  /** How long to watch a holder before calling it live (it renews every 2 s). */
  liveCheckMs?: number;
  retryAfterErrorMs?: number;
  /** The line logged once when fenced, where a restart is not the operator's to do (a worker of several). */
  fencedMessage?: string;
}

/** Longest wait to take the slot (spec: "the wait is limited to 15 seconds"). */
const ACQUIRE_TIMEOUT_MS = 15_000;
/**
 * The largest weight sum a gateway reports (migration 0079): its governor's table holds up to 1000
 * principals at weights up to 1000, so their sum may pass 1000; cut at 1000, a gateway serving more
 * weight than that was answered less than its share.
 */
const MAX_WEIGHT_SUM = 1_000_000;

export class SlotBusy extends PolicyRefusal {}

function lateStart(slot: number): string {
  return `PostgreSQL answered the lease of slot ${slot} after its ${PERMIT_MS / 1000} s permit had lapsed; check the database and its link, then start again`;
}

/** The database left a step of the start unanswered past the acquire bound. */
export class StartUnanswered extends PolicyRefusal {}

/** `confirmed`: the row was extended; `rejected`: no row matched (fenced); `failed`: the query failed. */
export type RenewalOutcome = 'confirmed' | 'rejected' | 'failed';

/** `sharedDownloads` of /health/ready: the slot lease of the shared profile. */
export interface SharedDownloads {
  slot: number;
  slots: number;
  active: boolean;
  leaseSeconds: number;
}

/**
 * What a gateway's requests read of its standing: a process's own Coordinator, or a worker's view
 * of its instance's (proxy/workers/instance-lease.ts).
 */
export interface LeaseStanding {
  /** The owner written on the slot lease. */
  readonly owner: string;
  readonly fencedReason: string | undefined;
  /** True while payload may be granted. */
  isPermitted(): boolean;
  onFenced(listener: (reason: string) => void): void;
  /** Null in the standalone profile. */
  snapshot(): SharedDownloads | null;
}

export class Coordinator implements LeaseStanding {
  readonly owner = randomUUID();
  readonly #options: CoordinatorOptions;
  readonly #client: pg.Client;
  #permit: PermitState | undefined;
  #fencedReason: string | undefined;
  readonly #timers: Timers;
  #renewTimer: TimerHandle | undefined;
  #expiryTimer: TimerHandle | undefined;
  #renewing = false;
  #closed = false;
  /** The download share the database last granted (shared profile), bytes/s; 0 before the first. */
  #share = 0;
  #weightSum: () => number = () => 1;
  readonly #shareListeners: Array<(bytesPerSec: number) => void> = [];
  readonly #fenceListeners: Array<(reason: string) => void> = [];
  readonly #renewalListeners: Array<(outcome: RenewalOutcome, seconds: number) => void> = [];

  private constructor(options: CoordinatorOptions) {
    this.#options = options;
    this.#timers = options.timers ?? systemTimers;
    this.#client = new PgClient({
      connectionString: currentUrl(options.databaseUrl),
      application_name: `arkvory-${options.role}-lease`,
      keepAlive: true,
      keepAliveInitialDelayMillis: 5000,
      connectionTimeoutMillis: 10_000,
    });
  }

  static async open(options: CoordinatorOptions): Promise<Coordinator> {
    const c = new Coordinator(options);
    try {
      await c.#start();
    } catch (err) {
      c.#closed = true;
      await c.#client.end().catch(() => {});
      throw err;
    }
    return c;
  }

  #now(): Instant {
    return { monotonicMs: this.#options.clock.monotonicMs(), wallMs: this.#options.clock.wallMs() };
  }

  async #start(): Promise<void> {
    const { role, shared, log } = this.#options;
    await this.#client.connect();
    this.#client.on('error', (err) => this.#fence(`the lease connection failed: ${err.message}`));
    this.#client.on('end', () => {
      if (!this.#closed) this.#fence('the lease connection closed');
    });
    // Each step answered within the acquire bound: a database that stops answering (a link gone
    // silent, a lock held, a commit waiting for a lost synchronous standby) must not hold a start
    // forever, where no supervisor would restart it.
    const timeoutMs = this.#options.acquireTimeoutMs ?? ACQUIRE_TIMEOUT_MS;
    const step = <T>(what: string, work: Promise<T>) => this.#answerWithin(work, timeoutMs, what);
    await step('the session settings', keepIdleSession(this.#client));
    if (role === 'api' && !(await step('the writer barrier', tryLockExclusive(this.#client, 'writer')))) {
      throw new PolicyRefusal(
        'another writer (ARKVORY_ROLE=api) is running on this database; only one writer may run at a time',
      );
    }
    if (role === 'api') {
      // Workers of an earlier writer instance may outlive its writer barrier (its coordinating
      // process stopped, its session ended): while one holds this, it may still commit.
      if (!(await step('the writer workers barrier', tryLockExclusive(this.#client, 'writerWorkers'))))
        throw new PolicyRefusal(
          'workers of another writer instance (ARKVORY_WORKERS) still run on this database, though its coordinating process lost the writer lock; stop that instance (its coordinating process may be stopped: SIGCONT then SIGTERM, or SIGKILL its workers) before starting a writer',
        );
      await step('the writer workers barrier', unlockExclusive(this.#client, 'writerWorkers'));
    }
    if (!(await step('the maintenance barrier', tryLockShared(this.#client, 'maintenance')))) {
      throw new PolicyRefusal(
        'offline maintenance (scrub/gc) holds the maintenance barrier on this database; start the gateway after it finishes',
      );
    }
    if (
      this.#options.writerWorker &&
      !(await step('the writer workers barrier', tryLockShared(this.#client, 'writerWorkers')))
    )
      throw new PolicyRefusal('a writer was starting on this database at this instant; this worker does not start');
    if (role === 'worker') return;
    await step('the download policy check', checkPolicy(this.#client, role, shared?.policy));
    if (shared) {
      await this.#acquire(shared.slot);
      log.info(
        { slot: shared.slot, slots: shared.policy.slots, owner: this.owner, generation: this.generation },
        'slot lease acquired',
      );
    }
  }

  /**
   * A fenced worker of a writer instance serves no write any more: it lets a new writer start
   * (a lost connection released it already).
   */
  async releaseWriterWorker(): Promise<void> {
    if (!this.#options.writerWorker || this.#closed) return;
    await unlockShared(this.#client, 'writerWorkers').catch(() => {});
  }

  get generation(): number | undefined {
    return this.#permit?.kind === 'held' ? this.#permit.generation : undefined;
  }

  /** True while this process may grant payload: standalone until fenced; shared while the permit is valid. */
  isPermitted(): boolean {
    if (this.#fencedReason !== undefined) return false;
    if (!this.#options.shared) return true;
    if (!this.#permit) return false;
    const now = this.#now();
    if (isPermitValid(this.#permit, now)) return true;
    this.#apply(observe(this.#permit, now));
    return false;
  }

  get fencedReason(): string | undefined {
    return this.#fencedReason;
  }

  onFenced(listener: (reason: string) => void): void {
    this.#fenceListeners.push(listener);
  }

  /** Called after every renewal attempt with its outcome and duration (for metrics). Must not throw. */
  onRenewal(listener: (outcome: RenewalOutcome, seconds: number) => void): void {
    this.#renewalListeners.push(listener);
  }

  #renewed(outcome: RenewalOutcome, startedMonoMs: number): void {
    const seconds = Math.max(0, this.#options.clock.monotonicMs() - startedMonoMs) / 1000;
    for (const listener of this.#renewalListeners) listener(outcome, seconds);
  }

  /**
   * The leased download share, bytes/s (shared profile): what this gateway may grant in total. It
   * follows the weight sums the gateways report (docs/shared-profile.md, "Weighted shares"); 0
   * (nothing may pass) until the first answer, and whenever the others still hold the whole rate.
   */
  get shareBytesPerSec(): number {
    return this.#share;
  }

  /** Where renewals read this gateway's weight sum from (the download governor's active principals). */
  reportWeightSum(source: () => number): void {
    this.#weightSum = source;
  }

  /** Called with every new share (after each renewal that changed it). Must not throw. */
  onShare(listener: (bytesPerSec: number) => void): void {
    this.#shareListeners.push(listener);
  }

  /**
   * Renews the lease and asks for the weighted share (migration 0061): NULL when the database holds
   * no such lease any more. Tells the database the share in use now, which it holds until the next
   * call, so a lowered share is never handed to another gateway before this one applies it.
   */
  async #askShare(generation: number): Promise<number | null> {
    const shared = this.#options.shared!;
    const weightSum = Math.min(MAX_WEIGHT_SUM, Math.max(1, Math.round(this.#weightSum())));
    const r = await this.#client.query<{ share: string | null }>(
      'SELECT arkvory_lease_share($1, $2, $3, $4, $5, $6)::text AS share',
      [shared.slot, this.owner, generation, RESERVATION_MS, weightSum, this.#share],
    );
    const share = r.rows[0]?.share;
    return share === null || share === undefined ? null : this.#validShare(share);
  }

  /**
   * A share answer as this gateway may use it: a whole number of bytes/s from 0 to the rate. Any
   * other answer (negative, fractional, beyond the rate, not a number) pauses downloads (0) until
   * the next one: it is never applied, stored or reported back as the share in use, which the
   * database would refuse (held_bytes_per_second >= 0) on every renewal until the permit lapsed.
   */
  #validShare(answer: string): number {
    const share = Number(answer);
    const rate = this.#options.shared!.policy.downloadBytesPerSec;
    if (Number.isSafeInteger(share) && share >= 0 && share <= rate) return share;
    this.#options.log.error(
      { answer, rateBytesPerSec: rate },
      'the database answered a download share outside [0, rate]; pausing downloads until the next answer',
    );
    return 0;
  }

  #applyShare(share: number): void {
    if (share === this.#share) return;
    this.#share = share;
    for (const listener of this.#shareListeners) {
      // A listener that throws must not cost the lease: the renewal already confirmed it.
      try {
        listener(share);
      } catch (err) {
        this.#options.log.error(
          { err: { message: (err as Error).message }, share },
          'a download share listener failed',
        );
      }
    }
  }

  /** For /health/ready: `sharedDownloads` (null in standalone). */
  snapshot(): SharedDownloads | null {
    const shared = this.#options.shared;
    if (!shared) return null;
    return {
      slot: shared.slot,
      slots: shared.policy.slots,
      active: this.isPermitted(),
      leaseSeconds: RESERVATION_MS / 1000,
    };
  }

  async #tryAcquire(slot: number): Promise<{ generation: number } | undefined> {
    const shared = this.#options.shared!;
    // A function owned by the schema owner (migration 0020): the role may take a free or expired
    // slot and renew only what its own session took, never write lease rows directly.
    const r = await this.#client.query<{ generation: string | null }>(
      'SELECT arkvory_lease_acquire($1, $2, $3, $4, $5)::text AS generation',
      [slot, this.owner, this.#options.role, shared.advertiseUrl ?? null, RESERVATION_MS],
    );
    const generation = r.rows[0]?.generation;
    return generation ? { generation: Number(generation) } : undefined;
  }

  async #acquire(slot: number): Promise<void> {
    const { clock, log } = this.#options;
    const timeoutMs = this.#options.acquireTimeoutMs ?? ACQUIRE_TIMEOUT_MS;
    const liveCheckMs = this.#options.liveCheckMs ?? 2_500;
    const startedMono = clock.monotonicMs();
    // Each query answered within the bound from its own start: the last look, due when the wait
    // ends, still gets its answer.
    const answered = <T>(work: Promise<T>) => this.#answerWithin(work, timeoutMs, `the lease of slot ${slot}`);
    let firstSeen: { renewedAt: string; owner: string; atMono: number } | undefined;
    let waitingLogged = false;
    for (;;) {
      const requestStartedAt = this.#now();
      const got = await answered(this.#tryAcquire(slot));
      if (got) {
        // A start answered past its permit fails (a supervisor may start it again) rather than
        // return a gateway fenced from its first moment, which runs on refusing every request.
        const permit = acquired(got.generation, requestStartedAt, this.#now());
        if (permit.kind !== 'held') throw new StartUnanswered(lateStart(slot));
        this.#permit = permit;
        // The first share before any byte: a new lease holds none until it asks.
        const share = await answered(this.#askShare(got.generation));
        if (share === null) throw new SlotBusy(`slot ${slot} was taken over while this process started`);
        if (!isPermitValid(permit, this.#now())) throw new StartUnanswered(lateStart(slot));
        this.#applyShare(share);
        this.#schedule();
        return;
      }
      const holder = await answered(
        this.#client.query<{ owner: string; renewed_at: string; remaining_ms: number }>(
          `SELECT owner::text, renewed_at::text, greatest(0, extract(epoch FROM expires_at - clock_timestamp()) * 1000)::float8 AS remaining_ms FROM arkvory_gateway_leases WHERE slot = $1`,
          [slot],
        ),
      );
      const row = holder.rows[0];
      if (!row) continue;
      const nowMono = clock.monotonicMs();
      if (!firstSeen) firstSeen = { renewedAt: row.renewed_at, owner: row.owner, atMono: nowMono };
      else if (row.renewed_at !== firstSeen.renewedAt || row.owner !== firstSeen.owner) {
        throw new SlotBusy(
          `slot ${slot} is held by a running gateway that keeps renewing it; give this process another ARKVORY_GATEWAY_SLOT or stop the other one`,
        );
      }
      if (!waitingLogged) {
        log.info(
          { slot, remainingMs: Math.round(row.remaining_ms) },
          'slot reserved by an earlier owner; waiting for its reservation to expire',
        );
        waitingLogged = true;
      }
      if (nowMono - startedMono >= timeoutMs)
        throw new SlotBusy(`slot ${slot} stayed reserved for ${timeoutMs / 1000} s; is another gateway using it?`);
      // Look again when the live check is due or the reservation ends, whichever is first.
      const untilLiveCheck = firstSeen.atMono + liveCheckMs - nowMono;
      const wait = Math.max(
        20,
        Math.min(
          row.remaining_ms + 20,
          untilLiveCheck > 0 ? untilLiveCheck : row.remaining_ms + 20,
          timeoutMs - (nowMono - startedMono),
        ),
      );
      await new Promise<void>((resolve) => this.#timers.setTimeout(resolve, wait));
    }
  }

  /**
   * `work`'s answer, or StartUnanswered once `timeoutMs` has passed. The query may still be running:
   * `open` then ends the connection, which pg does by closing its socket while a query is active.
   */
  #answerWithin<T>(work: Promise<T>, timeoutMs: number, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = this.#timers.setTimeout(
        () =>
          reject(
            new StartUnanswered(
              `PostgreSQL did not answer ${what} within ${timeoutMs / 1000} s; check the database and its link, then start again`,
            ),
          ),
        timeoutMs,
      );
      work.then(
        (value) => {
          this.#timers.clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          this.#timers.clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  #apply(next: PermitState): void {
    this.#permit = next;
    if (next.kind === 'fenced') this.#fence(next.reason);
  }

  #fence(reason: string): void {
    if (this.#fencedReason !== undefined || this.#closed) return;
    this.#fencedReason = reason;
    this.#clearTimers();
    this.#options.log.error(
      { reason, owner: this.owner },
      this.#options.fencedMessage ??
        'fenced: this gateway lost its lease or database ownership and will not serve again; restart it',
    );
    for (const listener of this.#fenceListeners) listener(reason);
  }

  #schedule(): void {
    if (this.#closed || !this.#permit || this.#permit.kind !== 'held') return;
    this.#clearTimers();
    const nowMono = this.#options.clock.monotonicMs();
    const renewAt = nextRenewalAt(this.#permit)!;
    this.#renewTimer = this.#timers.setTimeout(() => void this.#renew(), Math.max(0, renewAt - nowMono));
    this.#armExpiry();
  }

  /**
   * Fence on time even while a renewal hangs on a slow link. Node's timers can fire up to ~2 ms
   * before their delay as performance.now() counts it (libuv's loop time is coarser), so a check
   * may find the permit still valid; it then arms the next one, and a permit is never left without
   * a check at its end.
   */
  #armExpiry(): void {
    const permit = this.#permit;
    if (this.#closed || permit?.kind !== 'held') return;
    const now = this.#now();
    const leftMs = Math.min(permit.validUntil.monotonicMs - now.monotonicMs, permit.validUntil.wallMs - now.wallMs);
    this.#expiryTimer = this.#timers.setTimeout(() => {
      this.#expiryTimer = undefined;
      if (this.isPermitted()) this.#armExpiry();
    }, Math.max(0, leftMs) + 1);
  }

  async #renew(): Promise<void> {
    if (this.#renewing || this.#closed || !this.#permit || this.#permit.kind !== 'held') return;
    this.#renewing = true;
    const requestStartedAt = this.#now();
    try {
      const share = await this.#askShare(this.#permit.generation);
      const renewed = share !== null;
      this.#renewed(renewed ? 'confirmed' : 'rejected', requestStartedAt.monotonicMs);
      if (this.#fencedReason !== undefined) return;
      this.#apply(
        renewed ? confirmRenewal(this.#permit, requestStartedAt, this.#now()) : renewalRejected(this.#permit),
      );
      if (renewed && this.#permit.kind === 'held') this.#applyShare(share);
      this.#schedule();
    } catch (err) {
      this.#renewed('failed', requestStartedAt.monotonicMs);
      if (this.#fencedReason !== undefined || this.#closed) return;
      this.#options.log.warn(
        { err: { message: (err as Error).message } },
        'lease renewal failed; retrying while the permit lasts',
      );
      this.#apply(observe(this.#permit, this.#now()));
      if (this.#renewTimer !== undefined) this.#timers.clearTimeout(this.#renewTimer);
      this.#renewTimer = this.#timers.setTimeout(() => void this.#renew(), this.#options.retryAfterErrorMs ?? 500);
    } finally {
      this.#renewing = false;
    }
  }

  /** Stops renewing and closes the connection. The database reservation is left to expire on its own. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#clearTimers();
    await this.#client.end().catch(() => {});
  }

  #clearTimers(): void {
    if (this.#renewTimer !== undefined) this.#timers.clearTimeout(this.#renewTimer);
    if (this.#expiryTimer !== undefined) this.#timers.clearTimeout(this.#expiryTimer);
    this.#renewTimer = undefined;
    this.#expiryTimer = undefined;
  }
}
