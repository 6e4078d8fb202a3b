/**
 * A worker's rate-limit counters and bans with no Redis: the instance's, kept by the coordinating
 * process. Each call waits for it at most the limiter's store timeout and is then given up (and
 * cancelled there): the limiter fails the check open or closed per rule at that timeout anyway, and a
 * call it gave up on must not stay on the link until an answer that may never come (a coordinating
 * process stopped for long would otherwise grow each worker by every request's call).
 */
import type { CounterStore } from '../../policy/rate-limit/index.ts';
import { RateLimitError } from '../../policy/rate-limit/errors.ts';
import { systemTimers, type Timers } from '../../policy/timers.ts';
import type { Link } from './link.ts';

export function remoteCounterStore(link: Link, timeoutMs: number, timers: Timers = systemTimers): CounterStore {
  const ask = async <T>(op: string, args: unknown): Promise<T> => {
    const waiting = new AbortController();
    const deadline = timers.setTimeout(
      () =>
        waiting.abort(
          new RateLimitError(
            'store_timeout',
            `the coordinating process of this instance did not answer within ${timeoutMs} ms`,
          ),
        ),
      timeoutMs,
    );
    try {
      return await link.call<T>(op, args, waiting.signal);
    } finally {
      timers.clearTimeout(deadline);
    }
  };
  return {
    kind: 'memory',
    run: (plan, input) => ask('counters.run', [plan, input]),
    clear: (keys) => ask('counters.clear', [...keys]),
  };
}
