import type { Mode, Outcome, Plan } from './evaluate.ts';

/**
 * Where counters and bans live. One `run` is one atomic evaluation of every counting rule of a check
 * (a single script call in Redis). Implementations: redis-counter-store.ts and memory-counter-store.ts;
 * both pass the conformance suite in counter-store.int.test.ts.
 */
export interface CounterStore {
  readonly kind: 'redis' | 'memory';
  /** The memory store answers synchronously (no timer, no promise on the hot path); Redis with a promise. */
  run(plan: Plan, input: { nowMs: number; cost: number; mode: Mode }): Outcome[] | Promise<Outcome[]>;
  /** Deletes these keys (counters and bans of one identifier). */
  clear(keys: readonly string[]): Promise<void>;
}
