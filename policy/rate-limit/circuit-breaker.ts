/**
 * Consecutive-failure circuit breaker for the rules service. Pure: time comes in as `nowMs`.
 * Closed: every miss may ask. After `threshold` consecutive failures (or one failure that opens it at
 * once: a timeout, so a hung service costs a request at most one timeout) it opens for `openMs`: no
 * request asks (their added cost is zero). Then one probe may ask (half-open); its success closes
 * the circuit, its failure opens it again for another `openMs`. A failure that says how long to
 * wait (a 503's Retry-After) opens it at once for that long, if longer than `openMs`.
 */
export type BreakerState = 'closed' | 'open' | 'half_open';

export interface CircuitBreaker {
  readonly state: BreakerState;
  /** Whether a caller may ask now; in half-open only the first caller (the probe) may. */
  allow(nowMs: number): boolean;
  success(): void;
  /** `opensAtOnce`: open now, whatever the count (a timeout); `openForMs`: for this long if longer. */
  failure(nowMs: number, opensAtOnce?: boolean, openForMs?: number): void;
}

export function createCircuitBreaker(options: { threshold: number; openMs: number }): CircuitBreaker {
  let state: BreakerState = 'closed';
  let failures = 0;
  let openUntilMs = 0;
  return {
    get state() {
      return state;
    },
    allow(nowMs) {
      if (state === 'closed') return true;
      if (state === 'open' && nowMs >= openUntilMs) {
        state = 'half_open';
        return true;
      }
      return false;
    },
    success() {
      state = 'closed';
      failures = 0;
    },
    failure(nowMs, opensAtOnce = false, openForMs = 0) {
      failures++;
      if (opensAtOnce || state === 'half_open' || failures >= options.threshold) {
        state = 'open';
        openUntilMs = nowMs + Math.max(options.openMs, openForMs);
      }
    },
  };
}
