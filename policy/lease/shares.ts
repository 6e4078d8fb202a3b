/**
 * Pure arithmetic of the shared download budget (read-gateways spec): each of SLOTS participants
 * gets floor(rate / SLOTS); the remainder is never spent; a local limit can only lower a share.
 */
export const MIN_SLOTS = 2;
export const MAX_SLOTS = 16;
export const MIN_RATE_PER_SLOT = 65_536;
export const MAX_RATE = 2 ** 40;

/** floor(rate / slots); rate 0 (a disabled per-principal ceiling) stays 0. */
export function shareOf(rateBytesPerSec: number, slots: number): number {
  if (!Number.isSafeInteger(slots) || slots < MIN_SLOTS || slots > MAX_SLOTS)
    throw new RangeError(`slots must be ${MIN_SLOTS}..${MAX_SLOTS}, got ${slots}`);
  if (!Number.isSafeInteger(rateBytesPerSec) || rateBytesPerSec < 0)
    throw new RangeError(`rate must be a non-negative integer, got ${rateBytesPerSec}`);
  return Math.floor(rateBytesPerSec / slots);
}

/**
 * The ceiling this process enforces: the share, lowered by a local limit when one is set (> 0).
 * A share of 0 means "no shared ceiling" only for the per-principal rate, where 0 disables it.
 */
export function effectiveRate(share: number, localLimit: number): number {
  if (share === 0) return localLimit;
  if (localLimit === 0) return share;
  return Math.min(share, localLimit);
}

export interface SharedBudget {
  downloadBytesPerSec: number;
  downloadBytesPerSecPerPrincipal: number;
}

/** The download ceilings of one participant from the global policy and its local variables. */
export function localDownloadCeilings(policy: { slots: number } & SharedBudget, local: SharedBudget): SharedBudget {
  return {
    downloadBytesPerSec: effectiveRate(shareOf(policy.downloadBytesPerSec, policy.slots), local.downloadBytesPerSec),
    downloadBytesPerSecPerPrincipal: effectiveRate(
      shareOf(policy.downloadBytesPerSecPerPrincipal, policy.slots),
      local.downloadBytesPerSecPerPrincipal,
    ),
  };
}
