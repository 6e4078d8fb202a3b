/**
 * A worker's reads of its instance's state from the coordinating process (the worker list, the
 * lease, the transfer counters, the /metrics sum), each with a deadline: a coordinating process
 * that does not answer (stopped, stuck in a long synchronous task) must not hold a worker's health
 * checks and scrapes until their clients give up. Past the deadline the read is 503 `unavailable`
 * naming the coordinating process; its late answer is dropped (a read holds nothing to hand back).
 */
import { PolicyError } from '../../policy/errors.ts';
import type { Timers } from '../../policy/timers.ts';
import type { Link } from './link.ts';

/** How long a worker waits for a read the coordinating process answers at once (workers, lease, snapshot). */
export const READ_DEADLINE_MS = 2000;

/**
 * How long a worker waits for the instance's /metrics sum: the coordinating process waits up to 2 s
 * for each worker's families (supervisor.ts) after a spacing of at most 250 ms, then sums them.
 */
export const METRICS_DEADLINE_MS = 4000;

/** Asks the coordinating process `op`, failing with `unavailable` after `deadlineMs`. */
export async function askInstance<T>(
  link: Link,
  op: string,
  timers: Timers,
  deadlineMs: number = READ_DEADLINE_MS,
): Promise<T> {
  const waiting = new AbortController();
  const deadline = timers.setTimeout(() => waiting.abort(unanswered(deadlineMs)), deadlineMs);
  try {
    return await link.call<T>(op, undefined, waiting.signal);
  } finally {
    timers.clearTimeout(deadline);
  }
}

/** Retryable: the coordinating process may answer again in a moment. */
function unanswered(deadlineMs: number): PolicyError {
  return new PolicyError(
    'unavailable',
    `The coordinating process of this instance did not answer within ${deadlineMs / 1000} s; retry shortly.`,
    { headers: { 'retry-after': '1' } },
  );
}
