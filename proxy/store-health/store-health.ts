/**
 * Whether this gateway can reach its artifact store, from two kinds of evidence: the periodic probe
 * (store-monitor.ts) and the outcome of real store calls (tracked-store.ts). Pure: no I/O, time from
 * the injected clock.
 *
 * States and moves (docs/router.md, "Store health"):
 * - `ok` → `degraded` on any failure (a failed probe or a store call that failed for the store's sake);
 * - `fall` failures in a row (probes and calls alike, no success between) → `unreachable`;
 * - a success of either kind resets the failure count; it moves `degraded` → `ok` only once the last
 *   failure is `quietMs` old and the probe passes;
 * - `unreachable` is left only by the probe: `rise` passing probes in a row → `degraded` (then `ok` as
 *   above). Real calls cannot bring it back (while unreachable they are refused: tracked-store.ts).
 * The asymmetry is the hysteresis: one passing probe between failures never puts a flapping store back.
 */
import type { Clock } from '../../policy/clock.ts';

export type StoreState = 'ok' | 'degraded' | 'unreachable';
export const STORE_STATES: readonly StoreState[] = ['ok', 'degraded', 'unreachable'];

export interface StoreHealthOptions {
  /** Failures in a row that make the store unreachable. */
  readonly fall: number;
  /** Passing probes in a row that bring an unreachable store back (to `degraded`). */
  readonly rise: number;
  /** How long after its last failure a store stays `degraded`. */
  readonly quietMs: number;
}

/** The defaults for a probe period: fall 2, rise 2, quiet for 2 periods. */
export function storeHealthOptions(probeIntervalMs: number): StoreHealthOptions {
  return { fall: 2, rise: 2, quietMs: 2 * probeIntervalMs };
}

export interface StoreFailure {
  /** A catalogue code (`upstream_unreachable`, `upstream_timeout`, `storage_mismatch`, …). */
  readonly code: string;
  /** Wall-clock time of the failure (ISO 8601 in responses). */
  readonly atMs: number;
}

export interface StoreHealthSnapshot {
  readonly state: StoreState;
  /** Wall-clock time the current state began. */
  readonly sinceMs: number;
  readonly lastError: StoreFailure | undefined;
  readonly failuresInARow: number;
}

export interface StoreTransition {
  readonly from: StoreState;
  readonly to: StoreState;
  readonly cause: 'probe' | 'request';
  readonly lastError: StoreFailure | undefined;
}

export class StoreHealth {
  readonly #options: StoreHealthOptions;
  readonly #clock: Clock;
  #state: StoreState = 'ok';
  #sinceMs: number;
  #failures = 0;
  #passes = 0;
  #lastFailureMono = Number.NEGATIVE_INFINITY;
  #lastError: StoreFailure | undefined;
  readonly #listeners: Array<(t: StoreTransition) => void> = [];
  readonly #failureListeners: Array<(source: 'probe' | 'request', code: string) => void> = [];

  constructor(options: StoreHealthOptions, clock: Clock) {
    if (options.fall < 1 || options.rise < 1) throw new RangeError('fall and rise must be at least 1');
    this.#options = options;
    this.#clock = clock;
    this.#sinceMs = clock.wallMs();
  }

  get state(): StoreState {
    return this.#state;
  }

  get isUnreachable(): boolean {
    return this.#state === 'unreachable';
  }

  onTransition(listener: (t: StoreTransition) => void): void {
    this.#listeners.push(listener);
  }

  /** Every failure as it is recorded (for the failure counter). */
  onFailure(listener: (source: 'probe' | 'request', code: string) => void): void {
    this.#failureListeners.push(listener);
  }

  /** A probe's outcome: `undefined` when it passed, else the failure's code. */
  recordProbe(failureCode: string | undefined): StoreTransition | undefined {
    if (failureCode !== undefined) return this.#fail(failureCode, 'probe');
    this.#failures = 0;
    this.#passes++;
    if (this.#state === 'unreachable') {
      return this.#passes >= this.#options.rise ? this.#move('degraded', 'probe') : undefined;
    }
    if (this.#state === 'degraded' && this.#clock.monotonicMs() - this.#lastFailureMono >= this.#options.quietMs)
      return this.#move('ok', 'probe');
    return undefined;
  }

  /** A real store call's outcome: `undefined` when it succeeded, else the failure's code. */
  recordRequest(failureCode: string | undefined): StoreTransition | undefined {
    if (failureCode !== undefined) return this.#fail(failureCode, 'request');
    // Only the probe brings an unreachable store back (a call that slipped through proves little).
    if (this.#state !== 'unreachable') this.#failures = 0;
    return undefined;
  }

  snapshot(): StoreHealthSnapshot {
    return {
      state: this.#state,
      sinceMs: this.#sinceMs,
      lastError: this.#lastError,
      failuresInARow: this.#failures,
    };
  }

  #fail(code: string, cause: 'probe' | 'request'): StoreTransition | undefined {
    this.#failures++;
    // Only probes count towards `rise`; a failure of any kind starts it again.
    this.#passes = 0;
    this.#lastFailureMono = this.#clock.monotonicMs();
    this.#lastError = { code, atMs: this.#clock.wallMs() };
    for (const listener of this.#failureListeners) listener(cause, code);
    if (this.#state !== 'unreachable' && this.#failures >= this.#options.fall) return this.#move('unreachable', cause);
    if (this.#state === 'ok') return this.#move('degraded', cause);
    return undefined;
  }

  #move(to: StoreState, cause: 'probe' | 'request'): StoreTransition {
    const transition: StoreTransition = { from: this.#state, to, cause, lastError: this.#lastError };
    this.#state = to;
    this.#sinceMs = this.#clock.wallMs();
    for (const listener of this.#listeners) listener(transition);
    return transition;
  }
}

/** The `store` field of `/health/status` and `/health/ready` (no address: the route is public). */
export function storeHealthBody(snapshot: StoreHealthSnapshot): Record<string, unknown> {
  return {
    state: snapshot.state,
    since: new Date(snapshot.sinceMs).toISOString(),
    lastError: snapshot.lastError
      ? { code: snapshot.lastError.code, at: new Date(snapshot.lastError.atMs).toISOString() }
      : null,
  };
}
