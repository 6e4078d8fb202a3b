import type { Clock } from '../clock.ts';
import { PolicyError } from '../errors.ts';
import { systemTimers, type TimerHandle, type Timers } from '../timers.ts';
import {
  availableBytes,
  type BucketSpec,
  type LiveBucket,
  createBucketSpec,
  liveBucket,
  msUntilHeld,
  quantumBytesFor,
  refilledHolds,
  rerateBucket,
  rerateBucketSpec,
  spendInPlace,
  takeEachInPlace,
  startBucket,
  toMicroBytes,
  toMicros,
} from './token-bucket.ts';

/**
 * A shared ceiling a transfer also belongs to (a group of principals, a repository): one bucket per
 * key in the governor, whatever meter names it. `rateBytesPerSec` > 0; the latest meter sets it.
 */
export interface Ceiling {
  readonly key: string;
  readonly rateBytesPerSec: number;
}

/** One per HTTP body stream. */
export interface ByteMeter {
  /** Callers split chunks to at most this many bytes. */
  readonly quantumBytes: number;
  /**
   * Resolves when `bytes` (≤ `quantumBytes`) may pass. Rejects with PolicyError `lease_lost` (fenced),
   * `unavailable` (waiting when the governor closed) or `busy` (the waiting bound is full), or with the signal's reason.
   * One take at a time per meter: a second one while the first waits is a caller bug (rejects).
   */
  take(bytes: number, signal?: AbortSignal): Promise<void>;
  /**
   * `take` without waiting: true when `bytes` passed at once (counted as a take's grant), false when
   * they would have to wait or be refused, and then nothing changed (call `take`).
   */
  tryTake(bytes: number): boolean;
  /** True while a take waits for its bytes (none waits on a meter whose takes all pass at once). */
  readonly waiting?: boolean;
}

/** The governor's own meter: also tells where its stream stands in its principal's fair order. */
export interface StreamMeter extends ByteMeter {
  /** The stream's virtual finish tag so far (bytes); a later meter of the same stream starts from it. */
  streamTag(): number;
}

export interface BandwidthGovernorOptions {
  /** The direction's ceiling for the whole process; 0 = off. */
  rateBytesPerSec: number;
  /** The ceiling of each principal in this direction; 0 = off. */
  perPrincipalBytesPerSec: number;
  /** Only `monotonicMs` is read. */
  clock: Clock;
  timers?: Timers;
  /**
   * Principal states kept at once; default 1000 (ADR 0008: bounded by the loaded keys). When the
   * table is full, the idle state whose bucket is full (indistinguishable from a new one) and that
   * was active longest ago is evicted; `busy` only when no state is evictable.
   */
  maxPrincipals?: number;
  /** Takes that may wait at once, over all streams; default 256. */
  maxWaiting?: number;
  /**
   * Asked before every grant (e.g. the lease coordinator's `isPermitted`): once it answers false the
   * governor fences itself for good, as if `fence()` had been called. Omitted: always permitted.
   */
  isPermitted?: () => boolean;
  /**
   * Largest weight `meter()` accepts; default 1000. A weight shapes only the order of waiting takes
   * (the shares under contention), never a bucket, so no bound depends on it.
   */
  maxWeight?: number;
  /** Called synchronously at each grant, for metrics, tests and the benchmark. Must not throw. */
  onGrant?: (principalId: string, bytes: number, nowMs: number) => void;
}

/** Aggregates only: never a principal id. */
export interface BandwidthSnapshot {
  rateBytesPerSec: number;
  perPrincipalBytesPerSec: number;
  quantumBytes: number;
  /** Bytes granted since start (granted is not delivered). */
  grantedBytes: number;
  /** Grants since start (one per take that passed, each at most one quantum). */
  grantedQuanta: number;
  /** Takes waiting now (each at most one quantum). */
  waitingQuanta: number;
  /** Takes since start that had to wait before their grant, refusal or cancellation. */
  waitedTakes: number;
  /**
   * Bytes of the direction's ceiling lost because the process woke later than due while a take
   * waited for the global bucket: what the bucket (full at its capacity) could not hold between the
   * wake-up's due time and its late firing (event-loop lag, a CPU-starved process). Budget the
   * governor would have granted had it run on time; 0 on a process that keeps up.
   */
  lateDroppedBytes: number;
  /** Principal states held (0 when both ceilings are off: nothing is tracked then). */
  principals: number;
  /** Takes and meters refused with `busy` (waiting bound full, principal table full). */
  rejectedBusy: number;
  fenced: boolean;
  closed: boolean;
}

export const DEFAULT_MAX_PRINCIPALS = 1000;
export const DEFAULT_MAX_WAITING = 256;
export const DEFAULT_MAX_WEIGHT = 1000;
const RETRY_AFTER = { 'retry-after': '1' };
const RESOLVED: Promise<void> = Promise.resolve();

interface PrincipalState {
  readonly id: string;
  bucket: LiveBucket | null;
  /** Last grant (or creation), monotonic ms: eviction takes the oldest idle state first. */
  lastActiveMs: number;
  /** Bandwidth weight (the latest meter's): its share under contention is proportional to it. */
  weight: number;
  /** Virtual finish tag of its last grant: the fair-queueing clock in bytes per unit of weight. */
  finishTag: number;
  /**
   * Waiting takes of this principal's streams, in fair order over its streams (each take's key is
   * its stream's start tag; equal keys in arrival order): a stream that has taken little, like a
   * small response, goes before the next quantum of a big transfer of the same principal.
   */
  readonly queue: Waiter[];
  /** Start tag of the principal's last grant among its streams: a new stream starts here. */
  streamTime: number;
  /** Its last grant was below its meter's quantum (a small response, or a transfer's end). */
  lastGrantShort: boolean;
  inRing: boolean;
  /** Its place in `#ring` when holds were last made (`#holdCeilings`): arrival order among equal tags. */
  ringAt: number;
}

interface MeterState {
  waiter: Waiter | null;
  /** Virtual finish tag of its last grant among its principal's streams, in bytes. */
  finishTag: number;
  /** The meter's quantum: a grant below it is a small response or a transfer's last chunk. */
  quantumBytes: number;
}

/** The bucket of a shared ceiling (group, repository). */
interface CeilingState {
  spec: BucketSpec;
  /** Held by every meter through the ceiling: a re-rate changes it in place. */
  readonly bucket: LiveBucket;
  /** The largest quantum of a meter through it: its capacity never drops below that (a take must fit). */
  maxQuantum: number;
}

interface Waiter {
  readonly principal: PrincipalState;
  /** Its stream's start tag when it began to wait: its place in the principal's queue. */
  readonly key: number;
  readonly meter: MeterState;
  /** Its buckets other than the global one (`#bucketsOf`). */
  readonly buckets: readonly LiveBucket[];
  readonly bytes: number;
  readonly resolve: () => void;
  readonly reject: (err: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

/**
 * One per direction per process (ADR 0008). Every take passes the direction's global bucket and the
 * principal's bucket at once. Waiting takes are served in weighted fair order over principals
 * (start-time fair queueing: a grant of n bytes advances the principal's virtual finish tag by
 * n / weight, and the waiting principal with the smallest start tag goes next; equal weights give
 * round-robin, ties go in arrival order). A principal waiting for its own bucket is skipped (it never
 * holds back global quota others could use); the first principal in that order that is ready but
 * finds the global bucket short holds a reservation: no one else takes global tokens until its take
 * passes, so smaller quanta cannot starve it. A shared ceiling (group, repository) keeps the same way
 * the bytes of the first principal in that order through it whose own bucket holds its take. One timer.
 */
export class BandwidthGovernor {
  readonly quantumBytes: number;
  #rateBytesPerSec: number;
  readonly #perPrincipalBytesPerSec: number;
  readonly #clock: Clock;
  readonly #timers: Timers;
  readonly #maxPrincipals: number;
  readonly #maxWaiting: number;
  readonly #maxWeight: number;
  readonly #onGrant: BandwidthGovernorOptions['onGrant'];
  readonly #isPermitted: (() => boolean) | undefined;
  #globalSpec: BucketSpec | null;
  /** `setRate(0)`: the global bucket neither grants nor refills until a rate above 0 is set. */
  #paused = false;
  readonly #principalSpec: BucketSpec | null;
  #global: LiveBucket | null;
  readonly #principals = new Map<string, PrincipalState>();
  /** Shared ceilings by key; one per group or repository with a ceiling that a meter named. */
  readonly #ceilings = new Map<string, CeilingState>();
  /** Principals with waiting takes, in arrival order (the tie-break between equal start tags). */
  #ring: PrincipalState[] = [];
  /** Start tag of the last grant: a principal returning from idle starts here, banking no credit. */
  #virtualTime = 0;
  /** Ready principal at `#ring[0]` waiting for the global bucket; global tokens are kept for it. */
  #reserved: PrincipalState | null = null;
  /** What the reserved take waits for in the global bucket: its bytes and the headroom. */
  #reservedNeed = 0;
  /**
   * Buckets other than the global one, each holding the head take's bytes of the first waiting
   * principal in fair order through it whose own bucket holds that take (`#holdCeilings`): no one
   * after it takes those bytes until its take passes, or smaller takes through the same ceiling would
   * find their bytes first every time. Empty whenever nothing waits, so a take that passes at once
   * only reads the size.
   */
  readonly #ceilingHolds = new Map<LiveBucket, PrincipalState>();
  /** Global tokens a waiting take leaves while others are active (`#headroomFor`). */
  #headroomBytes: number;
  /** The principal granted last and when; the one granted last before it (another one) and when. */
  #lastGranted: PrincipalState | null = null;
  // Stryker disable next-line UnaryOperator: equivalent: read only beside a non-null #lastGranted, whose grant set it
  #lastGrantMs = -Infinity;
  #lastOther: PrincipalState | null = null;
  // Stryker disable next-line UnaryOperator: equivalent: read only beside a non-null #lastOther, set with it
  #lastOtherGrantMs = -Infinity;
  #waiting = 0;
  #grantedBytes = 0;
  #grantedQuanta = 0;
  #waitedTakes = 0;
  #lateDroppedBytes = 0;
  #rejectedBusy = 0;
  #timer: TimerHandle | null = null;
  #timerDueMs = Infinity;
  #fenced = false;
  #closed = false;

  constructor(options: BandwidthGovernorOptions) {
    const { rateBytesPerSec, perPrincipalBytesPerSec, clock } = options;
    this.quantumBytes = quantumBytesFor([rateBytesPerSec, perPrincipalBytesPerSec]);
    this.#rateBytesPerSec = rateBytesPerSec;
    this.#perPrincipalBytesPerSec = perPrincipalBytesPerSec;
    this.#clock = clock;
    this.#timers = options.timers ?? systemTimers;
    this.#maxPrincipals = positiveInt(options.maxPrincipals ?? DEFAULT_MAX_PRINCIPALS, 'maxPrincipals');
    this.#maxWaiting = positiveInt(options.maxWaiting ?? DEFAULT_MAX_WAITING, 'maxWaiting');
    this.#maxWeight = positiveInt(options.maxWeight ?? DEFAULT_MAX_WEIGHT, 'maxWeight');
    this.#onGrant = options.onGrant;
    this.#isPermitted = options.isPermitted;
    const nowMs = clock.monotonicMs();
    this.#globalSpec = rateBytesPerSec > 0 ? createBucketSpec(rateBytesPerSec, this.quantumBytes) : null;
    this.#principalSpec =
      perPrincipalBytesPerSec > 0 ? createBucketSpec(perPrincipalBytesPerSec, this.quantumBytes) : null;
    this.#global = this.#globalSpec ? liveBucket(this.#globalSpec, startBucket(this.#globalSpec, nowMs)) : null;
    this.#headroomBytes = this.#globalSpec ? headroomBytes(this.#globalSpec, this.quantumBytes) : 0;
  }

  /** True when both ceilings are off: takes pass at once and nothing is tracked per principal. */
  get isUnlimited(): boolean {
    return this.#globalSpec === null && this.#principalSpec === null;
  }

  /**
   * A meter for one body stream of `principalId` (the stable service-account id, never a key id),
   * whose bandwidth weight is `weight` (1..maxWeight; the principal's latest meter sets it), and
   * which also belongs to `ceilings` (its groups', its repository's): every take then needs bytes in
   * each of their buckets too. The meter's quantum is at most each of their bursts (at least 1 byte),
   * so the ADR's rate × t + burst bound holds for every bucket.
   * Throws PolicyError `lease_lost` when fenced, `busy` when the principal table is full of states
   * that cannot be evicted (waiting, or a bucket not yet refilled). A closed governor still meters:
   * `close()` cuts only the takes waiting then (admission refuses new transfers).
   * `stream` goes on a stream metered before (a worker's take, asked of this process one meter per
   * take): `opens` false leaves a known principal's weight and known ceilings' rates as its latest
   * stream set them (an older stream would set back what an admin changed since), and `tag`, the
   * `streamTag()` of that stream's last meter, keeps its place in its principal's fair order.
   */
  meter(
    principalId: string,
    weight = 1,
    ceilings: readonly Ceiling[] = [],
    stream: { readonly opens?: boolean; readonly tag?: number } = {},
  ): StreamMeter {
    this.#checkOpen();
    if (typeof principalId !== 'string' || principalId === '')
      throw new TypeError('principalId: expected a non-empty string');
    if (!Number.isSafeInteger(weight) || weight < 1 || weight > this.#maxWeight)
      throw new RangeError(`weight: expected an integer from 1 to ${this.#maxWeight}, got ${weight}`);
    const tag = stream.tag ?? 0;
    if (!Number.isFinite(tag) || tag < 0) throw new RangeError(`stream tag: expected a number ≥ 0, got ${tag}`);
    const state: MeterState = { waiter: null, finishTag: tag, quantumBytes: this.quantumBytes };
    if (this.isUnlimited && ceilings.length === 0) return this.#unlimitedMeter(principalId, state);
    const opens = stream.opens !== false;
    const principal = this.#principalFor(principalId, weight);
    if (opens) principal.weight = weight;
    const quantumBytes = Math.min(
      this.quantumBytes,
      quantumBytesFor(ceilings.map((c) => checkCeiling(c).rateBytesPerSec)),
    );
    const through = ceilings.map((c) => this.#ceilingFor(c, quantumBytes, opens).bucket);
    state.quantumBytes = quantumBytes;
    // The take's buckets other than the global one, made anew only when the principal's state is.
    let bucketsFor: PrincipalState | null = null;
    let buckets = through;
    const bucketsOf = (principal: PrincipalState): readonly LiveBucket[] => {
      // Stryker disable next-line ConditionalExpression: equivalent: building the list on every take gives the same list; the check only spares the array
      if (principal !== bucketsFor) {
        bucketsFor = principal;
        buckets = principal.bucket === null ? through : [principal.bucket, ...through];
      }
      return buckets;
    };
    return {
      quantumBytes,
      // The state is looked up per take: an idle stream's state may have been evicted (its bucket
      // was full) and is then recreated full, which grants nothing the old one would not have.
      take: (bytes, signal) => {
        let principal: PrincipalState;
        try {
          principal = this.#principalFor(principalId, weight);
        } catch (err) {
          return Promise.reject(err);
        }
        return this.#take(principal, state, bucketsOf(principal), quantumBytes, bytes, signal);
      },
      tryTake: (bytes) => {
        if (this.#refusal(state, quantumBytes, bytes, undefined) !== null) return false;
        const principal = this.#principals.get(principalId);
        return (
          principal !== undefined &&
          this.#grantNow(principal, state, bucketsOf(principal), bytes, this.#clock.monotonicMs())
        );
      },
      streamTag: () => state.finishTag,
      get waiting() {
        return state.waiter !== null;
      },
    };
  }

  /**
   * The bucket of a shared ceiling, made on first use holding its burst. Every later meter through
   * it re-rates it to its rate (what it earned so far kept, capped at the new capacity), like
   * `setRate` does the global one; the same rate only refills it up to now. The largest quantum of
   * any meter through it is kept whether or not the capacity changed now: a lower rate later must
   * still leave room for a take of that quantum, or that stream would never be granted again.
   * A meter that does not open a stream (`rerates` false) takes a known ceiling as it is: its stream's
   * quantum was counted when it opened.
   */
  #ceilingFor(ceiling: Ceiling, quantumBytes: number, rerates: boolean): CeilingState {
    const nowMs = this.#clock.monotonicMs();
    const known = this.#ceilings.get(ceiling.key);
    if (known !== undefined && !rerates && quantumBytes <= known.maxQuantum) return known;
    const maxQuantum = Math.max(known?.maxQuantum ?? 0, quantumBytes);
    const spec = rerateBucketSpec(ceiling.rateBytesPerSec, maxQuantum);
    if (known === undefined) {
      const made: CeilingState = { spec, bucket: liveBucket(spec, startBucket(spec, nowMs)), maxQuantum };
      this.#ceilings.set(ceiling.key, made);
      return made;
    }
    Object.assign(known.bucket, liveBucket(spec, rerateBucket(known.spec, spec, known.bucket, nowMs)));
    known.spec = spec;
    known.maxQuantum = maxQuantum;
    return known;
  }

  /**
   * Changes the direction's ceiling while transfers run: the leased share of the shared profile,
   * which follows the weights of the principals each gateway serves. The quantum stays; the bucket
   * keeps what it earned at the old rate up to now, capped at the new capacity max(burst, quantum).
   * 0 pauses the direction: nothing passes (and nothing is earned) until a rate above 0 is set.
   * Only for a governor built with a global ceiling (one without has nothing to change).
   */
  setRate(rateBytesPerSec: number): void {
    const from = this.#globalSpec;
    if (from === null) throw new RangeError('setRate: this governor was built without a global ceiling');
    const nowMs = this.#clock.monotonicMs();
    if (rateBytesPerSec === 0) {
      if (!this.#paused) this.#global = liveBucket(from, rerateBucket(from, from, this.#global!, nowMs));
      this.#paused = true;
    } else {
      const to = rerateBucketSpec(rateBytesPerSec, this.quantumBytes);
      this.#global = liveBucket(to, rerateBucket(this.#paused ? null : from, to, this.#global!, nowMs));
      this.#globalSpec = to;
      this.#headroomBytes = headroomBytes(to, this.quantumBytes);
      this.#paused = false;
    }
    this.#rateBytesPerSec = rateBytesPerSec;
    this.#dispatch(nowMs);
  }

  /**
   * The sum of the weights of the principals that have a take waiting or were granted bytes in the
   * last `windowMs`: what this gateway reports for its leased share. 0 when none is active.
   */
  activeWeightSum(windowMs: number): number {
    const sinceMs = this.#clock.monotonicMs() - windowMs;
    let sum = 0;
    for (const p of this.#principals.values()) if (p.queue.length > 0 || p.lastActiveMs >= sinceMs) sum += p.weight;
    return sum;
  }

  /** Lost database ownership or lease: every waiting and every new take rejects with `lease_lost`. */
  fence(): void {
    // Idempotent as it is: once fenced no take can wait, so a second call finds nothing to reject.
    this.#fenced = true;
    this.#rejectAll(new PolicyError('lease_lost'));
  }

  /**
   * Shutdown (preClose, ADR 0008): the takes waiting at this moment reject with `unavailable`.
   * Nothing else changes: a transfer not waiting right now goes on (its later takes are paced as
   * before) until it ends or the shutdown timeout cuts it; admission refuses new transfers.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#rejectAll(new PolicyError('unavailable'));
  }

  snapshot(): BandwidthSnapshot {
    return {
      rateBytesPerSec: this.#rateBytesPerSec,
      perPrincipalBytesPerSec: this.#perPrincipalBytesPerSec,
      quantumBytes: this.quantumBytes,
      grantedBytes: this.#grantedBytes,
      grantedQuanta: this.#grantedQuanta,
      waitingQuanta: this.#waiting,
      waitedTakes: this.#waitedTakes,
      lateDroppedBytes: Math.floor(this.#lateDroppedBytes),
      principals: this.#principals.size,
      rejectedBusy: this.#rejectedBusy,
      fenced: this.#fenced,
      closed: this.#closed,
    };
  }

  #unlimitedMeter(principalId: string, state: MeterState): StreamMeter {
    return {
      quantumBytes: this.quantumBytes,
      take: (bytes, signal) => {
        const refused = this.#refuse(state, this.quantumBytes, bytes, signal);
        if (refused) return refused;
        this.#count(principalId, bytes, this.#onGrant ? this.#clock.monotonicMs() : 0);
        return RESOLVED;
      },
      tryTake: (bytes) => {
        if (this.#refusal(state, this.quantumBytes, bytes, undefined) !== null) return false;
        this.#count(principalId, bytes, this.#onGrant ? this.#clock.monotonicMs() : 0);
        return true;
      },
      streamTag: () => state.finishTag,
    };
  }

  /** The principal's state; a new one (first meter, or recreated after eviction) gets `weight`. */
  #principalFor(principalId: string, weight: number): PrincipalState {
    const known = this.#principals.get(principalId);
    if (known) return known;
    const nowMs = this.#clock.monotonicMs();
    if (this.#principals.size >= this.#maxPrincipals && !this.#evictIdle(nowMs)) {
      this.#rejectedBusy++;
      throw new PolicyError(
        'busy',
        `${this.#maxPrincipals} principals are transferring or refilling their budgets; retry shortly.`,
        { headers: RETRY_AFTER },
      );
    }
    const principal: PrincipalState = {
      id: principalId,
      bucket: this.#principalSpec ? liveBucket(this.#principalSpec, startBucket(this.#principalSpec, nowMs)) : null,
      lastActiveMs: nowMs,
      weight,
      finishTag: 0,
      queue: [],
      streamTime: 0,
      // Stryker disable next-line BooleanLiteral: equivalent: read only for a principal granted last or last but one, whose grant set it
      lastGrantShort: false,
      inRing: false,
      ringAt: 0,
    };
    this.#principals.set(principalId, principal);
    return principal;
  }

  /**
   * Drops the idle state active longest ago whose bucket is full again: a new state starts with the
   * burst, which is no more than a full bucket holds, so the rate bound is unchanged. O(table) but
   * only when the table is full and a new principal arrives. False when nothing is evictable.
   */
  #evictIdle(nowMs: number): boolean {
    let oldest: PrincipalState | undefined;
    for (const p of this.#principals.values()) {
      // In the ring or holding the reservation means a take is waiting.
      if (p.queue.length > 0) continue;
      if (
        this.#principalSpec !== null &&
        availableBytes(this.#principalSpec, p.bucket!, nowMs) < this.#principalSpec.burstBytes
      )
        continue;
      // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent: every evictable state is idle with a full bucket, indistinguishable from a new one, so which one goes is unobservable (oldest first only keeps the recently active in memory); this also silences the line's `oldest === undefined` → false mutant, which the tests kill
      if (oldest === undefined || p.lastActiveMs < oldest.lastActiveMs) oldest = p;
    }
    if (oldest === undefined) return false;
    this.#principals.delete(oldest.id);
    return true;
  }

  #take(
    principal: PrincipalState,
    meter: MeterState,
    buckets: readonly LiveBucket[],
    quantumBytes: number,
    bytes: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const refused = this.#refuse(meter, quantumBytes, bytes, signal);
    if (refused) return refused;
    const nowMs = this.#clock.monotonicMs();
    if (this.#grantNow(principal, meter, buckets, bytes, nowMs)) return RESOLVED;
    // Fenced by the permit check in #grantNow: waiting now would never end.
    if (this.#fenced) return Promise.reject(new PolicyError('lease_lost'));
    if (this.#waiting >= this.#maxWaiting && !this.#makeRoomFor(principal)) {
      this.#rejectedBusy++;
      return Promise.reject(this.#waitingFull());
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        principal,
        key: Math.max(principal.streamTime, meter.finishTag),
        meter,
        buckets,
        bytes,
        resolve,
        reject,
        signal,
        onAbort: () => this.#cancel(waiter),
      };
      // Stryker disable next-line ObjectLiteral,BooleanLiteral: equivalent: every way out of waiting removes the listener (#settle), once or not
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      meter.waiter = waiter;
      enqueue(principal.queue, waiter);
      this.#waiting++;
      this.#waitedTakes++;
      if (!principal.inRing) {
        principal.inRing = true;
        this.#ring.push(principal);
      }
      this.#dispatch(nowMs);
    });
  }

  /**
   * Grants `bytes` at once when nothing waits before them in fair order and the buckets hold them.
   * A principal whose start tag is below that of the one holding the reservation comes before it,
   * and may take global tokens at once (those the reservation keeps back as headroom included).
   */
  #grantNow(
    principal: PrincipalState,
    meter: MeterState,
    buckets: readonly LiveBucket[],
    bytes: number,
    nowMs: number,
  ): boolean {
    if (bytes === 0) return true;
    // With nothing waiting there is nothing to serve first, no reservation and no timer.
    // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent: with the ring empty #dispatch serves no one and finds no reservation or timer to clear; the condition only saves the call
    if (this.#ring.length > 0) {
      this.#dispatch(nowMs);
      // That dispatch asked for the permit again: lapsed since this take's own check, it fenced.
      if (this.#fenced) return false;
    }
    const reserved = this.#reserved;
    // Only while a take waits can a bucket hold bytes for it; the check keeps `#ownHas` off the hot path.
    // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent where they call `#ownHas` with nothing held (→ true, `>=`): it only refills the buckets as `takeEachInPlace` does; → false and `<=`, ignoring holds, are killed
    const isHolding = this.#ceilingHolds.size > 0;
    if (
      principal.queue.length > 0 ||
      (reserved !== null && this.#startTag(principal) >= this.#startTag(reserved)) ||
      (isHolding && !this.#ownHas(principal, buckets, bytes, nowMs)) ||
      !this.#globalHas(bytes + this.#headroomFor(principal, nowMs), nowMs) ||
      !takeEachInPlace(buckets, toMicros(nowMs), toMicroBytes(bytes))
    )
      return false;
    // A reserved take's wake-up may now be early: it then finds too few tokens and re-arms.
    this.#account(principal, meter, bytes, nowMs);
    return true;
  }

  /** The checks every take makes first; a rejected promise when the take cannot even wait. */
  #refuse(
    meter: MeterState,
    quantumBytes: number,
    bytes: number,
    signal: AbortSignal | undefined,
  ): Promise<never> | null {
    const refusal = this.#refusal(meter, quantumBytes, bytes, signal);
    return refusal === null ? null : Promise.reject(refusal);
  }

  #refusal(meter: MeterState, quantumBytes: number, bytes: number, signal: AbortSignal | undefined): unknown {
    if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes > quantumBytes)
      return new RangeError(`bytes: expected an integer from 0 to the quantum ${quantumBytes}, got ${bytes}`);
    if (!this.#checkPermit()) return new PolicyError('lease_lost');
    if (signal?.aborted) return signal.reason;
    if (meter.waiter !== null) return new Error('ByteMeter.take: the previous take of this stream has not settled');
    return null;
  }

  /**
   * Whether each of a take's buckets other than the global one holds `bytes` beyond what it holds for
   * a principal before `principal` (`#heldFor`). Each checked bucket is kept refilled up to `nowMs`,
   * so `#grant` at the same instant only spends.
   */
  #ownHas(principal: PrincipalState, buckets: readonly LiveBucket[], bytes: number, nowMs: number): boolean {
    const nowUs = toMicros(nowMs);
    const microBytes = toMicroBytes(bytes);
    for (const b of buckets) if (!refilledHolds(b, nowUs, microBytes + this.#heldFor(principal, b))) return false;
    return true;
  }

  /** Milliseconds until the head take of a waiting principal has the bytes of its own buckets (as `#ownHas`). */
  #msUntilOwn(principal: PrincipalState, nowMs: number): number {
    const head = principal.queue[0]!;
    const nowUs = toMicros(nowMs);
    const microBytes = toMicroBytes(head.bytes);
    let waitMs = 0;
    for (const b of head.buckets)
      waitMs = Math.max(waitMs, msUntilHeld(b, nowUs, microBytes + this.#heldFor(principal, b)));
    return waitMs;
  }

  /**
   * Micro-bytes `bucket` holds for a principal before `principal` in fair order: a lower start tag,
   * or an equal one and earlier arrival (one with nothing waiting arrives last, as the global
   * reservation's `>=` has it); 0 when none or when it holds them for `principal` itself.
   */
  #heldFor(principal: PrincipalState, bucket: LiveBucket): number {
    const holder = this.#ceilingHolds.get(bucket);
    if (holder === undefined) return 0;
    const holderTag = this.#startTag(holder);
    const tag = this.#startTag(principal);
    const isBefore = holderTag < tag || (holderTag === tag && (!principal.inRing || holder.ringAt < principal.ringAt));
    return isBefore ? toMicroBytes(holder.queue[0]!.bytes) : 0;
  }

  /** Like `#ownHas`, for the global bucket (kept refilled up to `nowMs` unless paused). */
  #globalHas(bytes: number, nowMs: number): boolean {
    if (this.#paused) return false;
    const spec = this.#globalSpec;
    if (spec === null) return true;
    return refilledHolds(this.#global!, toMicros(nowMs), toMicroBytes(bytes));
  }

  /** Only right after `#ownHas` and `#globalHas` held at `nowMs`: every bucket is refilled and holds `bytes`. */
  #grant(
    principal: PrincipalState,
    meter: MeterState,
    buckets: readonly LiveBucket[],
    bytes: number,
    nowMs: number,
  ): void {
    const microBytes = toMicroBytes(bytes);
    for (const b of buckets) spendInPlace(b, microBytes);
    this.#account(principal, meter, bytes, nowMs);
  }

  /** A grant's bookkeeping besides the principal's and ceilings' buckets: tags, the global bucket, counts. */
  #account(principal: PrincipalState, meter: MeterState, bytes: number, nowMs: number): void {
    const streamStart = Math.max(principal.streamTime, meter.finishTag);
    meter.finishTag = streamStart + bytes;
    principal.streamTime = streamStart;
    principal.lastGrantShort = bytes < meter.quantumBytes;
    this.#noteActive(principal, nowMs);
    const microBytes = toMicroBytes(bytes);
    principal.lastActiveMs = nowMs;
    const start = this.#startTag(principal);
    principal.finishTag = start + bytes / principal.weight;
    this.#virtualTime = start;
    if (this.#globalSpec) spendInPlace(this.#global!, microBytes);
    this.#count(principal.id, bytes, nowMs);
  }

  #count(principalId: string, bytes: number, nowMs: number): void {
    this.#grantedBytes += bytes;
    this.#grantedQuanta++;
    this.#onGrant?.(principalId, bytes, nowMs);
  }

  /** Keeps who was granted last and when another principal was before it, for `#headroomFor`. */
  #noteActive(principal: PrincipalState, nowMs: number): void {
    if (principal !== this.#lastGranted) {
      this.#lastOther = this.#lastGranted;
      this.#lastOtherGrantMs = this.#lastGrantMs;
      this.#lastGranted = principal;
    }
    this.#lastGrantMs = nowMs;
  }

  /**
   * The global tokens a take of `principal` leaves in the bucket: the headroom when it is ahead of
   * the fair-queueing clock (it has had its turn: a busy transfer) and the other principal granted
   * most recently, within the last second, has nothing waiting and was last granted less than a
   * quantum (it sends small requests; a transfer that went idle was last granted whole quanta);
   * else none. That principal's next small request then finds its bytes at once instead
   * of waiting for the refill a big transfer drained. Principals that all keep a backlog leave no
   * headroom, so their shares and the reuse of an idle one's are as without it. The busy transfer
   * loses nothing over time (the bucket only stays fuller by the headroom, below its capacity), and
   * no bound changes: every grant still passes every bucket.
   */
  #headroomFor(principal: PrincipalState, nowMs: number): number {
    if (principal.finishTag <= this.#virtualTime) return 0;
    const mine = principal === this.#lastGranted;
    const other = mine ? this.#lastOther : this.#lastGranted;
    const otherMs = mine ? this.#lastOtherGrantMs : this.#lastGrantMs;
    return other !== null &&
      other.queue.length === 0 &&
      other.lastGrantShort &&
      nowMs - otherMs <= OTHERS_ACTIVE_WINDOW_MS
      ? this.#headroomBytes
      : 0;
  }

  /** Where a principal's next grant starts in virtual time: never before the clock (no banked credit). */
  #startTag(principal: PrincipalState): number {
    return Math.max(this.#virtualTime, principal.finishTag);
  }

  /** Grants every waiting take that may pass now, in weighted fair order, then arms the one timer. */
  #dispatch(nowMs: number): void {
    this.#reserved = null;
    // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent in what is granted: with nobody waiting the permit is checked by the next take first (#refusal), so only when the snapshot's fenced flag turns could differ; the line's other mutants are killed
    if (this.#ring.length > 0 && !this.#checkPermit()) return;
    for (;;) {
      const next = this.#nextReady(nowMs);
      if (next === undefined) break;
      const head = next.queue[0]!;
      const need = head.bytes + this.#headroomFor(next, nowMs);
      if (!this.#globalHas(need, nowMs)) {
        this.#reserved = next;
        this.#reservedNeed = need;
        break;
      }
      next.queue.shift();
      this.#settle(head);
      this.#grant(next, head.meter, head.buckets, head.bytes, nowMs);
      // Behind those of equal start tag, as a round-robin turn would be.
      this.#ring.splice(this.#ring.indexOf(next), 1);
      if (next.queue.length > 0) this.#ring.push(next);
      else next.inRing = false;
      head.resolve();
    }
    this.#arm(nowMs);
  }

  /**
   * The waiting principal with the smallest start tag whose buckets other than the global one hold its
   * head take beyond what they hold for a principal before it (`#holdCeilings`, made anew first).
   */
  #nextReady(nowMs: number): PrincipalState | undefined {
    this.#holdCeilings(nowMs);
    let best: PrincipalState | undefined;
    let bestTag = Infinity;
    for (const principal of this.#ring) {
      const tag = this.#startTag(principal);
      const head = principal.queue[0]!;
      if (tag >= bestTag || !this.#ownHas(principal, head.buckets, head.bytes, nowMs)) continue;
      best = principal;
      bestTag = tag;
    }
    return best;
  }

  /**
   * Holds the head take's bytes in each bucket other than the global one for the first principal in
   * fair order (smallest start tag, then arrival) through it whose own bucket holds that take: the
   * counterpart of the global reservation for group and repository ceilings. In all its ceilings, not
   * only a short one: else the others would be drained while it waits for that one, and it could wait
   * in turn for each for ever. Only its bytes: what a ceiling holds beyond them still goes to those
   * after it. A principal short in its own bucket holds nothing, as it reserves no global tokens
   * either: it never holds back tokens for a take that could not pass anyway. (A ready one holds too;
   * it is granted before anyone its hold could stop, or holds the global reservation that stops them.)
   */
  #holdCeilings(nowMs: number): void {
    const holds = this.#ceilingHolds;
    holds.clear();
    // Stryker disable next-line ConditionalExpression: equivalent: without ceilings a principal holds only its own bucket, which no other principal's take passes, so → false only runs the loop (→ true, holding nothing, is killed)
    if (this.#ceilings.size === 0) return;
    const nowUs = toMicros(nowMs);
    const ring = this.#ring;
    for (let at = 0; at < ring.length; at++) {
      const principal = ring[at]!;
      // The ring changes only before a dispatch, which makes the holds anew.
      principal.ringAt = at;
      const head = principal.queue[0]!;
      const own = principal.bucket;
      if (own !== null && !refilledHolds(own, nowUs, toMicroBytes(head.bytes))) continue;
      const tag = this.#startTag(principal);
      for (const b of head.buckets) {
        const holder = holds.get(b);
        // In ring order: an equal start tag arrived later, so the holder stays.
        if (holder === undefined || tag < this.#startTag(holder)) holds.set(b, principal);
      }
    }
  }

  /** One timer for the direction, due when the next waiting take can pass. */
  #arm(nowMs: number): void {
    if (this.#ring.length === 0) {
      this.#disarm();
      return;
    }
    let waitMs: number;
    if (this.#paused) {
      // Nothing passes until setRate lifts the pause, and that dispatches.
      this.#disarm();
      return;
    }
    if (this.#reserved !== null) {
      waitMs = msUntilHeld(this.#global!, toMicros(nowMs), toMicroBytes(this.#reservedNeed));
    } else {
      // Nobody is ready, so every principal in the ring waits for its own or a ceiling's bucket (and
      // what a ceiling holds for one before it: the first of those holders waits for no hold).
      waitMs = Infinity;
      for (const principal of this.#ring) waitMs = Math.min(waitMs, this.#msUntilOwn(principal, nowMs));
    }
    const delayMs = Math.max(1, Math.ceil(waitMs));
    const dueMs = nowMs + delayMs;
    // An armed timer due no later is kept: it fires first and re-arms if nothing can pass yet.
    // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent where they only replace the timer by one due at the computed time (→ false, `timer === null`, `<`); the line's → true and `>` mutants keep a later timer and are killed
    if (this.#timer !== null && this.#timerDueMs <= dueMs) return;
    this.#disarm();
    this.#timerDueMs = dueMs;
    this.#timer = this.#timers.setTimeout(() => {
      const dueMs = this.#timerDueMs;
      this.#timer = null;
      this.#timerDueMs = Infinity;
      const firedMs = this.#clock.monotonicMs();
      this.#countLateDrop(dueMs, firedMs);
      this.#dispatch(firedMs);
    }, delayMs);
  }

  /**
   * A wake-up for a take reserved on the global bucket fired at `firedMs`, after its due time: adds
   * what the bucket overflowed between the two (nothing when it fired in time, or when the bucket
   * still had room). Overflow before the due time is not counted, so a wake-up armed too late would
   * still show as lost rate, not as lateness.
   */
  #countLateDrop(dueMs: number, firedMs: number): void {
    const spec = this.#globalSpec;
    if (spec === null || this.#reserved === null) return;
    // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent: fired on time, both overflows are the same, so adding their difference adds 0 (→ true, never counting, is killed)
    if (firedMs <= dueMs) return;
    const state = this.#global!;
    // Bytes beyond capacity the bucket would hold at `ms` were it unbounded (floats: a metric, not the bound).
    const overflow = (ms: number) =>
      Math.max(
        0,
        state.microTokens / 1e6 +
          (Math.max(0, toMicros(ms) - state.atUs) / 1e6) * spec.rateBytesPerSec -
          spec.capacityBytes,
      );
    this.#lateDroppedBytes += overflow(firedMs) - overflow(dueMs);
  }

  #disarm(): void {
    this.#timers.clearTimeout(this.#timer);
    this.#timer = null;
    this.#timerDueMs = Infinity;
  }

  #waitingFull(): PolicyError {
    return new PolicyError('busy', `More than ${this.#maxWaiting} quanta are waiting for bandwidth.`, {
      headers: RETRY_AFTER,
    });
  }

  /**
   * The waiting bound is full and `principal` asks to wait: the principal with the most waiting takes
   * gives up its last one in fair order (refused `busy`) when it holds at least two more than
   * `principal`. Refusing the newcomer instead let one principal's streams (uploads have no
   * process-wide cap, and the per-principal caps may be raised) fill the bound and have every other
   * principal's transfer refused mid-body. Its first take stays, so its reservation and ceiling holds
   * still stand; the bound itself is unchanged.
   */
  #makeRoomFor(principal: PrincipalState): boolean {
    let heaviest: PrincipalState | undefined;
    for (const p of this.#ring) if (heaviest === undefined || p.queue.length > heaviest.queue.length) heaviest = p;
    if (heaviest === undefined || heaviest.queue.length < principal.queue.length + 2) return false;
    const waiter = heaviest.queue[heaviest.queue.length - 1]!;
    this.#remove(waiter);
    this.#settle(waiter);
    this.#rejectedBusy++;
    waiter.reject(this.#waitingFull());
    return true;
  }

  /** A waiting take whose signal fired: its quantum is dropped (never granted), others move on. */
  #cancel(waiter: Waiter): void {
    // Stryker disable next-line ConditionalExpression: equivalent: a settled take's listener is removed (#settle), so only a waiting take is cancelled; never cancelling (→ true) is killed
    if (waiter.meter.waiter !== waiter) return;
    this.#remove(waiter);
    this.#settle(waiter);
    waiter.reject(waiter.signal!.reason);
    this.#dispatch(this.#clock.monotonicMs());
  }

  #remove(waiter: Waiter): void {
    const { principal } = waiter;
    principal.queue.splice(principal.queue.indexOf(waiter), 1);
    if (principal.queue.length === 0) {
      principal.inRing = false;
      this.#ring.splice(this.#ring.indexOf(principal), 1);
    }
  }

  /** Bookkeeping shared by grant, cancel and reject: the take no longer waits. */
  #settle(waiter: Waiter): void {
    waiter.meter.waiter = null;
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    this.#waiting--;
  }

  #rejectAll(err: PolicyError): void {
    const ring = this.#ring;
    this.#ring = [];
    this.#reserved = null;
    this.#ceilingHolds.clear();
    this.#disarm();
    for (const principal of ring) {
      const queue = principal.queue.splice(0);
      principal.inRing = false;
      for (const waiter of queue) {
        this.#settle(waiter);
        waiter.reject(err);
      }
    }
  }

  /** False when fenced; fences first if the permit has just lapsed. */
  #checkPermit(): boolean {
    if (!this.#fenced && this.#isPermitted !== undefined && !this.#isPermitted()) this.fence();
    return !this.#fenced;
  }

  #checkOpen(): void {
    if (!this.#checkPermit()) throw new PolicyError('lease_lost');
  }
}

/**
 * The headroom of a global bucket: at most one quantum and half of what its capacity holds beyond a
 * quantum, so a waiting quantum plus the headroom still fits with room for a late wake-up (0 when the
 * capacity is one quantum: a slow ceiling has no tokens to spare).
 */
function headroomBytes(spec: BucketSpec, quantumBytes: number): number {
  return Math.min(quantumBytes, Math.floor((spec.capacityBytes - quantumBytes) / 2));
}

/** Within this long of another principal's grant, a waiting take leaves the global headroom. */
const OTHERS_ACTIVE_WINDOW_MS = 1000;

/** Inserts a waiting take after every take of the principal whose key is at most its own. */
function enqueue(queue: Waiter[], waiter: Waiter): void {
  let at = queue.length;
  while (at > 0 && queue[at - 1]!.key > waiter.key) at--;
  queue.splice(at, 0, waiter);
}

function checkCeiling(ceiling: Ceiling): Ceiling {
  if (typeof ceiling.key !== 'string' || ceiling.key === '')
    throw new TypeError('ceiling key: expected a non-empty string');
  if (!Number.isSafeInteger(ceiling.rateBytesPerSec) || ceiling.rateBytesPerSec < 1)
    throw new RangeError(`ceiling ${ceiling.key}: expected a rate of at least 1 B/s, got ${ceiling.rateBytesPerSec}`);
  return ceiling;
}

function positiveInt(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 1)
    throw new RangeError(`${name}: expected a positive integer, got ${value}`);
  return value;
}
