/**
 * Whether the coordinating process still answers while a worker's paced takes wait on it. A take
 * has no deadline of its own (a healthy governor rightly holds one as long as its ceilings say, and
 * the idle timeouts leave a paced stream be: front-door/pacing.ts), so one asked of a coordinating
 * process that stands still (stopped, stuck in a long synchronous task) would hold its stream, its
 * client and its descriptors for as long. So while any take waits, the worker asks the
 * coordinating process every `TAKE_CHECK_INTERVAL_MS` for a `ping` it answers at once; one left
 * unanswered `TAKE_CHECK_DEADLINE_MS` fails every take waiting then with `unavailable`. A take thus
 * waits on a silent coordinating process at most the interval plus the deadline (3 s). One check in
 * flight at most, and none while no take waits.
 */
import { PolicyError } from '../../policy/errors.ts';
import type { TimerHandle, Timers } from '../../policy/timers.ts';
import type { Link } from './link.ts';
import { PING } from './start-calls.ts';

/** How often a worker whose takes wait on the coordinating process checks that it answers. */
export const TAKE_CHECK_INTERVAL_MS = 1000;

/** How long such a check, answered at once there, may go unanswered: as long as any read's (instance-reads.ts). */
export const TAKE_CHECK_DEADLINE_MS = 2000;

/** One waiting take: `signal` aborts when the check fails while it waits; `done` when it settles. */
export interface WatchedTake {
  readonly signal: AbortSignal;
  done(): void;
}

export class TakeWatch {
  readonly #link: Link;
  readonly #timers: Timers;
  readonly #onSilent: (takes: number) => void;
  readonly #waiting = new Set<AbortController>();
  #next: TimerHandle | undefined;
  #checking = false;
  #closed = false;

  /** `onSilent` is told once per failed check how many waiting takes it failed. */
  constructor(link: Link, timers: Timers, onSilent: (takes: number) => void = () => {}) {
    this.#link = link;
    this.#timers = timers;
    this.#onSilent = onSilent;
  }

  /** Takes waiting on the coordinating process now. */
  get waiting(): number {
    return this.#waiting.size;
  }

  /** Watches one take from now until `done()`. */
  watch(): WatchedTake {
    const take = new AbortController();
    this.#waiting.add(take);
    if (this.#next === undefined && !this.#checking && !this.#closed) this.#schedule();
    return {
      signal: take.signal,
      // The next check stays set: it asks nothing if no take waits then, and a stream's next take,
      // a moment later, does not set a timer again.
      done: () => this.#waiting.delete(take),
    };
  }

  /** No check is made any more (the worker stops; its link fails what still waits). */
  close(): void {
    this.#closed = true;
    if (this.#next !== undefined) this.#timers.clearTimeout(this.#next);
    this.#next = undefined;
  }

  #schedule(): void {
    this.#next = this.#timers.setTimeout(() => {
      this.#next = undefined;
      void this.#check();
    }, TAKE_CHECK_INTERVAL_MS);
  }

  async #check(): Promise<void> {
    if (this.#closed || this.#waiting.size === 0) return;
    this.#checking = true;
    const given = new AbortController();
    const deadline = this.#timers.setTimeout(() => given.abort(unanswered()), TAKE_CHECK_DEADLINE_MS);
    let answered = true;
    try {
      await this.#link.call(PING, undefined, given.signal);
    } catch {
      // Unanswered in time, or refused unsent (a channel that takes no write): silent either way.
      answered = false;
    } finally {
      this.#timers.clearTimeout(deadline);
      this.#checking = false;
    }
    if (this.#closed) return;
    if (!answered) {
      const failed = [...this.#waiting];
      this.#waiting.clear();
      const reason = unanswered();
      for (const take of failed) take.abort(reason);
      if (failed.length > 0) this.#onSilent(failed.length);
      return;
    }
    if (this.#waiting.size > 0) this.#schedule();
  }
}

/** Retryable, like the other calls the coordinating process leaves unanswered. */
export function unanswered(): PolicyError {
  return new PolicyError(
    'unavailable',
    `The instance's bandwidth state did not answer within ${TAKE_CHECK_DEADLINE_MS / 1000} s; retry shortly.`,
    { headers: { 'retry-after': '1' } },
  );
}
