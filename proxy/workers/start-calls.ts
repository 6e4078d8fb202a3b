/**
 * A starting worker's calls to its coordinating process (its place in the instance, the instance's
 * lease, the wait to listen), each bounded: a coordinating process that does not answer (stopped,
 * swapped out, stuck in a long synchronous task) fails the worker's start with `coordinator_unanswered`
 * rather than holding it forever. The worker then exits 1 like any failed start (supervisor.ts): at the
 * instance's start the instance stops with that code; a replacement is started again once the
 * coordinating process runs.
 */
import type { Timers } from '../../policy/timers.ts';
import { GatewayError } from '../server/errors.ts';
import type { Link } from './link.ts';

/**
 * How long a starting worker waits for a call its coordinating process answers at once. Above the 2 s
 * of a health read (instance-reads.ts): a false alarm here costs a start, not one answer.
 */
export const START_CALL_DEADLINE_MS = 5000;

/** How often a worker waiting to listen (for the instance's other workers) checks its coordinating process answers. */
export const START_PING_INTERVAL_MS = 1000;

/** The coordinating process's answer to a starting worker's check that it runs. */
export const PING = 'ping';

/**
 * Asks `op` of the coordinating process, which answers at once; `coordinator_unanswered` after
 * `deadlineMs`. `signal` gives the call up sooner.
 */
export async function askAtStart<T>(
  link: Link,
  op: string,
  timers: Timers,
  deadlineMs: number = START_CALL_DEADLINE_MS,
  signal?: AbortSignal,
): Promise<T> {
  const waiting = new AbortController();
  const deadline = timers.setTimeout(() => waiting.abort(unanswered(op, deadlineMs)), deadlineMs);
  try {
    return await link.call<T>(op, undefined, signal ? AbortSignal.any([waiting.signal, signal]) : waiting.signal);
  } finally {
    timers.clearTimeout(deadline);
  }
}

/**
 * Asks `op`, whose answer may rightly take long (`ready` waits for the instance's other workers to
 * start, their database waits included), and meanwhile pings the coordinating process every
 * `intervalMs`: the wait fails with `coordinator_unanswered` when a ping gets no answer within
 * `deadlineMs`, so within `intervalMs` + `deadlineMs` of the coordinating process standing still.
 */
export async function awaitAtStart<T>(
  link: Link,
  op: string,
  timers: Timers,
  deadlineMs: number = START_CALL_DEADLINE_MS,
  intervalMs: number = START_PING_INTERVAL_MS,
): Promise<T> {
  const waiting = new AbortController();
  // Ends the pings once `op` is answered (or failed): the one in flight is given up.
  const answered = new AbortController();
  let next: unknown;
  const ping = () => {
    next = undefined;
    askAtStart(link, PING, timers, deadlineMs, answered.signal).then(
      () => {
        if (!answered.signal.aborted) next = timers.setTimeout(ping, intervalMs);
      },
      (err: unknown) => waiting.abort(err),
    );
  };
  next = timers.setTimeout(ping, intervalMs);
  try {
    return await link.call<T>(op, undefined, waiting.signal);
  } finally {
    answered.abort();
    if (next !== undefined) timers.clearTimeout(next);
  }
}

function unanswered(op: string, deadlineMs: number): GatewayError {
  return new GatewayError(
    'coordinator_unanswered',
    `the coordinating process of this instance did not answer this starting worker's "${op}" within ${deadlineMs / 1000} s; the worker stops`,
  );
}
