/**
 * The coordinating process of an instance of several workers (ARKVORY_WORKERS above 1), whatever the
 * role its workers serve: it forks them (node:cluster; each listens on the port with SO_REUSEPORT),
 * lets them listen once all are ready, replaces one that dies, sums their metrics for a scrape,
 * passes SIGHUP on, and on SIGTERM/SIGINT drains every worker and ends once with the instance's exit
 * code (docs/architecture.md, "Workers"). What the role keeps for the instance (the gateway's
 * policy state, proxy/workers/run-primary.ts) plugs in through `InstanceParts`.
 */
import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Clock } from '../../policy/clock.ts';
import { systemTimers, type TimerHandle } from '../../policy/timers.ts';
import type { Config } from '../config/config.ts';
import { type MetricsServer, SCRAPE_SPACING_MS, startMetricsServer } from '../metrics/metrics-endpoint.ts';
import { registerWorkerMetrics } from '../metrics/worker-metrics.ts';
import { EXIT, logStartupFailure } from '../server/startup-failure.ts';
import { type StopSignals, watchStopSignals } from '../server/stop-signals.ts';
import { FreshRuns } from '../metrics/fresh-runs.ts';
import { CarriedTotals } from './carried-totals.ts';
import { type Family, sumInstance } from './instance-metrics.ts';
import { Link } from './link.ts';
import { CATALOG_CHANGED, invalidateOthers } from './catalog-coherence.ts';
import { ALIVE, watchLiveness } from './liveness.ts';
import { PING } from './start-calls.ts';
import { RestartBackoff } from './restart-backoff.ts';
import { workerExecArgv } from './worker-exec-argv.ts';
import type { Hello, WorkerView } from './worker-instance.ts';

/**
 * How long a scrape waits for a worker's families: one stopped or hung leaves the scrape without
 * them (counted in `arkvory_workers_unanswered`) rather than holding every scrape of the instance.
 */
const SCRAPE_WORKER_DEADLINE_MS = 2000;

/** What the role keeps for the whole instance in the coordinating process. */
export interface InstanceParts {
  /** This process's own families; every worker's join them in a scrape. */
  readonly registry: Registry;
  /** Serves a new worker's calls on its link. */
  attach?(link: Link): void;
  /** A worker is gone: what it held is released, in the turn that learns of its exit. */
  detach?(link: Link): void;
  /** The stop began: what waits is refused before the workers drain. */
  closing?(): void;
  /** Fields of the line logged when a worker dies. */
  describe?(): Record<string, unknown>;
}

interface Slot {
  readonly index: number;
  worker: Worker;
  link: Link;
  state: WorkerView['state'];
  startedMs: number;
  restarts: number;
  /** Served once: a later death is a crash to replace, an earlier one a failed start. */
  everServed: boolean;
  /** A SIGHUP came while it started: passed on once it serves (its handler is installed by then). */
  hangupPending: boolean;
  /** Ends the check that it answers (liveness.ts), from the time it serves to its exit. */
  unwatch: () => void;
}

export class WorkerSupervisor {
  readonly #config: Config;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #signals: StopSignals;
  readonly #stopRequested = new AbortController();
  #stop: () => void = () => this.#stopRequested.abort();

  /** Watches SIGTERM/SIGINT from now: a stop during the role's own preparation ends it too. */
  constructor(config: Config, log: Logger, clock: Clock) {
    this.#config = config;
    this.#log = log.child({ component: 'workers' });
    this.#clock = clock;
    this.#signals = watchStopSignals(this.#log, () => this.#stop());
  }

  /** Aborted at a stop signal that came before the workers were started. */
  get stopSignal(): AbortSignal {
    return this.#stopRequested.signal;
  }

  /** Runs the workers until the instance stops; resolves with its exit code. */
  async run(parts: InstanceParts): Promise<number> {
    const config = this.#config;
    const plog = this.#log;
    const clock = this.#clock;
    const slots: Slot[] = [];
    let restartsTotal = 0;
    let unanswered = 0;
    registerWorkerMetrics(
      parts.registry,
      () => slots.map((s) => s.state),
      () => restartsTotal,
      () => unanswered,
    );

    let stopping = false;
    /** Every worker of the start was ready: from now on a worker listens as soon as it is. */
    let started = false;
    let readyCount = 0;
    const allReady = Promise.withResolvers<void>();
    const firstReady = Promise.withResolvers<void>();
    let failedStart: number | undefined;
    const exited = new Set<number>();
    let allExited!: () => void;
    const done = new Promise<void>((resolve) => (allExited = resolve));
    const exitCodes: number[] = [];
    // Per index, across its replacements: a crash loop's starts are spaced out (restart-backoff.ts).
    const backoffs = new Map<number, RestartBackoff>();
    // Replacements waiting out their backoff: a stop cancels them, and does not wait for them.
    const pendingStarts = new Set<TimerHandle>();

    // Counters and histograms never go back in the sum, whoever died or was left out (carried-totals.ts).
    const totals = new CarriedTotals<Slot>();
    const sumFamilies = async () => {
      const asked = slots.filter((s) => s.state !== 'starting');
      const answers = await Promise.allSettled(
        asked.map((s) =>
          s.link.call<Family[]>('metrics.json', undefined, AbortSignal.timeout(SCRAPE_WORKER_DEADLINE_MS)),
        ),
      );
      const lists: Family[][] = [];
      let answered = 0;
      for (const [i, a] of answers.entries()) {
        const slot = asked[i]!;
        if (a.status === 'fulfilled') {
          answered++;
          // Gone while it answered: its exit retired what it had shown before.
          if (slots[slot.index] === slot && !slot.worker.isDead()) totals.answered(slot, a.value);
          lists.push(a.value);
        } else {
          const last = totals.lastOf(slot);
          if (last) lists.push(last);
        }
      }
      const retired = totals.retired();
      if (retired.length > 0) lists.push(retired);
      // Read after the workers answered: this sum's own count of the ones left out.
      unanswered = answers.length - answered;
      lists.unshift((await parts.registry.getMetricsAsJSON()) as Family[]);
      const summed = sumInstance(lists);
      return { contentType: summed.contentType, body: await summed.body };
    };
    // Every scrape of the instance, from any worker or the metrics port, shares these sums.
    const sums = new FreshRuns(sumFamilies, clock, systemTimers, SCRAPE_SPACING_MS);
    const metricsText = () => sums.get();

    const views = (): WorkerView[] => slots.map((s) => ({ index: s.index, state: s.state, restarts: s.restarts }));

    const fork = (index: number, joinsServing: boolean, restarts: number): Slot => {
      const worker = cluster.fork();
      const link = new Link(worker);
      const slot: Slot = {
        index,
        worker,
        link,
        state: 'starting',
        startedMs: clock.monotonicMs(),
        restarts,
        everServed: false,
        hangupPending: false,
        unwatch: () => {},
      };
      parts.attach?.(link);
      link.handle('hello', (): Hello => ({ index, workers: config.workers, joinsServing }));
      link.handle('serving', () => {
        if (slot.state !== 'fenced') slot.state = stopping ? 'draining' : 'serving';
        slot.everServed = true;
        slot.unwatch();
        slot.unwatch = watchLiveness(
          () => link.call(ALIVE),
          (silentMs) => {
            plog.warn(
              { worker: index, pid: worker.process.pid, silentMs },
              'a worker did not answer; it is killed, what it held is released and a new one started',
            );
            worker.process.kill('SIGKILL');
          },
          clock,
          systemTimers,
        );
        if (slot.hangupPending) {
          slot.hangupPending = false;
          slot.worker.process.kill('SIGHUP');
        }
      });
      // Fenced alone (its own database connection failed): it drains and exits EXIT.fenced, to be replaced.
      link.handle('fenced', () => {
        if (!stopping) slot.state = 'fenced';
      });
      link.handle('workers', () => views());
      // At the start every worker listens once all are ready (a request then finds any of them, and
      // the first one's tmp/ sweep is over); a replacement listens at once.
      link.handle('ready', () => {
        if (index === 0) firstReady.resolve();
        if (started) return undefined;
        if (++readyCount === config.workers) {
          started = true;
          allReady.resolve();
        }
        return allReady.promise;
      });
      // A worker waiting to listen checks this process still runs (start-calls.ts).
      link.handle(PING, () => undefined);
      link.handle('metrics', () => metricsText());
      // A worker removed a catalog row: the others forget theirs before it answers (catalog-coherence.ts).
      link.handle(CATALOG_CHANGED, () =>
        invalidateOthers(slots.filter((s) => s !== slot && s.state !== 'starting').map((s) => s.link)),
      );
      worker.on('exit', (code, signal) => onExit(slot, code, signal));
      // Its channel failing is its exit's business (handled there), never this process's end.
      worker.on('error', (err) => plog.warn({ worker: index, err }, 'the channel to a worker failed'));
      slots[index] = slot;
      return slot;
    };

    const onExit = (slot: Slot, code: number | null, signal: string | null) => {
      // What it held goes back now, before anything else can run.
      slot.unwatch();
      parts.detach?.(slot.link);
      totals.retire(slot);
      slot.link.close();
      if (slots[slot.index] !== slot) return;
      if (stopping) {
        // Killed by the stop's SIGTERM before it watched for it: still loading, it held no request.
        exitCodes.push(code ?? (signal === 'SIGTERM' && !slot.everServed ? EXIT.ok : EXIT.failure));
        exited.add(slot.index);
        if (exited.size === slots.length) allExited();
        return;
      }
      if (!slot.everServed && !started) {
        // A worker of the start that never served failed it (database, store, TLS): so does the
        // instance. A replacement that dies before serving is started again, after the backoff.
        plog.error({ worker: slot.index, code, signal }, 'a worker failed to start; stopping the instance');
        failedStart = code ?? EXIT.failure;
        stop();
        exited.add(slot.index);
        if (exited.size === slots.length) allExited();
        return;
      }
      restartsTotal++;
      let backoff = backoffs.get(slot.index);
      if (!backoff) backoffs.set(slot.index, (backoff = new RestartBackoff(clock)));
      const { delayMs, streak } = backoff.died(slot.startedMs);
      plog.warn(
        {
          worker: slot.index,
          pid: slot.worker.process.pid,
          code,
          signal,
          restartInMs: delayMs,
          crashStreak: streak,
          ...parts.describe?.(),
        },
        code === EXIT.fenced
          ? 'a worker left, fenced by the loss of its own database connection; what it held is released; starting a new one'
          : 'a worker died; what it held is released; starting a new one',
      );
      const start = () => {
        if (!stopping) fork(slot.index, true, slot.restarts + 1);
      };
      if (delayMs === 0) start();
      else {
        const handle = systemTimers.setTimeout(() => {
          pendingStarts.delete(handle);
          start();
        }, delayMs);
        pendingStarts.add(handle);
      }
    };

    const stop = () => {
      if (stopping) return;
      stopping = true;
      for (const handle of pendingStarts) systemTimers.clearTimeout(handle);
      pendingStarts.clear();
      // As a single process's preClose: waiting requests are refused before in-flight ones are awaited.
      parts.closing?.();
      // A worker waiting to listen goes on to its stop.
      started = true;
      allReady.resolve();
      firstReady.resolve();
      for (const slot of slots) {
        if (exited.has(slot.index)) continue;
        // Dead and waiting for its replacement (which now never starts): nothing to drain.
        if (slot.worker.isDead()) {
          exited.add(slot.index);
          continue;
        }
        slot.state = 'draining';
        slot.worker.process.kill('SIGTERM');
      }
      if (slots.length > 0 && exited.size === slots.length) allExited();
    };
    this.#stop = stop;
    // Secret rotation: every worker reads its secret files again. One still starting would die of
    // SIGHUP's default action before its handler is installed: it gets the signal once it serves.
    const onHangup = () => {
      for (const slot of slots) {
        if (slot.everServed) slot.worker.process.kill('SIGHUP');
        else slot.hangupPending = true;
      }
    };
    process.on('SIGHUP', onHangup);

    // The first worker starts alone: a gateway's creates the storage identity of a new root and
    // sweeps tmp/ (a previous run's leftovers). The others start once it is ready; none listens
    // before all are.
    const execArgv = workerExecArgv(process.execArgv, config.workers, availableParallelism());
    cluster.setupPrimary({ execArgv });
    plog.info({ workers: config.workers, role: config.role, execArgv }, 'starting the workers of this instance');
    if (this.#signals.requested) stopping = true;
    else {
      fork(0, false, 0);
      await Promise.race([firstReady.promise, done]);
    }
    for (let i = 1; i < config.workers && !stopping; i++) fork(i, true, 0);
    if (slots.length === 0) allExited();

    let metricsServer: MetricsServer | undefined;
    if (config.metrics.port !== undefined && !stopping)
      metricsServer = await startMetricsServer({ render: metricsText }, config.metrics.port, this.#log).catch((err) => {
        logStartupFailure(this.#log, err);
        stop();
        return undefined;
      });

    // Until a stop signal, or until a failed start stopped the workers itself.
    await Promise.race([this.#signals.stopped.catch(() => undefined), done]);
    if (!stopping) stop();
    await done;
    process.off('SIGHUP', onHangup);
    await metricsServer?.close();
    const code = failedStart ?? (exitCodes.every((c) => c === 0) ? EXIT.ok : EXIT.failure);
    plog.info({ code, exitCodes }, 'stopped');
    return code;
  }
}
