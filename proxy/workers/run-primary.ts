/**
 * `arkvory serve` with ARKVORY_WORKERS above 1: the coordinating process of one gateway instance.
 * It checks the port and the data directory once, forks the workers (node:cluster; each runs the
 * gateway and listens on the port with SO_REUSEPORT), owns the instance's policy state
 * (policy-host.ts), replaces a worker that dies, sums the workers' metrics for a scrape, and on
 * SIGTERM/SIGINT drains every worker and exits once (docs/architecture.md, "Workers").
 */
import cluster, { type Worker } from 'node:cluster';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { AggregatorRegistry, Registry } from 'prom-client';
import { AdmissionQueue } from '../../policy/admission/index.ts';
import { createBandwidthGovernors } from '../../policy/bandwidth/index.ts';
import { systemClock } from '../../policy/clock.ts';
import { createMemoryCounterStore } from '../../policy/rate-limit/index.ts';
import type { Config } from '../config/config.ts';
import { admissionOptions, followLeasedShare, governorCeilings } from '../gates/transfers.ts';
import { registerLeaseMetrics } from '../metrics/lease-metrics.ts';
import { openCoordinator } from '../server/lease-coordinator.ts';
import { registerAdmissionMetrics } from '../metrics/admission-metrics.ts';
import { registerBandwidthMetrics } from '../metrics/bandwidth-metrics.ts';
import { registerWorkerMetrics } from '../metrics/worker-metrics.ts';
import { createGatewayMetrics } from '../metrics/gateway-metrics.ts';
import { type MetricsServer, startMetricsServer } from '../metrics/metrics-endpoint.ts';
import { checkPortFree, prepareDataDir } from '../server/startup-checks.ts';
import { EXIT, logStartupFailure } from '../server/startup-failure.ts';
import { watchStopSignals } from '../server/stop-signals.ts';
import pg from 'pg';
import type { Coordinator } from '../../policy/lease/coordinator.ts';
import { databaseTarget, waitForDatabase } from '../server/database.ts';
import { Link } from './link.ts';
import { PolicyHost } from './policy-host.ts';
import type { Hello, WorkerView } from './worker-instance.ts';

/** A worker that dies this soon after its start is waited for this long before the next one (a crash loop). */
const QUICK_DEATH_MS = 5000;
const RESTART_BACKOFF_MS = 1000;

/**
 * Families whose workers all report the same setting or state: the scrape shows one value (the
 * smallest for an expiry, the largest otherwise) rather than their sum.
 */
const NOT_SUMMED: Readonly<Record<string, 'max' | 'min'>> = {
  arkvory_bandwidth_limit_bytes_per_second: 'max',
  arkvory_store_state: 'max',
  arkvory_lease_state: 'max',
  arkvory_tls_certificate_expiry_timestamp_seconds: 'min',
  arkvory_database_login_privileged: 'max',
};

interface Slot {
  readonly index: number;
  worker: Worker;
  link: Link;
  state: WorkerView['state'];
  startedMs: number;
  restarts: number;
  /** Served once: a later death is a crash to replace, an earlier one a failed start. */
  everServed: boolean;
}

export async function runPrimary(config: Config, log: Logger): Promise<number> {
  const plog = log.child({ component: 'workers' });
  const clock = systemClock;
  const stopRequested = new AbortController();
  let stop = () => stopRequested.abort();
  const signals = watchStopSignals(plog, () => stop());
  let coordinator: Coordinator;
  try {
    await checkPortFree(config.host, config.port);
    await prepareDataDir(config.dataDir);
    const databaseUrl = config.databaseUrl!;
    const reached = await waitForDatabase(
      async () => {
        const probe = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 10_000 });
        probe.on('error', () => {});
        try {
          await probe.connect();
        } finally {
          await probe.end().catch(() => {});
        }
      },
      {
        boundMs: config.databaseStartupWaitMs,
        target: databaseTarget(databaseUrl),
        log,
        monotonicMs: clock.monotonicMs,
        sleep: (ms, signal) => sleep(ms, undefined, { signal }),
        signal: stopRequested.signal,
      },
    );
    if (reached === 'stopped') return EXIT.ok;
    // The instance is one gateway: its writer barrier, policy check and slot lease are this
    // process's, held from start to stop; each worker takes only the maintenance barrier.
    coordinator = await openCoordinator(config, databaseUrl, log, 'instance');
  } catch (err) {
    logStartupFailure(log, err);
    return EXIT.failure;
  }
  const admission = new AdmissionQueue(admissionOptions(config));
  // As a single process's: the governors ask the lease before every grant and follow its share.
  const governors = createBandwidthGovernors(
    { clock, isPermitted: () => coordinator.isPermitted() },
    governorCeilings(config),
  );
  followLeasedShare(config, coordinator, governors);
  coordinator.onFenced(() => {
    governors.download.fence();
    governors.upload.fence();
  });
  const host = new PolicyHost({
    admission,
    governors,
    lease: coordinator,
    ...(config.redisUrl ? {} : { counters: createMemoryCounterStore() }),
  });
  const registry = new Registry();
  createGatewayMetrics({ registry });
  registerLeaseMetrics(registry, coordinator);
  registerBandwidthMetrics(registry, governors);
  registerAdmissionMetrics(registry, admission);
  const slots: Slot[] = [];
  let restartsTotal = 0;
  registerWorkerMetrics(
    registry,
    () => slots.map((s) => s.state),
    () => restartsTotal,
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

  const metricsText = async () => {
    type Family = { name: string; aggregator?: string };
    const lists: Family[][] = [await registry.getMetricsAsJSON()];
    const answers = await Promise.allSettled(
      slots.filter((s) => s.state !== 'starting').map((s) => s.link.call<Family[]>('metrics.json')),
    );
    for (const a of answers) if (a.status === 'fulfilled') lists.push(a.value);
    // prom-client aggregates a family as its first list says: say it in each.
    for (const list of lists)
      for (const m of list) {
        const how = NOT_SUMMED[m.name];
        if (how) m.aggregator = how;
      }
    const summed = AggregatorRegistry.aggregate(lists);
    return { contentType: summed.contentType, body: await summed.metrics() };
  };

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
    };
    host.attach(link);
    link.handle('hello', (): Hello => ({ index, workers: config.workers, joinsServing }));
    link.handle('serving', () => {
      slot.state = stopping ? 'draining' : 'serving';
      slot.everServed = true;
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
    link.handle('metrics', () => metricsText());
    worker.on('exit', (code, signal) => onExit(slot, code, signal));
    // Its channel failing is its exit's business (handled there), never this process's end.
    worker.on('error', (err) => plog.warn({ worker: index, err }, 'the channel to a worker failed'));
    slots[index] = slot;
    return slot;
  };

  const onExit = (slot: Slot, code: number | null, signal: string | null) => {
    // Its slots and waiting takes go back now, before anything else can run.
    host.detach(slot.link);
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
    const quick = clock.monotonicMs() - slot.startedMs < QUICK_DEATH_MS;
    plog.warn(
      { worker: slot.index, pid: slot.worker.process.pid, code, signal, heldSlotsLeft: host.heldSlots },
      'a worker died; its admission slots and waiting takes are released; starting a new one',
    );
    const start = () => {
      if (!stopping) fork(slot.index, true, slot.restarts + 1);
    };
    if (quick) void sleep(RESTART_BACKOFF_MS).then(start);
    else start();
  };

  stop = () => {
    if (stopping) return;
    stopping = true;
    // As a single process's preClose: waiting requests are refused before in-flight ones are awaited.
    host.close();
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
  // Secret rotation: every worker reads its secret files again.
  const onHangup = () => {
    for (const slot of slots) slot.worker.process.kill('SIGHUP');
  };
  process.on('SIGHUP', onHangup);

  // The first worker starts alone: it creates the storage identity of a new root and sweeps tmp/ (a
  // previous run's leftovers). The others start once it is ready; none listens before all are.
  plog.info({ workers: config.workers }, 'starting the workers of this instance');
  if (signals.requested) stopping = true;
  else {
    fork(0, false, 0);
    await Promise.race([firstReady.promise, done]);
  }
  for (let i = 1; i < config.workers && !stopping; i++) fork(i, true, 0);
  if (slots.length === 0) allExited();

  let metricsServer: MetricsServer | undefined;
  if (config.metrics.port !== undefined && !stopping)
    metricsServer = await startMetricsServer({ render: metricsText }, config.metrics.port, log).catch((err) => {
      logStartupFailure(log, err);
      stop();
      return undefined;
    });

  // Until a stop signal, or until a failed start stopped the workers itself.
  await Promise.race([signals.stopped.catch(() => undefined), done]);
  if (!stopping) stop();
  await done;
  process.off('SIGHUP', onHangup);
  await metricsServer?.close();
  await coordinator.close();
  const code = failedStart ?? (exitCodes.every((c) => c === 0) ? EXIT.ok : EXIT.failure);
  plog.info({ code, exitCodes }, 'stopped');
  return code;
}
