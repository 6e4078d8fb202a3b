/**
 * The router's metrics (proxy/metrics/catalogue.ts `ROUTER_METRICS`, docs/router.md "Metrics"), on
 * the loopback metrics server only (`ARKVORY_METRICS_PORT`): the router's main port passes `/metrics`
 * on to the writer. Counting is plain numbers; prom-client is loaded here, only then: a router
 * without a metrics port keeps its module graph small (docs/router.md says why that matters).
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { MetricsServer } from '../metrics/metrics-endpoint.ts';
import type { TlsStatus } from '../metrics/tls-metrics.ts';
import type { TracingStatus } from '../metrics/tracing-metrics.ts';
import type { FrontDoorCounters } from '../server/front-door.ts';
import type { BackendPool } from './backend-pool.ts';
import { CLIENT_FAULT_KINDS, type ClientFaultKind } from './forwardable.ts';
import { OVERLOAD_REASONS, RETRY_REASONS, type RouterStats } from './router-stats.ts';

export interface RouterTally {
  countClientFault(kind: ClientFaultKind): void;
  clientFaults(): ReadonlyMap<ClientFaultKind, number>;
}

export function createRouterTally(): RouterTally {
  const faults = new Map<ClientFaultKind, number>(CLIENT_FAULT_KINDS.map((k) => [k, 0]));
  return {
    countClientFault(kind) {
      faults.set(kind, (faults.get(kind) ?? 0) + 1);
    },
    clientFaults: () => faults,
  };
}

/** Gateways per state, from the pool's snapshot (pure). */
export function gatewayStates(
  backends: ReadonlyArray<{ healthy: boolean; store: string; ejected: boolean }>,
): Record<'reads' | 'store_unreachable' | 'ejected' | 'down', number> {
  const counts = { reads: 0, store_unreachable: 0, ejected: 0, down: 0 };
  for (const b of backends) {
    if (!b.healthy) counts.down++;
    else if (b.store === 'unreachable') counts.store_unreachable++;
    else if (b.ejected) counts.ejected++;
    else counts.reads++;
  }
  return counts;
}

export interface RouterSources {
  tally: RouterTally;
  pool: BackendPool;
  stats: RouterStats;
  tracing: TracingStatus | undefined;
  /** The client listener's connections, timeouts and HTTP/2 counts (the gateway's `arkvory_http_*connections*`, `arkvory_http2_*`). */
  frontDoor: { counters(): FrontDoorCounters };
  /** The served certificate (`arkvory_tls_*`); undefined on plain HTTP. */
  tls: TlsStatus | undefined;
}

/**
 * The loopback `/metrics` server of a router: its counts read at scrape time, and families of the
 * gateway's table for what the router shares with it: the span export counts (`arkvory_trace_spans_*`;
 * zero with tracing off), the front door's connections and HTTP/2 streams, the served certificate;
 * plus process metrics.
 */
export async function startRouterMetricsServer(
  port: number,
  sources: RouterSources,
  log: Logger,
): Promise<MetricsServer> {
  const [registry, { startMetricsServer }] = await Promise.all([
    createRouterRegistry(sources),
    import('../metrics/metrics-endpoint.ts'),
  ]);
  return startMetricsServer(
    { render: async () => ({ contentType: registry.contentType, body: await registry.metrics() }) },
    port,
    log,
  );
}

/** The router's families and process metrics (a router worker's, summed by its coordinating process). */
export async function createRouterRegistry(sources: RouterSources): Promise<Registry> {
  const [
    { Counter, Gauge, Registry, collectDefaultMetrics },
    { ROUTER_METRICS },
    { registerTracingMetrics },
    { registerFrontDoorMetrics },
    { registerTlsMetrics },
  ] = await Promise.all([
    import('prom-client'),
    import('../metrics/catalogue.ts'),
    import('../metrics/tracing-metrics.ts'),
    import('../metrics/front-door-metrics.ts'),
    import('../metrics/tls-metrics.ts'),
  ]);
  const specOf = (name: (typeof ROUTER_METRICS)[number]['name']) => ROUTER_METRICS.find((m) => m.name === name)!;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const { tally, pool, stats } = sources;
  // Each family is rebuilt at scrape time from the counts the router keeps.
  const faults = specOf('arkvory_router_client_faults_total');
  new Counter({
    name: faults.name,
    help: faults.help,
    labelNames: faults.labels,
    registers: [registry],
    collect() {
      this.reset();
      for (const [kind, count] of tally.clientFaults()) this.inc({ kind }, count);
    },
  });
  const retries = specOf('arkvory_router_retries_total');
  new Counter({
    name: retries.name,
    help: retries.help,
    labelNames: retries.labels,
    registers: [registry],
    collect() {
      this.reset();
      for (const reason of RETRY_REASONS) this.inc({ reason }, stats.retries[reason]);
    },
  });
  const ejections = specOf('arkvory_router_ejections_total');
  new Counter({
    name: ejections.name,
    help: ejections.help,
    registers: [registry],
    collect() {
      this.reset();
      this.inc(stats.ejections);
    },
  });
  const gateways = specOf('arkvory_router_gateways');
  new Gauge({
    name: gateways.name,
    help: gateways.help,
    labelNames: gateways.labels,
    registers: [registry],
    collect() {
      for (const [state, count] of Object.entries(gatewayStates(pool.snapshot()))) this.set({ state }, count);
    },
  });
  const inFlight = specOf('arkvory_router_requests_in_flight');
  new Gauge({
    name: inFlight.name,
    help: inFlight.help,
    registers: [registry],
    collect() {
      this.set(stats.inFlight);
    },
  });
  const overloaded = specOf('arkvory_router_overloaded_total');
  new Counter({
    name: overloaded.name,
    help: overloaded.help,
    labelNames: overloaded.labels,
    registers: [registry],
    collect() {
      this.reset();
      for (const reason of OVERLOAD_REASONS) this.inc({ reason }, stats.overloaded[reason]);
    },
  });
  registerTracingMetrics(registry, sources.tracing);
  registerFrontDoorMetrics(registry, sources.frontDoor);
  registerTlsMetrics(registry, sources.tls);
  return registry;
}
