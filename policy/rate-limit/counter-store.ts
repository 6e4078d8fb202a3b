import type { Mode, Outcome, Plan } from './evaluate.ts';

/**
 * Where counters and bans live. One `run` is one atomic evaluation of every counting rule of a check
 * (a single script call in Redis). Implementations: redis-counter-store.ts and memory-counter-store.ts;
 * both pass the conformance suite in counter-store.int.test.ts.
 */
export interface CounterStore {
  readonly kind: 'redis' | 'memory';
  /**
   * The memory store answers synchronously (no timer, no promise on the hot path); Redis with a promise.
   * `timeoutMs` is the caller's bound on that promise: a store that keeps it itself says so
   * (`boundsOwnWait`), any other is bounded by the caller.
   */
  run(
    plan: Plan,
    input: { nowMs: number; cost: number; mode: Mode; timeoutMs?: number },
  ): Outcome[] | Promise<Outcome[]>;
  /**
   * True when `run` rejects with `store_timeout` once `input.timeoutMs` has passed, so the limiter
   * adds no timer of its own: the Redis store keeps one timer per batched script call, where a
   * timer per check was a visible share of a small request's work and of what it holds in flight.
   */
  readonly boundsOwnWait?: boolean;
  /** Deletes these keys (counters and bans of one identifier). */
  clear(keys: readonly string[]): Promise<void>;
}
