/**
 * Storage quotas, pure: whether a reservation fits, the refusal's numbers, and how far a chunked
 * upload's reservation grows. Usage is what the catalog references plus live reservations
 * (storage-quotas.ts reads them under a lock); this decides on those numbers only.
 */
import { PolicyError } from '../errors.ts';

export const QUOTA_SCOPES = ['repository', 'principal'] as const;
export type QuotaScope = (typeof QUOTA_SCOPES)[number];

/** One quota and what counts against it now, besides the reservation being decided. */
export interface QuotaState {
  readonly scope: QuotaScope;
  /** A repository name, or a principal id. */
  readonly subject: string;
  readonly limitBytes: number;
  /** Bytes the catalog references (each blob once per repository). */
  readonly storedBytes: number;
  /** Bytes live reservations of other uploads hold. */
  readonly reservedBytes: number;
  /**
   * What the reservation being decided adds to the usage when it is pinned to a blob: 0 when the
   * subject already counts that blob (stored, or reserved by another upload of it); undefined for
   * an ordinary reservation, which adds all its bytes.
   */
  readonly addedBytes?: number | undefined;
}

export interface QuotaRefusal {
  readonly state: QuotaState;
  readonly requestedBytes: number;
  /** Stored + reserved. */
  readonly usageBytes: number;
  /** What is left of the limit (0 when usage already reaches or passes it). */
  readonly remainingBytes: number;
}

/**
 * The first quota that `requestedBytes` more (a state's `addedBytes` when set) would exceed (usage +
 * requested > limit), or undefined. A pinned reservation that adds nothing fits every quota, even
 * one lowered below its usage: bytes already counted are no further use of it.
 */
export function quotaRefusal(states: readonly QuotaState[], requestedBytes: number): QuotaRefusal | undefined {
  for (const state of states) {
    if (state.addedBytes === 0) continue;
    const added = state.addedBytes ?? requestedBytes;
    const usageBytes = state.storedBytes + state.reservedBytes;
    if (usageBytes + added > state.limitBytes)
      return {
        state,
        requestedBytes: added,
        usageBytes,
        remainingBytes: Math.max(0, state.limitBytes - usageBytes),
      };
  }
  return undefined;
}

/** The client's answer: `quota_exceeded` with the quota, its usage and what is left, in the body. */
export function quotaExceeded(refusal: QuotaRefusal): PolicyError {
  const { state } = refusal;
  return new PolicyError(
    'quota_exceeded',
    `The ${state.scope} quota of ${state.limitBytes} bytes has ${refusal.remainingBytes} bytes left; this upload needs ${refusal.requestedBytes}.`,
    {
      details: {
        scope: state.scope,
        subject: state.subject,
        quotaBytes: state.limitBytes,
        usageBytes: refusal.usageBytes,
        remainingBytes: refusal.remainingBytes,
        requestedBytes: refusal.requestedBytes,
      },
    },
  );
}

/**
 * What a chunked upload's reservation grows to once `receivedBytes` passed `reservedBytes`: the next
 * multiple of `stepBytes`, so an upload asks PostgreSQL once per step rather than once per chunk.
 * The caller falls back to exactly `receivedBytes` when the step does not fit.
 */
export function nextReservationBytes(receivedBytes: number, stepBytes: number): number {
  return Math.ceil(receivedBytes / stepBytes) * stepBytes;
}
