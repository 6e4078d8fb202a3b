/**
 * Outlier detection on reads, after Envoy's (`consecutive_5xx`, `base_ejection_time`,
 * `max_ejection_percent`): a gateway whose reads end `consecutive5xx` times in a row in a failure of
 * its own (proxied-request.ts decides which: no answer, or a 5xx another gateway did not give) is ejected from reads for `baseEjectionMs` × its ejection multiplier, before
 * its probe notices anything. The multiplier grows by one per ejection (at most 10) and shrinks by one
 * per base period the gateway spends back in rotation, so a gateway that keeps failing stays out
 * longer each time and one that recovered starts short again. At most `maxEjectionPercent` of the
 * known gateways are ejected at once (rounded down, at least one while two or more are known), and
 * never all of them: past the bound a gateway keeps its count and is ejected once a place frees up.
 * Pure: times are arguments (monotonic milliseconds).
 */

export interface OutlierOptions {
  /** The gateway's own failures (no answer, a 5xx others did not give) in a row that eject; 0 turns detection off. */
  readonly consecutive5xx: number;
  readonly baseEjectionMs: number;
  readonly maxEjectionPercent: number;
}

/** The longest ejection, in base periods (Envoy's `max_ejection_time` default is 10 × its base). */
export const MAX_EJECTION_MULTIPLIER = 10;

interface OutlierState {
  failuresInARow: number;
  multiplier: number;
  /** Ejected until then (monotonic ms); 0 when not ejected. */
  ejectedUntil: number;
  /** When it last came back into rotation (for the multiplier's decay). */
  backSince: number;
}

export interface Ejection {
  readonly url: string;
  readonly forMs: number;
  readonly failuresInARow: number;
}

/** How many of `total` gateways may be ejected at once. */
export function ejectionBound(total: number, maxEjectionPercent: number): number {
  if (total < 2 || maxEjectionPercent <= 0) return 0;
  return Math.min(total - 1, Math.max(1, Math.floor((total * maxEjectionPercent) / 100)));
}

export class OutlierDetector {
  readonly #options: OutlierOptions;
  readonly #states = new Map<string, OutlierState>();

  constructor(options: OutlierOptions) {
    this.#options = options;
  }

  get enabled(): boolean {
    return this.#options.consecutive5xx > 0;
  }

  /**
   * A read's outcome at `url` (`failed`: a failure of the gateway's own); `total` is how many
   * gateways are known. Returns the ejection this outcome caused, if any.
   */
  record(url: string, failed: boolean, nowMs: number, total: number): Ejection | undefined {
    if (!this.enabled) return undefined;
    const state = this.#state(url, nowMs);
    if (!failed) {
      state.failuresInARow = 0;
      return undefined;
    }
    state.failuresInARow++;
    if (state.failuresInARow < this.#options.consecutive5xx || this.isEjected(url, nowMs)) return undefined;
    if (this.ejectedCount(nowMs) >= ejectionBound(total, this.#options.maxEjectionPercent)) return undefined;
    // The multiplier shrinks by one per base period spent back in rotation, then grows by this one.
    const decay = Math.floor((nowMs - state.backSince) / this.#options.baseEjectionMs);
    state.multiplier = Math.min(MAX_EJECTION_MULTIPLIER, Math.max(0, state.multiplier - decay) + 1);
    const forMs = this.#options.baseEjectionMs * state.multiplier;
    state.ejectedUntil = nowMs + forMs;
    const ejection = { url, forMs, failuresInARow: state.failuresInARow };
    state.failuresInARow = 0;
    return ejection;
  }

  isEjected(url: string, nowMs: number): boolean {
    const state = this.#states.get(url);
    if (!state || state.ejectedUntil === 0) return false;
    if (nowMs < state.ejectedUntil) return true;
    // Back in rotation: the decay of its multiplier counts from here.
    state.backSince = state.ejectedUntil;
    state.ejectedUntil = 0;
    return false;
  }

  ejectedCount(nowMs: number): number {
    let count = 0;
    for (const url of this.#states.keys()) if (this.isEjected(url, nowMs)) count++;
    return count;
  }

  /** A gateway no longer known. */
  forget(url: string): void {
    this.#states.delete(url);
  }

  #state(url: string, nowMs: number): OutlierState {
    let state = this.#states.get(url);
    if (!state) {
      state = { failuresInARow: 0, multiplier: 0, ejectedUntil: 0, backSince: nowMs };
      this.#states.set(url, state);
    }
    return state;
  }
}
