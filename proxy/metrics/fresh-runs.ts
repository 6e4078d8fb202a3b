/**
 * Runs of one costly read (the instance's /metrics sum) shared by every caller that waits for it:
 * at most one run at a time, each started at least `spacingMs` after the previous one, and every
 * caller answered by a run that began after it called (never an older result), so a read right
 * after an action still sees it. Callers that arrive while a run is in flight, or sooner than
 * `spacingMs` after its start, all wait for the one next run: a flood of callers costs one run per
 * `spacingMs`, however many there are.
 */
import type { Clock } from '../../policy/clock.ts';
import type { Timers } from '../../policy/timers.ts';

export class FreshRuns<T> {
  readonly #run: () => Promise<T>;
  readonly #clock: Clock;
  readonly #timers: Timers;
  readonly #spacingMs: number;
  #running: Promise<unknown> | undefined;
  /** The run the callers of now wait for, once the one in flight ends and the spacing is over. */
  #next: Promise<T> | undefined;
  #lastStartMs = Number.NEGATIVE_INFINITY;

  constructor(run: () => Promise<T>, clock: Clock, timers: Timers, spacingMs: number) {
    this.#run = run;
    this.#clock = clock;
    this.#timers = timers;
    this.#spacingMs = spacingMs;
  }

  /** The result of a run begun after this call. */
  get(): Promise<T> {
    if (this.#next) return this.#next;
    if (!this.#running && this.#clock.monotonicMs() - this.#lastStartMs >= this.#spacingMs) return this.#start();
    const next = this.#afterCurrent();
    this.#next = next;
    return next;
  }

  async #afterCurrent(): Promise<T> {
    await this.#running;
    const waitMs = this.#lastStartMs + this.#spacingMs - this.#clock.monotonicMs();
    if (waitMs > 0) await new Promise<void>((resolve) => this.#timers.setTimeout(resolve, waitMs));
    // From here a new caller waits for the run after this one: this one may have begun before it.
    this.#next = undefined;
    return this.#start();
  }

  #start(): Promise<T> {
    this.#lastStartMs = this.#clock.monotonicMs();
    const run = Promise.resolve().then(this.#run);
    // Its end (or failure, which its own callers see) only lets the next run begin.
    const ended = run.then(
      () => undefined,
      () => undefined,
    );
    this.#running = ended;
    void ended.then(() => {
      if (this.#running === ended) this.#running = undefined;
    });
    return run;
  }
}
