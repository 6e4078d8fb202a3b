/**
 * The token bucket of ADR 0008, as pure functions over plain records; time is an argument.
 *
 * Units: the monotonic clock is read in milliseconds and rounded to whole microseconds
 * (`toMicros`); tokens are kept in micro-bytes (bytes × 10^6), so a bucket of rate R gains exactly R
 * micro-bytes per microsecond. Every quantity stays an integer below 2^53, so refill, take and the
 * bound below are exact, with no drift from floating-point rounding.
 *
 * Bound. The bucket starts holding `burstBytes` and never holds more than `capacityBytes`; a take of
 * n bytes needs n whole bytes present. Hence, on the microsecond clock:
 *   - from start:                      granted(start, t] ≤ R × (t − start) + burstBytes
 *   - from any instant s (in particular from a full bucket): granted[s, t] ≤ R × (t − s) + capacityBytes
 * `capacityBytes` = max(burst, quantum) equals the burst for every rate ≥ 10 B/s (the quantum never
 * exceeds an enabled burst of at least one byte). For rates 1..9 B/s the burst rounds down to 0 and
 * nothing could ever pass; there the quantum is one byte and the bucket holds at most that one byte,
 * so the bound from start is R × t exactly and from a full bucket R × t + 1 byte.
 */

export const MIB = 1_048_576;
/** A quantum never exceeds 64 KiB (ADR 0008). */
export const MAX_QUANTUM_BYTES = 65_536;
/** Largest rate accepted: 1 TiB/s, as `ARKVORY_*_BYTES_PER_SECOND` allow; keeps all arithmetic exact. */
export const MAX_RATE_BYTES_PER_SEC = 2 ** 40;
const MICRO = 1_000_000;

/** Burst of a rate: floor(min(rate / 10, 1 MiB)); 0 for a disabled (0) rate. */
export function burstBytes(rateBytesPerSec: number): number {
  checkRate(rateBytesPerSec, 'rateBytesPerSec');
  return Math.floor(Math.min(rateBytesPerSec / 10, MIB));
}

/**
 * The quantum for a set of rates (0 = that ceiling is off): at most 64 KiB and at most every enabled
 * burst, but at least one byte, so that rates below 10 B/s (burst 0) still pass bytes.
 */
export function quantumBytesFor(ratesBytesPerSec: readonly number[]): number {
  let quantum = MAX_QUANTUM_BYTES;
  for (const rate of ratesBytesPerSec) {
    const burst = burstBytes(rate);
    if (rate > 0) quantum = Math.min(quantum, burst);
  }
  return Math.max(1, quantum);
}

export interface BucketSpec {
  /** 0 = disabled: every take passes. */
  readonly rateBytesPerSec: number;
  /** What the bucket holds at start (and the ADR's burst). */
  readonly burstBytes: number;
  /** The most it ever holds: max(burst, quantum). */
  readonly capacityBytes: number;
}

export interface BucketState {
  /** Tokens in micro-bytes (bytes × 10^6). */
  readonly microTokens: number;
  /** Microsecond instant up to which refill has been credited. */
  readonly atUs: number;
}

export function createBucketSpec(rateBytesPerSec: number, quantumBytes: number): BucketSpec {
  const burst = burstBytes(rateBytesPerSec);
  if (!Number.isSafeInteger(quantumBytes) || quantumBytes < 1 || quantumBytes > MAX_QUANTUM_BYTES) {
    throw new RangeError(`quantumBytes: expected an integer from 1 to ${MAX_QUANTUM_BYTES}, got ${quantumBytes}`);
  }
  if (rateBytesPerSec > 0 && quantumBytes > Math.max(1, burst)) {
    throw new RangeError(
      `quantumBytes: ${quantumBytes} exceeds the burst ${burst} of rate ${rateBytesPerSec} (at least 1 byte)`,
    );
  }
  return { rateBytesPerSec, burstBytes: burst, capacityBytes: rateBytesPerSec > 0 ? Math.max(burst, quantumBytes) : 0 };
}

/**
 * The spec of a bucket whose rate changes while the quantum stays (a leased share that follows the
 * weights): the burst follows the rate; the capacity is max(burst, quantum), so a quantum still fits.
 * The bound is then rate × t + capacity from any instant, the same formula as above.
 */
export function rerateBucketSpec(rateBytesPerSec: number, quantumBytes: number): BucketSpec {
  const burst = burstBytes(rateBytesPerSec);
  if (rateBytesPerSec === 0) throw new RangeError('rateBytesPerSec: a re-rated bucket needs a rate above 0');
  return { rateBytesPerSec, burstBytes: burst, capacityBytes: Math.max(burst, quantumBytes) };
}

/**
 * The bucket moved to `to`: what it earned at the old rate (`from`; null when it was paused and
 * earned nothing) is credited up to now, then capped at the new capacity.
 */
export function rerateBucket(from: BucketSpec | null, to: BucketSpec, state: BucketState, nowMs: number): BucketState {
  const refilled =
    from === null ? { microTokens: state.microTokens, atUs: toMicros(nowMs) } : refillBucket(from, state, nowMs);
  return {
    microTokens: Math.min(refilled.microTokens, to.capacityBytes * MICRO),
    atUs: Math.max(refilled.atUs, toMicros(nowMs)),
  };
}

/** The monotonic clock as the bucket sees it: whole microseconds. */
export function toMicros(nowMs: number): number {
  return Math.round(nowMs * 1000);
}

/** A bucket that starts holding its burst. */
export function startBucket(spec: BucketSpec, nowMs: number): BucketState {
  return { microTokens: spec.burstBytes * MICRO, atUs: toMicros(nowMs) };
}

/** Credits the time elapsed since `state.atUs`, capped at capacity. A clock that goes back credits nothing. */
export function refillBucket(spec: BucketSpec, state: BucketState, nowMs: number): BucketState {
  const nowUs = toMicros(nowMs);
  // Stryker disable next-line EqualityOperator: equivalent: at nowUs === atUs nothing has elapsed, so the credit below is 0 (the other mutant here, >, is killed)
  if (nowUs <= state.atUs) return state;
  return { microTokens: state.microTokens + credit(spec, state, nowUs), atUs: nowUs };
}

/** What a bucket earns from `state.atUs` to `nowUs` (later), capped at what it misses of its capacity. */
function credit(spec: BucketSpec, state: BucketState, nowUs: number): number {
  // A disabled bucket (rate 0, capacity 0) gets a credit of 0.
  const missing = spec.capacityBytes * MICRO - state.microTokens;
  // A product below 2^53 is exact; one above is inexact but far above missing, so min still gives
  // missing exactly (a full bucket, missing 0, gets 0).
  return Math.min(missing, (nowUs - state.atUs) * spec.rateBytesPerSec);
}

/** Whole bytes available now. */
export function availableBytes(spec: BucketSpec, state: BucketState, nowMs: number): number {
  if (spec.rateBytesPerSec === 0) return Infinity;
  return Math.floor(refillBucket(spec, state, nowMs).microTokens / MICRO);
}

export function hasTokens(spec: BucketSpec, state: BucketState, bytes: number, nowMs: number): boolean {
  if (spec.rateBytesPerSec === 0) return true;
  return refillBucket(spec, state, nowMs).microTokens >= bytes * MICRO;
}

/**
 * A bucket the governor owns and updates in place: a take refills, checks and spends each bucket once
 * (`takeEachInPlace`; a waiting take `refilledHolds`, then `spendInPlace`), with the arithmetic of
 * `refillBucket` and `takeTokens` and no new record per bucket per take. It carries its rate and
 * capacity itself, so a take reads one object per bucket; `liveBucket` makes one for a spec.
 */
export interface LiveBucket {
  microTokens: number;
  atUs: number;
  readonly rateBytesPerSec: number;
  /** The spec's capacity in micro-bytes. */
  readonly capacityMicro: number;
}

/** A live bucket of `spec` holding what `state` holds. */
export function liveBucket(spec: BucketSpec, state: BucketState): LiveBucket {
  return {
    microTokens: state.microTokens,
    atUs: state.atUs,
    rateBytesPerSec: spec.rateBytesPerSec,
    capacityMicro: spec.capacityBytes * MICRO,
  };
}

/** `bytes` in the unit of a bucket's tokens (micro-bytes). */
export function toMicroBytes(bytes: number): number {
  return bytes * MICRO;
}

/**
 * `refillBucket` in place at `nowUs` (whole microseconds, `toMicros`), then whether the bucket
 * holds `microBytes` (`toMicroBytes`). `credit` written out: this runs for every bucket of a take.
 */
export function refilledHolds(bucket: LiveBucket, nowUs: number, microBytes: number): boolean {
  const atUs = bucket.atUs;
  // Stryker disable next-line EqualityOperator: equivalent: at nowUs === atUs nothing has elapsed, so the credit below is 0
  if (nowUs > atUs) {
    const tokens = bucket.microTokens;
    // As in `credit`: exact below 2^53, and far above the room left when not. A comparison, not
    // `Math.min`: cheaper, and a full bucket gets its capacity exactly.
    const earned = (nowUs - atUs) * bucket.rateBytesPerSec;
    // Stryker disable next-line EqualityOperator: equivalent: when what was earned exactly fills the room, both sides give the capacity
    bucket.microTokens = earned < bucket.capacityMicro - tokens ? tokens + earned : bucket.capacityMicro;
    bucket.atUs = nowUs;
  }
  return bucket.microTokens >= microBytes;
}

/**
 * `refilledHolds`, then `spendInPlace`, on each of `buckets` at one instant, all or none, in one
 * pass: true when `microBytes` were taken from every one; false when one falls short, with what was
 * taken from those before it given back (refilled to the same instant, each is then as if only
 * refilled). This is every take that passes at once, so the arithmetic is written out in the loop:
 * calls to a per-bucket function were inlined into the governor's take in some processes and not in
 * others, and a take through four buckets then cost up to 10 % more (docs/results/nested-buckets.md).
 */
export function takeEachInPlace(buckets: readonly LiveBucket[], nowUs: number, microBytes: number): boolean {
  for (let i = 0; i < buckets.length; i++) {
    const bucket = buckets[i]!;
    const atUs = bucket.atUs;
    let tokens = bucket.microTokens;
    // Stryker disable next-line EqualityOperator: equivalent: at nowUs === atUs nothing has elapsed, so the credit below is 0
    if (nowUs > atUs) {
      const earned = (nowUs - atUs) * bucket.rateBytesPerSec;
      const room = bucket.capacityMicro - tokens;
      // Stryker disable next-line EqualityOperator: equivalent: as in `refilledHolds`, exactly filling the room gives the capacity either way
      tokens = earned < room ? tokens + earned : bucket.capacityMicro;
      bucket.atUs = nowUs;
    }
    if (tokens >= microBytes) {
      bucket.microTokens = tokens - microBytes;
      continue;
    }
    bucket.microTokens = tokens;
    for (let j = 0; j < i; j++) buckets[j]!.microTokens += microBytes;
    return false;
  }
  return true;
}

/**
 * `msUntilTokens` for a live bucket with a rate above 0 (the global one unpaused, a principal's, a
 * ceiling's), in place: milliseconds until it holds `microBytes` (0 if now; Infinity if more than it
 * can hold).
 */
export function msUntilHeld(bucket: LiveBucket, nowUs: number, microBytes: number): number {
  if (microBytes > bucket.capacityMicro) return Infinity;
  if (refilledHolds(bucket, nowUs, microBytes)) return 0;
  return Math.ceil((microBytes - bucket.microTokens) / bucket.rateBytesPerSec) / 1000;
}

/** Removes `microBytes` from a bucket refilled up to now that holds them (`refilledHolds`). */
export function spendInPlace(bucket: LiveBucket, microBytes: number): void {
  bucket.microTokens -= microBytes;
}

/** Takes `bytes` if they are all there; `null` when not (the state is then unchanged). */
export function takeTokens(spec: BucketSpec, state: BucketState, bytes: number, nowMs: number): BucketState | null {
  if (spec.rateBytesPerSec === 0) return state;
  const refilled = refillBucket(spec, state, nowMs);
  if (refilled.microTokens < bytes * MICRO) return null;
  return { microTokens: refilled.microTokens - bytes * MICRO, atUs: refilled.atUs };
}

/**
 * Milliseconds until `bytes` are available (0 if now; Infinity if more than the bucket can hold).
 * Used only to schedule a wake-up; a take still checks exactly, so an early wake just waits again.
 */
export function msUntilTokens(spec: BucketSpec, state: BucketState, bytes: number, nowMs: number): number {
  if (spec.rateBytesPerSec === 0) return 0;
  if (bytes > spec.capacityBytes) return Infinity;
  const need = bytes * MICRO - refillBucket(spec, state, nowMs).microTokens;
  return Math.max(0, Math.ceil(need / spec.rateBytesPerSec) / 1000);
}

function checkRate(rate: number, name: string): void {
  if (!Number.isSafeInteger(rate) || rate < 0 || rate > MAX_RATE_BYTES_PER_SEC) {
    throw new RangeError(`${name}: expected an integer from 0 (off) to ${MAX_RATE_BYTES_PER_SEC}, got ${rate}`);
  }
}
