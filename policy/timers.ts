import type { Clock } from './clock.ts';

/**
 * Scheduling, injected next to the `Clock` so code that waits (bandwidth refills, admission wait
 * bounds) is driven by hand in unit tests. Delays are milliseconds on the monotonic clock.
 */
export interface Timers {
  setTimeout(callback: () => void, delayMs: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** Whatever `setTimeout` returned; only ever passed back to `clearTimeout`. */
export type TimerHandle = unknown;

export const systemTimers: Timers = {
  setTimeout: (callback, delayMs) => setTimeout(callback, delayMs),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

interface ManualTimer {
  readonly dueMs: number;
  readonly seq: number;
  readonly callback: () => void;
}

/**
 * Timers bound to a clock that tests move: `advance(ms)` walks the clock to each due timer in order
 * and fires it, letting promise callbacks settle between firings so each sees its own instant.
 */
export class ManualTimers implements Timers {
  readonly #clock: Clock & { advance(ms: number): void };
  #pending: ManualTimer[] = [];
  #seq = 0;

  constructor(clock: Clock & { advance(ms: number): void }) {
    this.#clock = clock;
  }

  setTimeout(callback: () => void, delayMs: number): TimerHandle {
    const timer: ManualTimer = { dueMs: this.#clock.monotonicMs() + Math.max(0, delayMs), seq: this.#seq++, callback };
    this.#pending.push(timer);
    return timer;
  }

  clearTimeout(handle: TimerHandle): void {
    this.#pending = this.#pending.filter((timer) => timer !== handle);
  }

  /** Number of timers not yet fired. */
  get size(): number {
    return this.#pending.length;
  }

  /** Moves the clock forward by `ms`, firing every timer due on the way, earliest first. */
  async advance(ms: number): Promise<void> {
    const targetMs = this.#clock.monotonicMs() + ms;
    for (;;) {
      await settle();
      const next = this.#next();
      if (next === undefined || next.dueMs > targetMs) break;
      this.#pending = this.#pending.filter((timer) => timer !== next);
      if (next.dueMs > this.#clock.monotonicMs()) this.#clock.advance(next.dueMs - this.#clock.monotonicMs());
      next.callback();
    }
    if (targetMs > this.#clock.monotonicMs()) this.#clock.advance(targetMs - this.#clock.monotonicMs());
    await settle();
  }

  #next(): ManualTimer | undefined {
    let best: ManualTimer | undefined;
    for (const timer of this.#pending) {
      if (best === undefined || timer.dueMs < best.dueMs || (timer.dueMs === best.dueMs && timer.seq < best.seq))
        best = timer;
    }
    return best;
  }
}

/** Lets every already-queued promise callback run (a macrotask turn; no real waiting). */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
