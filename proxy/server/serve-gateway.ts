/** `arkvory serve` for the gateway roles (api, reader, worker): proxy/server/serve.ts loads it. */
import type { Logger } from 'pino';
import type pg from 'pg';
import { pendingMigrations, migrate } from '../../migrations/runner.ts';
import { systemClock } from '../../policy/clock.ts';
import { systemTimers } from '../../policy/timers.ts';
import type { Coordinator, LeaseStanding } from '../../policy/lease/coordinator.ts';
import { openCoordinator } from './lease-coordinator.ts';
import { buildApp } from './app.ts';
import type { Config } from '../config/config.ts';
import { createPool, openDatabase, waitForDatabaseAtStartup, type Database } from './database.ts';
import { createGatewayServer, type GatewayServer } from './http-server.ts';
import { type AuditFailures, createRefusalAudit, createRequestAudit } from '../audit/request-audit.ts';
import { startUsageRecorder } from '../stats/usage-recorder.ts';
import { createTrustedProxies } from '../router/forwarded.ts';
import { logStartupFailure } from './startup-failure.ts';
import { GatewayError } from './errors.ts';
import { checkPortFree, prepareDataDir, restrictCreatedFileModes } from './startup-checks.ts';
import { CacheDirClaim } from './cache-dir-claim.ts';
import { configuredCeilings, describeCeilings } from './ceilings.ts';
import { watchStopSignals } from './stop-signals.ts';
import { Lifecycle } from './lifecycle.ts';
import { createGatewayMetrics } from '../metrics/gateway-metrics.ts';
import { registerLeaseMetrics } from '../metrics/lease-metrics.ts';
import { registerBandwidthMetrics } from '../metrics/bandwidth-metrics.ts';
import { registerAdmissionMetrics } from '../metrics/admission-metrics.ts';
import { registerWorkerMetrics } from '../metrics/worker-metrics.ts';
import { registerTlsMetrics } from '../metrics/tls-metrics.ts';
import { registerTracingMetrics } from '../metrics/tracing-metrics.ts';
import { registerUsageMetrics } from '../metrics/usage-metrics.ts';
import { registerAuditMetrics } from '../metrics/audit-metrics.ts';
import { traceContextFrom } from '../tracing/trace-context-from.ts';
import { registerFrontDoorMetrics } from '../metrics/front-door-metrics.ts';
import { metricsRoute, spacedRenders, startMetricsServer, type MetricsServer } from '../metrics/metrics-endpoint.ts';
import type { Services } from './services.ts';
import { redisCredentialsVerifier } from '../gates/rate-limit-redis.ts';
import { createTransfers, followLeasedShare } from '../gates/transfers.ts';
import { EXIT, StartupError } from './startup-failure.ts';
import { openListenerTls, type ServedTls } from '../tls/served-tls.ts';
import { schemeOf } from './listener.ts';
import { checkDatabasePrivileges, databaseLoginVerifier, registerPrivilegeMetrics } from './privilege-startup.ts';
import { SecretRotation, type StartSecrets } from '../config/secret-rotation.ts';
import { s3KeyVerifier } from '../content/storage.ts';
import { registerSecretMetrics } from '../metrics/secret-metrics.ts';
import type { PrivilegeReport } from './database-privileges.ts';
import { connectionShare, type WorkerInstance, type WorkerView } from '../workers/worker-instance.ts';
import { createRemoteTransfers, type RemoteTransfers } from '../workers/remote-transfers.ts';
import { TAKE_CHECK_DEADLINE_MS } from '../workers/take-watch.ts';
import { remoteCounterStore } from '../workers/remote-counter-store.ts';
import { type InstanceLease, joinInstanceLease } from '../workers/instance-lease.ts';
import { bounded, CloseDeadline, CLOSE_STEPS_MS } from './close-steps.ts';

/** The embedded defaults exist for one standalone writer; everything else needs real services. */
function checkProfile(config: Config): void {
  if (!config.databaseUrl && (config.shared || config.role !== 'api')) {
    throw new StartupError(
      `the embedded PostgreSQL is only for a single standalone api process; set ARKVORY_DATABASE_URL for role "${config.role}"${config.shared ? ' in the shared profile' : ''}`,
    );
  }
  if (!config.redisUrl && config.shared) {
    throw new StartupError(
      'the shared profile needs a Redis shared by all gateways for rate-limit counters; set ARKVORY_REDIS_URL',
    );
  }
}

/**
 * Runs a gateway until SIGTERM/SIGINT, then drains and resolves with the exit code. SIGHUP (and a
 * changed secret file) rotates the secrets given as files (proxy/config/secret-rotation.ts).
 */
export async function serveGateway(
  config: Config,
  log: Logger,
  secrets: StartSecrets = { env: {}, reads: new Map() },
  instance?: WorkerInstance,
): Promise<number> {
  // Held until everything that uses the slice cache directory has closed.
  const cacheDir = new CacheDirClaim();
  try {
    return await runGateway(config, log, secrets, instance, cacheDir);
  } finally {
    await cacheDir.release();
  }
}

async function runGateway(
  config: Config,
  log: Logger,
  secrets: StartSecrets,
  instance: WorkerInstance | undefined,
  cacheDir: CacheDirClaim,
): Promise<number> {
  const lifecycle = new Lifecycle();
  // One worker of several: the completion worker runs in the first one only (the instance has one).
  if (instance && instance.index > 0 && config.embeddedWorker) config = { ...config, embeddedWorker: false };
  // An explicit connection bound is the instance's: each worker serves its share. A derived one
  // follows each process's own descriptor limit, so it is a worker's already.
  const maxConnections = config.frontDoor.maxConnections;
  if (instance && maxConnections !== undefined)
    config = {
      ...config,
      frontDoor: { ...config.frontDoor, maxConnections: connectionShare(maxConnections, instance.workers) },
    };
  let database: Database | undefined;
  let server: GatewayServer | undefined;
  const stopping = new AbortController();
  const leaving = Promise.withResolvers<'fenced' | 'database_lost'>();
  const signals = watchStopSignals(log, () => {
    lifecycle.set('draining', 'shutdown');
    stopping.abort();
  });

  let built: Services | undefined;
  let coordinator: Coordinator | undefined;
  let tls: ServedTls | undefined;
  let privileges: PrivilegeReport | undefined;
  const rotation = new SecretRotation(config, secrets, {
    log: log.child({ component: 'secrets' }),
    verifiers: [databaseLoginVerifier(), s3KeyVerifier(), redisCredentialsVerifier(config.redisUrl)],
  });
  try {
    checkProfile(config);
    // Before anything else is opened: a broken certificate pair refuses the start with its reason.
    tls = await openListenerTls(config.tls, { clock: systemClock, log: log.child({ component: 'tls' }) });
    // Before any state exists: a busy port or an unusable data dir must not leave a new cluster behind.
    // A worker's port is shared with the others (SO_REUSEPORT); the coordinating process checked both,
    // and holds the slice cache directory for the instance, which a worker joins.
    if (!instance) {
      await checkPortFree(config.host, config.port);
      await prepareDataDir(config.dataDir);
      await cacheDir.take(config);
    } else await cacheDir.join(config);
    database = await openDatabase(config, log, () => rotation.config.databaseUrl);
    void database.embedded?.lost.then(() => leaving.resolve('database_lost'));
    // Once the embedded cluster exists: its initdb reads a file the package writes with the umask's mode.
    restrictCreatedFileModes();
    if (database.embedded) {
      // On a pool of its own: the gateway's bounds each statement, and a migration may take long.
      const migrations = createPool(database.url, 1, log, 'arkvory-migrate');
      const applied = await migrate(migrations).finally(() => migrations.end());
      if (applied.length)
        log.info({ migrations: applied.map((m) => m.version) }, 'migrations applied to the embedded database');
    } else {
      // PostgreSQL may come up after the gateway (a host boot, a failover): retry with backoff.
      const reached = await waitForDatabaseAtStartup(() => database!.pool.query('SELECT 1'), {
        config,
        url: database.url,
        log,
        signal: stopping.signal,
      });
      if (reached === 'stopped') return await finish(log, built, server, database, config, EXIT.ok);
      // Before anything reads a table: a missing grant is named, not met as the first query's error.
      privileges = await checkDatabasePrivileges(config, database.pool, log);
      const pending = await pendingMigrations(database.pool);
      if (pending.length) {
        throw new StartupError(
          `the database schema is behind this code (${pending.length} pending migration(s), first ${pending[0]!.version}); run \`npm run migrate\` with the same ARKVORY_DATABASE_URL`,
        );
      }
    }
    if (signals.requested) return await finish(log, built, server, database, config, EXIT.ok);
    // Each source registers its metric families where it is built.
    const metrics = createGatewayMetrics();
    if (privileges) registerPrivilegeMetrics(metrics.registry, privileges);
    registerSecretMetrics(metrics.registry, rotation);
    coordinator = await openCoordinator(config, database.url, log, instance ? 'worker' : 'instance');
    // A worker's lease is its instance's, held by the coordinating process (which counts its metrics).
    // One worker of several: what it reads of the instance, again before each health answer.
    const ofInstance = instance && (await joinInstanceParts(config, instance, coordinator, log));
    const standing: LeaseStanding = ofInstance?.lease ?? coordinator;
    lifecycle.follow(standing, 'lease lost');
    // Fenced, a worker of a writer writes no more: a new writer may start (lib/advisory-barriers.ts).
    const own = coordinator;
    ofInstance?.lease.onFenced(() => void own.releaseWriterWorker());
    // A worker fenced alone cannot serve again, but a new one can: it leaves, to be replaced. A fenced
    // instance (or a single process) stays, answering 503, until it is restarted.
    ofInstance?.lease.onFencedAlone(() => {
      instance?.fenced();
      leaving.resolve('fenced');
    });
    if (!instance) registerLeaseMetrics(metrics.registry, coordinator);
    let transfers: ReturnType<typeof createTransfers> | RemoteTransfers;
    if (ofInstance) transfers = ofInstance.transfers;
    else {
      transfers = createTransfers(config, systemClock, coordinator);
      followLeasedShare(config, coordinator, transfers.governors);
    }
    // The SDK is loaded only when tracing is on.
    const tracing = config.tracing
      ? (await import('../tracing/tracing.ts')).openTracing(config.tracing, {
          role: config.role,
          log: log.child({ component: 'tracing' }),
          trustedProxies: config.trustedProxies,
        })
      : undefined;
    registerTracingMetrics(metrics.registry, tracing);
    if ('local' in transfers) {
      // The instance's governors and queue report from the coordinating process; this worker's
      // own governors count only the streams no ceiling applies to.
      registerBandwidthMetrics(metrics.registry, transfers.local, transfers.unanswered);
      instance?.link.handle('metrics.json', () => metrics.registry.getMetricsAsJSON());
    } else {
      registerBandwidthMetrics(metrics.registry, transfers.governors);
      registerAdmissionMetrics(metrics.registry, transfers.admission);
      // One process is the instance's one worker.
      registerWorkerMetrics(
        metrics.registry,
        () => [workerState(lifecycle)],
        () => 0,
        () => 0,
      );
    }
    built = {
      config,
      log,
      pool: database.pool,
      databaseUrl: database.url,
      isEmbeddedDatabase: database.embedded !== undefined,
      coordinator: standing,
      transfers,
      clock: systemClock,
      lifecycle,
      secrets: rotation,
      // Queues close before in-flight requests are awaited; waiting grants are cancelled (ADR 0008).
      preClose: [() => transfers.close()],
      onClose: [() => tls?.close(), () => rotation.close(), () => tracing?.shutdown()],
      status: [],
      readiness: [() => transfers.snapshot()],
      metrics,
      tracing,
      ...(instance
        ? {
            instance,
            ...(config.redisUrl ? {} : { counters: remoteCounterStore(instance.link, config.rateLimitTimeoutMs) }),
            beforeHealth: [
              () => instance.refresh(),
              () => ofInstance!.lease.refresh(),
              () => ofInstance!.transfers.refresh(),
            ],
          }
        : {}),
    };
    built.status.push(
      instance
        ? () => ({ workerIndex: instance.index, workers: instance.workerViews })
        : () => ({ workerIndex: 0, workers: [{ index: 0, state: workerState(lifecycle), restarts: 0 }] }),
    );
    const app = await buildApp(built);
    let metricsServer: MetricsServer | undefined;
    // A worker's scrape is the instance's; the coordinating process serves ARKVORY_METRICS_PORT.
    const rendered = instance
      ? { render: () => instance.metrics() }
      : spacedRenders(metrics, systemClock, systemTimers);
    if (config.metrics.port === undefined) app.routes.push(metricsRoute(rendered, () => rotation.config.metrics.token));
    else if (!instance) {
      metricsServer = await startMetricsServer(rendered, config.metrics.port, log);
      built.onClose.push(() => metricsServer?.close());
    }
    // Gateways that serve (not the worker) count usage; the last counts are flushed after the server closed.
    const usage =
      config.usageStats.enabled && config.role !== 'worker'
        ? startUsageRecorder({
            pool: database.pool,
            log: log.child({ component: 'usage' }),
            clock: systemClock,
            flushMs: config.usageStats.flushMs,
          })
        : undefined;
    if (usage) built.onClose.unshift(() => usage.stop());
    registerUsageMetrics(metrics.registry, usage?.status);
    // Only the writer records audit entries; elsewhere the family stays at zero.
    const auditFailures: AuditFailures | undefined = config.role === 'api' ? { failed: 0, timeout: 0 } : undefined;
    registerAuditMetrics(metrics.registry, auditFailures);
    server = createGatewayServer({
      ...(usage ? { onUsage: (ctx, o) => usage.observe(ctx, o) } : {}),
      routes: app.routes,
      gates: app.gates,
      log,
      readOnly: config.role === 'reader',
      // Only the writer changes anything (a reader refuses every other method first).
      ...(config.role === 'api' ? gatewayAudit(database.pool, log, config, auditFailures) : {}),
      onRequest: (o) => metrics.observeRequest(o),
      onEarlyFault: (code) => metrics.countEarlyFault(code),
      limits: config.frontDoor,
      tls,
      tracing: tracing && { tracing, mayContinue: traceContextFrom(config) },
    });
    registerFrontDoorMetrics(metrics.registry, server.frontDoor);
    registerTlsMetrics(metrics.registry, tls);
    await instance?.ready();
    const address = await server.listen(config.port, config.host, instance !== undefined);
    tls?.start();
    await rotation.start();
    if (!signals.requested) lifecycle.set('serving');
    instance?.serving();
    log.info(
      { role: config.role, url: `${schemeOf(server.server)}://${address.address}:${address.port}`, port: address.port },
      'listening',
    );
    const ceilings = configuredCeilings(config);
    log.info({ ceilings }, `ceilings: ${describeCeilings(ceilings)}`);
  } catch (err) {
    logStartupFailure(log, err);
    tls?.close();
    rotation.close();
    return await finish(log, built, server, database, config, EXIT.failure, coordinator);
  }
  const ended = await Promise.race([signals.stopped.then(() => 'stopped' as const), leaving.promise]);
  if (ended === 'database_lost') {
    const lost = new GatewayError(
      'embedded_database_lost',
      'the embedded PostgreSQL exited on its own; this gateway stops (start it again to restart its database)',
    );
    log.fatal({ code: lost.code }, lost.message);
    return await finish(log, built, server, database, config, EXIT.failure, coordinator);
  }
  if (ended === 'fenced') {
    const drainMs = Math.min(config.shutdownTimeoutMs, FENCED_DRAIN_MS);
    log.warn({ drainMs }, 'this worker is fenced alone; it drains and exits for its instance to start a new one');
    const brief = { ...config, shutdownTimeoutMs: drainMs };
    return await finish(log, built, server, database, brief, EXIT.fenced, coordinator);
  }
  return await finish(log, built, server, database, config, EXIT.ok, coordinator);
}

/**
 * Longest drain of a worker fenced alone: its streams get no quantum any more and new requests are
 * refused, so waiting longer only delays its replacement.
 */
const FENCED_DRAIN_MS = 5000;

/** A worker's lease and transfers: its instance's, over its link to the coordinating process. */
async function joinInstanceParts(
  config: Config,
  instance: WorkerInstance,
  own: Coordinator,
  log: Logger,
): Promise<{ lease: InstanceLease; transfers: RemoteTransfers }> {
  const lease = await joinInstanceLease(instance.link, own);
  // Once per silence, not per stream: each failed stream has its own request line.
  const onSilent = (takes: number) =>
    log.warn(
      { code: 'coordinator_unanswered', takes, deadlineMs: TAKE_CHECK_DEADLINE_MS },
      'the coordinating process did not answer; the paced streams waiting on it fail',
    );
  return { lease, transfers: createRemoteTransfers(config, systemClock, lease, instance.link, systemTimers, onSilent) };
}

async function finish(
  log: Logger,
  services: Services | undefined,
  server: GatewayServer | undefined,
  database: Database | undefined,
  config: Config,
  code: number,
  coordinator?: Coordinator,
): Promise<number> {
  let deadline = new CloseDeadline(CLOSE_STEPS_MS);
  try {
    for (const hook of services?.preClose ?? []) await hook();
    if (server) await server.close(config.shutdownTimeoutMs);
    deadline = new CloseDeadline(CLOSE_STEPS_MS);
    for (const hook of services?.onClose ?? []) await bounded(hook(), deadline.remainingMs(), 'a close hook', log);
  } catch (err) {
    log.error({ err }, 'shutdown step failed');
  }
  await bounded(coordinator?.close(), deadline.remainingMs(), 'the lease connection', log);
  // An embedded PostgreSQL is this process's child: its stop gets a bound of its own, so a step
  // that used up the deadline does not leave it running. An external one's pool is only sockets.
  if (database)
    await bounded(
      database.close(),
      database.embedded ? CLOSE_STEPS_MS : deadline.remainingMs(),
      'the database pool',
      log,
    );
  log.info({ code }, 'stopped');
  return code;
}

/** A gateway of one process as the one worker of its instance. */
function workerState(lifecycle: Lifecycle): WorkerView['state'] {
  return lifecycle.state === 'starting' ? 'starting' : lifecycle.isServing ? 'serving' : 'draining';
}

/** The writer's audit sinks: the audited actions, and the refused attempts of the routes that ask for it. */
function gatewayAudit(pool: pg.Pool, log: Logger, config: Config, failures: AuditFailures | undefined) {
  const deps = {
    pool,
    log: log.child({ component: 'audit' }),
    trusted: createTrustedProxies(config.trustedProxies),
    ...(failures ? { failures } : {}),
  };
  return { audit: createRequestAudit(deps), auditRefusal: createRefusalAudit(deps) };
}
