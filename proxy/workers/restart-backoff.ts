/**
 * When the coordinating process starts a dead worker's replacement (supervisor.ts). A worker that
 * dies at every start (a configuration or store only it reads, a native crash) would otherwise be
 * started again and again, each time logging its crash and paying a whole start: so the starts of
 * one index in a crash streak are spaced at least 1 s, 2 s, 4 s … up to 30 s apart. A worker that
 * lived `stableMs` (60 s) ends the streak: its death is replaced at once, and a later one starts
 * again from 1 s. The spacing counts from the dead worker's start, so one that lived longer than
 * its spacing is replaced at once (docs/architecture.md, "Workers").
 */
import type { Clock } from '../../policy/clock.ts';

export interface RestartPolicy {
  /** Spacing after the first death of a streak; each further death doubles it. */
  readonly firstMs: number;
  readonly maxMs: number;
  /** A worker that lived this long ends its index's streak. */
  readonly stableMs: number;
}

export const RESTART_POLICY: RestartPolicy = { firstMs: 1000, maxMs: 30_000, stableMs: 60_000 };

export interface RestartDecision {
  /** How long the replacement waits, from now. */
  readonly delayMs: number;
  /** Deaths of this index since one last lived `stableMs` (0: this one did). */
  readonly streak: number;
}

/** The least time between the start of a worker that died as the `streak`-th of a streak and its replacement's. */
export function restartSpacingMs(streak: number, policy: RestartPolicy = RESTART_POLICY): number {
  if (streak <= 0) return 0;
  return Math.min(policy.firstMs * 2 ** (streak - 1), policy.maxMs);
}

/** The decisions of one worker index, across its replacements. */
export class RestartBackoff {
  readonly #clock: Clock;
  readonly #policy: RestartPolicy;
  #streak = 0;

  constructor(clock: Clock, policy: RestartPolicy = RESTART_POLICY) {
    this.#clock = clock;
    this.#policy = policy;
  }

  /** The worker started at `startedMs` (the clock's monotonic time) died now. */
  died(startedMs: number): RestartDecision {
    const livedMs = this.#clock.monotonicMs() - startedMs;
    if (livedMs >= this.#policy.stableMs) {
      this.#streak = 0;
      return { delayMs: 0, streak: 0 };
    }
    this.#streak++;
    const delayMs = Math.max(0, Math.ceil(restartSpacingMs(this.#streak, this.#policy) - livedMs));
    return { delayMs, streak: this.#streak };
  }
}
