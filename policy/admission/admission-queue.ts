import { PolicyError } from '../errors.ts';
import { systemTimers, type TimerHandle, type Timers } from '../timers.ts';

/** A mutating upload scenario or a download (content read). */
export type TransferKind = 'download' | 'upload';

/** Gives the slot back. Idempotent: calling it again does nothing. */
export type Release = () => void;

export interface AdmissionQueueOptions {
  /** Process-wide cap on active downloads (`ARKVORY_MAX_DOWNLOADS`). */
  maxDownloads: number;
  /** Active downloads per principal; default min(4, maxDownloads). */
  maxDownloadsPerPrincipal?: number;
  /** Active mutating uploads per principal; default 1. */
  maxUploadsPerPrincipal?: number;
  /** Requests that may wait per principal and kind; 0 = none wait. Default 64. */
  queueLength?: number;
  /** Longest wait for a slot; 0 = none wait. Default 30 s. */
  waitMs?: number;
  timers?: Timers;
}

export interface AdmissionCounters {
  active: number;
  queued: number;
  /** Refused with `busy` since start (queue full or waited too long). */
  rejected: number;
}

/** Aggregates only: never a principal id. */
export interface AdmissionSnapshot {
  downloads: AdmissionCounters;
  uploads: AdmissionCounters;
  closed: boolean;
}

const RETRY_AFTER_SECONDS = '1';

interface Waiter {
  readonly lane: Lane;
  readonly resolve: (release: Release) => void;
  readonly reject: (err: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
  timer: TimerHandle | null;
}

interface Lane {
  readonly principalId: string;
  readonly kind: TransferKind;
  active: number;
  readonly queue: Waiter[];
}

interface KindState {
  readonly perPrincipal: number;
  readonly total: number;
  active: number;
  queued: number;
  rejected: number;
  /** Lanes with waiting requests, in turn order (round-robin when a process-wide slot frees). */
  readonly turns: Set<Lane>;
}

/**
 * Caps active transfers per principal and kind, and downloads per process (ADR 0008). A request
 * whose own slot is free passes requests of other principals that are blocked on theirs; the wait
 * is bounded in length and time (`busy` with `retry-after`); after `close()` nothing is accepted.
 */
export class AdmissionQueue {
  readonly #queueLength: number;
  readonly #waitMs: number;
  readonly #timers: Timers;
  readonly #kinds: Record<TransferKind, KindState>;
  /** Lanes of principals with an active or waiting request; dropped when both are zero. */
  /** Per kind, by principal id (the principal's own string: no key is built per request). */
  readonly #lanes: Record<TransferKind, Map<string, Lane>> = { download: new Map(), upload: new Map() };
  #closed = false;
  #fenced = false;

  constructor(options: AdmissionQueueOptions) {
    const maxDownloads = count(options.maxDownloads, 'maxDownloads', 1);
    this.#queueLength = count(options.queueLength ?? 64, 'queueLength', 0);
    this.#waitMs = count(options.waitMs ?? 30_000, 'waitMs', 0);
    this.#timers = options.timers ?? systemTimers;
    this.#kinds = {
      download: kindState(
        count(options.maxDownloadsPerPrincipal ?? Math.min(4, maxDownloads), 'maxDownloadsPerPrincipal', 1),
        maxDownloads,
      ),
      upload: kindState(count(options.maxUploadsPerPrincipal ?? 1, 'maxUploadsPerPrincipal', 1), Infinity),
    };
  }

  /**
   * A Release when `principalId` may start a transfer of `kind` at once (open, nobody of its lane
   * waiting, a slot free); otherwise undefined and nothing changed (then `acquire`, which waits or refuses).
   */
  tryAcquire(principalId: string, kind: TransferKind): Release | undefined {
    if (this.#closed || this.#fenced || this.#kinds[kind] === undefined) return undefined;
    const lane = this.#lane(principalId, kind);
    // Stryker disable next-line ConditionalExpression: equivalent: a lane with a waiting request has no room (a release hands its slot to a waiting lane at once), so the queue check cannot change the outcome; the line's other ConditionalExpression mutants are killed
    if (lane.queue.length === 0 && this.#hasRoom(lane)) return this.#admit(lane);
    this.#dropIfIdle(lane);
    return undefined;
  }

  /**
   * Slots `principalId` could take of `kind` at once, under both caps: 0 while the queue is closed or
   * fenced, or while any request of that kind waits (a slot that frees is theirs).
   */
  spare(principalId: string, kind: TransferKind): number {
    const state = this.#kinds[kind];
    if (this.#closed || this.#fenced || state === undefined || state.queued > 0) return 0;
    const active = this.#lanes[kind].get(principalId)?.active ?? 0;
    return Math.max(0, Math.min(state.perPrincipal - active, state.total - state.active));
  }

  /**
   * Resolves with a Release once `principalId` may start a transfer of `kind`. Rejects with
   * PolicyError `busy` (queue full or the wait bound passed), `lease_lost` (fenced), `unavailable`
   * (closed), or the signal's reason.
   */
  acquire(principalId: string, kind: TransferKind, signal?: AbortSignal): Promise<Release> {
    if (this.#fenced) return Promise.reject(new PolicyError('lease_lost'));
    if (this.#closed) return Promise.reject(new PolicyError('unavailable'));
    if (signal?.aborted) return Promise.reject(signal.reason);
    const state = this.#kinds[kind];
    if (state === undefined)
      return Promise.reject(new TypeError(`kind: expected "download" or "upload", got ${String(kind)}`));
    const lane = this.#lane(principalId, kind);
    // Stryker disable next-line ConditionalExpression: equivalent: as in tryAcquire, a lane with a waiting request has no room; the line's other ConditionalExpression mutants are killed
    if (lane.queue.length === 0 && this.#hasRoom(lane)) return Promise.resolve(this.#admit(lane));
    if (lane.queue.length >= this.#queueLength || this.#waitMs === 0) {
      this.#dropIfIdle(lane);
      return Promise.reject(
        this.#busy(state, `More than ${this.#queueLength} ${kind}s of this principal are waiting.`),
      );
    }
    return new Promise<Release>((resolve, reject) => {
      const waiter: Waiter = {
        lane,
        resolve,
        reject,
        signal,
        onAbort: () => this.#abandon(waiter, signal!.reason),
        timer: null,
      };
      waiter.timer = this.#timers.setTimeout(() => {
        waiter.timer = null;
        this.#abandon(waiter, this.#busy(state, `Waited ${Math.ceil(this.#waitMs / 1000)} s for a ${kind} slot.`));
      }, this.#waitMs);
      // Stryker disable next-line ObjectLiteral,BooleanLiteral: equivalent: the abort handler removes the listener itself (#abandon → #unhook), once or not
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      lane.queue.push(waiter);
      state.queued++;
      state.turns.add(lane);
    });
  }

  /** Shutdown (preClose): waiting requests reject with `unavailable`, and so does every new one. */
  close(): void {
    this.#closed = true;
    this.#abandonAll(new PolicyError('unavailable'));
  }

  /**
   * Lost database ownership or lease: waiting requests reject with `lease_lost` at once (a slot
   * could free late, or to a request this gateway may no longer serve), and so does every new one.
   * Held slots still release.
   */
  fence(): void {
    this.#fenced = true;
    this.#abandonAll(new PolicyError('lease_lost'));
  }

  #abandonAll(err: PolicyError): void {
    for (const state of Object.values(this.#kinds)) {
      for (const lane of [...state.turns]) {
        for (const waiter of [...lane.queue]) this.#abandon(waiter, err);
      }
    }
  }

  /** Principal lanes held: each has an active or a waiting request (memory stays bounded by them). */
  get lanes(): number {
    return this.#lanes.download.size + this.#lanes.upload.size;
  }

  snapshot(): AdmissionSnapshot {
    const counters = (state: KindState): AdmissionCounters => ({
      active: state.active,
      queued: state.queued,
      rejected: state.rejected,
    });
    return { downloads: counters(this.#kinds.download), uploads: counters(this.#kinds.upload), closed: this.#closed };
  }

  #lane(principalId: string, kind: TransferKind): Lane {
    const lanes = this.#lanes[kind];
    let lane = lanes.get(principalId);
    if (lane === undefined) {
      lane = { principalId, kind, active: 0, queue: [] };
      lanes.set(principalId, lane);
    }
    return lane;
  }

  #hasRoom(lane: Lane): boolean {
    const state = this.#kinds[lane.kind];
    return lane.active < state.perPrincipal && state.active < state.total;
  }

  #admit(lane: Lane): Release {
    const state = this.#kinds[lane.kind];
    lane.active++;
    state.active++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      lane.active--;
      state.active--;
      this.#pump(state);
      this.#dropIfIdle(lane);
    };
  }

  /**
   * Hands the slot a release just freed (one slot, under both caps) to the first lane in turn whose
   * own slot is free; that lane goes to the back of the turns if more of it wait.
   */
  #pump(state: KindState): void {
    for (const lane of state.turns) {
      if (lane.active >= state.perPrincipal) continue;
      const waiter = lane.queue.shift()!;
      this.#unhook(waiter);
      state.queued--;
      state.turns.delete(lane);
      if (lane.queue.length > 0) state.turns.add(lane);
      waiter.resolve(this.#admit(lane));
      return;
    }
  }

  /** A waiting request leaves without a slot (timeout, abort, close); that frees no slot. */
  #abandon(waiter: Waiter, err: unknown): void {
    const { lane } = waiter;
    const index = lane.queue.indexOf(waiter);
    // Stryker disable next-line ConditionalExpression: equivalent: every path that admits a waiter unhooks its timer and abort listener first, so only queued waiters get here; the opposite mutant (never abandon) is killed
    if (index < 0) return;
    lane.queue.splice(index, 1);
    this.#unhook(waiter);
    const state = this.#kinds[lane.kind];
    state.queued--;
    if (lane.queue.length === 0) state.turns.delete(lane);
    waiter.reject(err);
    this.#dropIfIdle(lane);
  }

  #unhook(waiter: Waiter): void {
    this.#timers.clearTimeout(waiter.timer);
    waiter.timer = null;
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
  }

  #busy(state: KindState, message: string): PolicyError {
    state.rejected++;
    return new PolicyError('busy', message, { headers: { 'retry-after': RETRY_AFTER_SECONDS } });
  }

  #dropIfIdle(lane: Lane): void {
    if (lane.active === 0 && lane.queue.length === 0) this.#lanes[lane.kind].delete(lane.principalId);
  }
}

function kindState(perPrincipal: number, total: number): KindState {
  return { perPrincipal, total, active: 0, queued: 0, rejected: 0, turns: new Set() };
}

function count(value: number, name: string, min: number): number {
  if (!Number.isSafeInteger(value) || value < min)
    throw new RangeError(`${name}: expected an integer ≥ ${min}, got ${value}`);
  return value;
}
