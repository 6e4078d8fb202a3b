/**
 * What the router counts for its metrics (router-metrics.ts reads these at scrape time): plain
 * numbers, so a router without a metrics port pays nothing more than an increment.
 */

/** Why a read was sent once more: the first gateway's 502/503/504 before any byte, or no answer at all. */
export type RetryReason = 'gateway_502' | 'gateway_503' | 'gateway_504' | 'connection';
export const RETRY_REASONS: readonly RetryReason[] = ['gateway_502', 'gateway_503', 'gateway_504', 'connection'];

/**
 * Why a request was answered 503 by the router itself: `in_flight`, its bound on requests being
 * proxied was reached (router-server.ts); `descriptors`, connecting to the gateway failed for want
 * of the router's own descriptors or local ports (upstream-errors.ts `OWN_FAILURES`).
 */
export type OverloadReason = 'in_flight' | 'descriptors';
export const OVERLOAD_REASONS: readonly OverloadReason[] = ['in_flight', 'descriptors'];

export class RouterStats {
  readonly retries: Record<RetryReason, number> = { gateway_502: 0, gateway_503: 0, gateway_504: 0, connection: 0 };
  ejections = 0;
  readonly overloaded: Record<OverloadReason, number> = { in_flight: 0, descriptors: 0 };
  /** Client requests being proxied now (each holds at most one upstream request). */
  inFlight = 0;
}

/** The retry reason of a gateway's answer status, or undefined when that status is not retried. */
export function retryReasonOf(status: number): RetryReason | undefined {
  return status === 502 ? 'gateway_502' : status === 503 ? 'gateway_503' : status === 504 ? 'gateway_504' : undefined;
}
