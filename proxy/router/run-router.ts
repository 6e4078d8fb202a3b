/**
 * `arkvory serve` with ARKVORY_ROLE=router: a stateless front proxy. It takes no lease and no
 * barrier and keeps nothing but its discovery cache, so several routers can run side by side.
 * Startup: discovery must work once (the lease table readable, or the static list parsed), one
 * probe round runs, then it listens. SIGTERM/SIGINT: stop accepting, drain, exit 0. SIGHUP or a
 * changed secret file: the database password of lease discovery rotates. With ARKVORY_WORKERS above
 * 1 each worker is a whole router (its own discovery, probes and outlier detection) listening on
 * the shared port (proxy/workers/).
 */
import { logStartupFailure } from '../server/startup-failure.ts';
import { watchStopSignals } from '../server/stop-signals.ts';
import type { Logger } from 'pino';
import type { Config } from '../config/config.ts';
import { BackendPool } from './backend-pool.ts';
import { leaseDiscovery, leaseLoginVerifier, staticDiscovery, type Discovery } from './discovery.ts';
import { SecretRotation, type StartSecrets } from '../config/secret-rotation.ts';
import { createTrustedProxies } from './forwarded.ts';
import { createHealthMonitor } from './health-monitor.ts';
import { createProxyHandler } from './proxy-handler.ts';
import { createRouterServer, defaultMaxInFlight } from './router-server.ts';
import { ASSUMED_DESCRIPTOR_LIMIT, descriptorLimit } from '../server/front-door/descriptor-budget.ts';
import type { Tracing } from '../tracing/tracing.ts';
import { traceContextFrom } from '../tracing/trace-context-from.ts';
import { createClientFaults } from './client-faults.ts';
import { createRouterRegistry, createRouterTally, startRouterMetricsServer } from './router-metrics.ts';
import { connectionShare, type WorkerInstance } from '../workers/worker-instance.ts';
import { RouterStats } from './router-stats.ts';
import type { MetricsServer } from '../metrics/metrics-endpoint.ts';
import { systemClock } from '../../policy/clock.ts';
import { schemeOf } from '../server/listener.ts';
import { openListenerTls, type ServedTls } from '../tls/served-tls.ts';

const EXIT_OK = 0;
const EXIT_FAILURE = 1;

export async function runRouter(
  config: Config,
  log: Logger,
  secrets: StartSecrets = { env: {}, reads: new Map() },
  instance?: WorkerInstance,
): Promise<number> {
  // An explicit connection bound is the instance's: each worker serves its share.
  const maxConnections = config.frontDoor.maxConnections;
  if (instance && maxConnections !== undefined)
    config = {
      ...config,
      frontDoor: { ...config.frontDoor, maxConnections: connectionShare(maxConnections, instance.workers) },
    };
  let draining = false;
  const rotation = new SecretRotation(config, secrets, {
    log: log.child({ component: 'secrets' }),
    verifiers: [leaseLoginVerifier(Math.max(1000, config.router.probeIntervalMs))],
  });
  const signals = watchStopSignals(log, () => {
    draining = true;
  });

  const pool = new BackendPool({ outlier: config.router.outlier });
  const stats = new RouterStats();
  let discovery: Discovery | undefined;
  const reportChange = (change: { url: string; healthy: boolean; reason: string }) => {
    if (!change.healthy) log.warn({ backend: change.url, reason: change.reason }, 'gateway left the pool');
  };
  const tally = createRouterTally();
  const faults = createClientFaults({ log, count: (kind) => tally.countClientFault(kind) });
  const trusted = createTrustedProxies(config.trustedProxies);
  const handler = createProxyHandler({
    pool,
    trusted,
    connectTimeoutMs: config.router.connectTimeoutMs,
    idleTimeoutMs: config.router.idleTimeoutMs,
    onPoolChange: reportChange,
    stats,
    faults,
  });
  let metricsServer: MetricsServer | undefined;
  let monitor: ReturnType<typeof createHealthMonitor> | undefined;
  let server: ReturnType<typeof createRouterServer> | undefined;
  let tls: ServedTls | undefined;
  let code = EXIT_OK;
  let tracing: Tracing | undefined;
  try {
    // The SDK is loaded only when tracing is on.
    tracing = config.tracing
      ? (await import('../tracing/tracing.ts')).openTracing(config.tracing, {
          role: config.role,
          log: log.child({ component: 'tracing' }),
          trustedProxies: config.trustedProxies,
        })
      : undefined;
    tls = await openListenerTls(config.tls, { clock: systemClock, log: log.child({ component: 'tls' }) });
    server = createRouterServer({
      pool,
      handler,
      log,
      faults,
      isDraining: () => draining,
      limits: config.frontDoor,
      stats,
      maxInFlight: defaultMaxInFlight(descriptorLimit() ?? ASSUMED_DESCRIPTOR_LIMIT, config.tls !== undefined),
      tls,
      tracing,
      mayContinue: traceContextFrom(config),
      isTrusted: (peer) => trusted.isTrusted(peer),
      ...(instance
        ? {
            workers: async () => {
              await instance.refresh();
              return { workerIndex: instance.index, workers: instance.workerViews };
            },
          }
        : {}),
    });
    discovery = config.router.backends
      ? staticDiscovery(config.router.backends)
      : await leaseDiscovery(
          // Each new connection reads the rotated URL (loadConfig requires one without a static list).
          () => rotation.config.databaseUrl!,
          log.child({ component: 'discovery' }),
          Math.max(1000, config.router.probeIntervalMs),
        );
    // Fail fast on a wrong URL or an unmigrated database; later failures keep the cache.
    try {
      pool.update(await discovery.discover());
    } catch (err) {
      throw new Error(
        `cannot read the gateway leases (${(err as Error).message}); check ARKVORY_DATABASE_URL and run \`npm run migrate\`, or list the gateways in ARKVORY_ROUTER_BACKENDS`,
        { cause: err },
      );
    }
    monitor = createHealthMonitor({
      pool,
      discovery,
      intervalMs: config.router.probeIntervalMs,
      log: log.child({ component: 'probe' }),
    });
    await monitor.runRound();
    monitor.start();
    if (config.metrics.port !== undefined) {
      const sources = { tally, pool, stats, tracing, frontDoor: server.frontDoor, tls };
      // A worker's families are summed by its coordinating process, which serves the metrics port.
      if (instance) {
        const registry = await createRouterRegistry(sources);
        instance.link.handle('metrics.json', () => registry.getMetricsAsJSON());
      } else metricsServer = await startRouterMetricsServer(config.metrics.port, sources, log);
    }
    await instance?.ready();
    const address = await server.listen(config.port, config.host, instance !== undefined);
    tls?.start();
    await rotation.start();
    instance?.serving();
    log.info(
      {
        role: 'router',
        url: `${schemeOf(server.server)}://${address.address}:${address.port}`,
        port: address.port,
        discovery: discovery.kind,
        backends: pool.snapshot().map((b) => ({ url: b.url, role: b.role, healthy: b.healthy })),
      },
      'listening',
    );
  } catch (err) {
    logStartupFailure(log, err);
    code = EXIT_FAILURE;
  }
  if (code === EXIT_OK && !signals.requested) await signals.stopped;
  try {
    if (server?.server.listening) await server.close(config.shutdownTimeoutMs);
  } catch (err) {
    log.error({ err }, 'shutdown step failed');
  }
  tls?.close();
  rotation.close();
  await monitor?.stop();
  await metricsServer?.close();
  handler.close();
  await discovery?.close().catch(() => {});
  await tracing?.shutdown();
  log.info({ code }, 'stopped');
  return code;
}
