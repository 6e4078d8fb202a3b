/**
 * The steps that close a stopping process after its drain (close hooks, the lease connection, the
 * pool). Most end a PostgreSQL connection, and pg's Client.end() resolves only once the server has
 * closed its side: over a link that drops packets that never happens. So the steps of one process
 * share one deadline (CloseDeadline): a stop ends at most CLOSE_STEPS_MS after its drain whatever
 * the database does, however many steps wait on it; a step past it is started, not waited for.
 */
import type { Logger } from 'pino';

/** Longest the close steps of one process wait for, in all. */
export const CLOSE_STEPS_MS = 5000;

/** What is left of `ms` from its creation, on `now`'s clock (milliseconds). */
export class CloseDeadline {
  readonly #endsAtMs: number;
  readonly #now: () => number;

  constructor(ms: number, now: () => number = () => performance.now()) {
    this.#now = now;
    this.#endsAtMs = now() + ms;
  }

  remainingMs(): number {
    return Math.max(0, this.#endsAtMs - this.#now());
  }
}

/**
 * Waits for `step` (a settled one, either way, is done) at most `ms`; past it, logs that it is left
 * unfinished and returns. A step of 0 ms still ends if it settles within the current tick.
 */
// biome-ignore lint/suspicious/noConfusingVoidType: close hooks may be synchronous (return void)
export async function bounded(step: Promise<unknown> | void, ms: number, what: string, log: Logger): Promise<void> {
  if (!step) return;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  const outcome = await Promise.race([
    step.then(
      () => 'done' as const,
      () => 'done' as const,
    ),
    timedOut,
  ]);
  clearTimeout(timer);
  if (outcome === 'timeout') log.warn({ step: what, waitedMs: ms }, `closing ${what} did not finish; leaving it`);
}
