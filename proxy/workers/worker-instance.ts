/**
 * The worker side of a gateway instance with several workers: its link to the coordinating process
 * (run-primary.ts), its index, and what it reads of the instance (the workers, the metrics sum).
 */
import { type Clock, systemClock } from '../../policy/clock.ts';
import { systemTimers, type Timers } from '../../policy/timers.ts';
import { FreshRuns } from '../metrics/fresh-runs.ts';
import { askInstance, METRICS_DEADLINE_MS } from './instance-reads.ts';
import { type Channel, Link } from './link.ts';
import { ALIVE } from './liveness.ts';
import { askAtStart, awaitAtStart } from './start-calls.ts';

export interface WorkerView {
  readonly index: number;
  /**
   * `starting` until the worker listens, then `serving`; `draining` once the instance stops;
   * `fenced` while a worker that lost its own database connection drains before it is replaced.
   */
  readonly state: 'starting' | 'serving' | 'draining' | 'fenced';
  /** How many times this index was replaced after its process died. */
  readonly restarts: number;
}

export interface Hello {
  index: number;
  workers: number;
  /** False for the first worker of a fresh start: it alone sweeps tmp/ (the directory store's leftovers). */
  joinsServing: boolean;
}

export interface WorkerInstance extends Hello {
  readonly link: Link;
  /** The workers of the instance as its coordinating process saw them at the last `refresh`. */
  readonly workerViews: readonly WorkerView[];
  refresh(): Promise<void>;
  /** The instance's /metrics text: every worker's families and the coordinating process's, summed. */
  metrics(): Promise<{ contentType: string; body: string }>;
  /**
   * Resolves when this worker may listen (at the start: once every worker of the instance is ready);
   * `coordinator_unanswered` when the coordinating process stops answering meanwhile.
   */
  ready(): Promise<void>;
  /** Tells the coordinating process this worker listens. */
  serving(): void;
  /** Tells the coordinating process this worker is fenced alone and leaves (exit code EXIT.fenced). */
  fenced(): void;
}

/**
 * A worker's part of the instance's bound on open connections: never more than the bound together,
 * whichever worker the kernel gives a connection (SO_REUSEPORT spreads them about evenly by their
 * addresses, so a worker may refuse while another has room: the bound errs on the safe side). The
 * configuration refuses a bound below the number of workers (cross-checks.ts), so each gets one at least.
 */
export function connectionShare(maxConnections: number, workers: number): number {
  return Math.floor(maxConnections / workers);
}

/** In a cluster worker: the link over the IPC channel and this worker's place in the instance. */
export async function joinInstance(): Promise<WorkerInstance> {
  // Nothing here handles the coordinating process's death (SIGKILL): Node's cluster exits a worker
  // at once when its channel to the primary closes unasked, so no worker serves on without the
  // instance's writer lock, lease and limits, which went with it.
  const link = new Link(process as unknown as Channel);
  return joinOver(link, systemClock, systemTimers);
}

/** This worker's place in the instance, asked over `link`: `coordinator_unanswered` past the start deadline. */
export async function joinOver(link: Link, clock: Clock, timers: Timers): Promise<WorkerInstance> {
  return workerInstance(link, await askAtStart<Hello>(link, 'hello', timers), clock, timers);
}

/**
 * What a worker reads of its instance over `link`. The worker list and the /metrics sum have
 * deadlines (instance-reads.ts): past one the read is 503 `unavailable`, the last list staying shown.
 * The wait to listen fails the start when the coordinating process stops answering (start-calls.ts).
 */
export function workerInstance(link: Link, hello: Hello, clock: Clock, timers: Timers): WorkerInstance {
  // The coordinating process's check that this event loop runs: a worker that answers none for a
  // while is killed and replaced (liveness.ts).
  link.handle(ALIVE, () => undefined);
  let workerViews: readonly WorkerView[] = [];
  // This worker's scrapes waiting at once make one call: the coordinating process's work stays one
  // call per worker however many scrapes arrive (it spaces its sums itself).
  const metrics = new FreshRuns(
    () => askInstance<{ contentType: string; body: string }>(link, 'metrics', timers, METRICS_DEADLINE_MS),
    clock,
    timers,
    0,
  );
  return {
    ...hello,
    link,
    get workerViews() {
      return workerViews;
    },
    async refresh() {
      workerViews = await askInstance<WorkerView[]>(link, 'workers', timers);
    },
    metrics: () => metrics.get(),
    ready: () => awaitAtStart(link, 'ready', timers),
    serving: () => link.note('serving'),
    fenced: () => link.note('fenced'),
  };
}
