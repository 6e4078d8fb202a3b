/**
 * The coordinating process's check that each serving worker's event loop still runs. A worker that
 * stands still (SIGSTOP, stuck in a synchronous loop, swapped out) exits never: its admission slots
 * and repository transfers stay counted, and the kernel keeps giving its listening socket a share of
 * the port's new connections, which nobody answers. So a worker that answered no check for
 * `HUNG_AFTER_MS` is killed (SIGKILL), and its exit releases what it held and starts a replacement
 * (supervisor.ts), as for any worker that died.
 */
import type { Clock } from '../../policy/clock.ts';
import type { Timers, TimerHandle } from '../../policy/timers.ts';

/** The call a worker answers at once, from its event loop. */
export const ALIVE = 'alive';

/** How often a serving worker is asked. */
export const LIVENESS_INTERVAL_MS = 1000;

/**
 * How long a worker may answer nothing before it is killed: far above any pause of a working event
 * loop (a full collection, a loaded machine's scheduling), so a slow worker is not taken for a hung one.
 */
export const HUNG_AFTER_MS = 10_000;

export interface LivenessOptions {
  intervalMs?: number;
  hungAfterMs?: number;
}

/**
 * Asks `ask` every `intervalMs` (one call in flight at most: a worker that stands still is not sent
 * a call per interval) and calls `onHung` once, with how long it was silent, when no answer came for
 * `hungAfterMs`. A rejected ask (the link closed: the worker is exiting) counts as no answer. A
 * pause of this process's own (a check more than two intervals late) starts the count again. The
 * returned function stops watching.
 */
export function watchLiveness(
  ask: () => Promise<unknown>,
  onHung: (silentMs: number) => void,
  clock: Clock,
  timers: Timers,
  options: LivenessOptions = {},
): () => void {
  const intervalMs = options.intervalMs ?? LIVENESS_INTERVAL_MS;
  const hungAfterMs = options.hungAfterMs ?? HUNG_AFTER_MS;
  let answeredMs = clock.monotonicMs();
  let tickedMs = answeredMs;
  let asking = false;
  let stopped = false;
  let timer: TimerHandle | undefined;
  const tick = () => {
    timer = undefined;
    if (stopped) return;
    const now = clock.monotonicMs();
    // This process stood still itself (stopped, a long synchronous task): the worker's answer may be
    // waiting unread in the channel, so its silence counts from now, not from before the pause.
    if (now - tickedMs > 2 * intervalMs) answeredMs = now;
    tickedMs = now;
    const silentMs = now - answeredMs;
    if (silentMs >= hungAfterMs) {
      stopped = true;
      onHung(silentMs);
      return;
    }
    if (!asking) {
      asking = true;
      ask().then(
        () => {
          asking = false;
          answeredMs = clock.monotonicMs();
        },
        () => {
          asking = false;
        },
      );
    }
    timer = timers.setTimeout(tick, intervalMs);
  };
  timer = timers.setTimeout(tick, intervalMs);
  return () => {
    stopped = true;
    if (timer !== undefined) timers.clearTimeout(timer);
  };
}
