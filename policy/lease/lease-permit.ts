/**
 * Pure state of a slot lease as this process sees it (read-gateways spec, "Share ownership"):
 * - the database reserves the slot for 10 s from each renewal (database time);
 * - a renewal starts 2 s after the previous *confirmation*, i.e. the moment its answer arrived
 *   (not the start of the confirming request);
 * - the local permit lasts at most 8 s from the START of the renewal request that confirmed it,
 *   waiting for a connection and the answer included, checked on both monotonic and wall time;
 * - once the permit has lapsed the process is fenced for good: no later answer revives it.
 */
export const RESERVATION_MS = 10_000;
export const RENEW_AFTER_MS = 2_000;
export const PERMIT_MS = 8_000;

export interface Instant {
  monotonicMs: number;
  wallMs: number;
}

export type PermitState =
  | {
      kind: 'held';
      generation: number;
      /** 8 s after the start of the request that confirmed it, on both clocks. */
      validUntil: Instant;
      /** When that confirmation arrived: the next renewal starts 2 s later. */
      lastConfirmedAt: Instant;
    }
  | { kind: 'fenced'; reason: string };

/** The permit right after acquisition, counted from when the acquiring request started. */
export function acquired(generation: number, requestStartedAt: Instant, answeredAt: Instant): PermitState {
  return confirmRenewal(
    {
      kind: 'held',
      generation,
      validUntil: { monotonicMs: Number.POSITIVE_INFINITY, wallMs: Number.POSITIVE_INFINITY },
      lastConfirmedAt: requestStartedAt,
    },
    requestStartedAt,
    answeredAt,
  );
}

export function isPermitValid(state: PermitState, now: Instant): boolean {
  return (
    state.kind === 'held' && now.monotonicMs < state.validUntil.monotonicMs && now.wallMs < state.validUntil.wallMs
  );
}

/** Applies the passage of time: a lapsed permit becomes fenced. */
export function observe(state: PermitState, now: Instant): PermitState {
  if (state.kind === 'held' && !isPermitValid(state, now))
    return { kind: 'fenced', reason: 'the lease permit expired before a renewal was confirmed' };
  return state;
}

/**
 * A renewal that the database confirmed. It extends the permit to 8 s after the request started —
 * unless the permit had already lapsed when the answer arrived (a late answer never revives it) —
 * and the next renewal is due 2 s after the answer arrived.
 */
export function confirmRenewal(state: PermitState, requestStartedAt: Instant, answeredAt: Instant): PermitState {
  const current = observe(state, answeredAt);
  if (current.kind === 'fenced') return current;
  const validUntil = {
    monotonicMs: requestStartedAt.monotonicMs + PERMIT_MS,
    wallMs: requestStartedAt.wallMs + PERMIT_MS,
  };
  const next: PermitState = { kind: 'held', generation: current.generation, validUntil, lastConfirmedAt: answeredAt };
  return observe(next, answeredAt);
}

/** The database found no row for (slot, owner, generation) unexpired: someone else owns the slot now. */
export function renewalRejected(_state: PermitState): PermitState {
  return {
    kind: 'fenced',
    reason: 'the database no longer holds this lease (expired or taken over by a newer generation)',
  };
}

/** When the next renewal should start (monotonic ms): 2 s after the last confirmation arrived. */
export function nextRenewalAt(state: PermitState): number | undefined {
  return state.kind === 'held' ? state.lastConfirmedAt.monotonicMs + RENEW_AFTER_MS : undefined;
}
