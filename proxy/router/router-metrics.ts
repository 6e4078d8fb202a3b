/**
 * The router's Prometheus metrics: its own families (catalogue.ts `ROUTER_METRICS`) and the
 * process ones, served on ARKVORY_METRICS_PORT (127.0.0.1 only); the main port's `/metrics` is the
 * writer's, proxied like any other request. Counting is plain numbers; prom-client is loaded only
 * when the port is set (the router keeps its module graph small: docs/router.md).
 */
import type { Logger } from 'pino';
import type { MetricsServer } from '../metrics/metrics-endpoint.ts';
import { CLIENT_FAULT_KINDS, type ClientFaultKind } from './forwardable.ts';

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

/** The loopback `/metrics` server of a router: the tally read at scrape time, plus process metrics. */
export async function startRouterMetricsServer(tally: RouterTally, port: number, log: Logger): Promise<MetricsServer> {
  const [{ Counter, Registry, collectDefaultMetrics }, { ROUTER_METRICS }, { startMetricsServer }] = await Promise.all([
    import('prom-client'),
    import('../metrics/catalogue.ts'),
    import('../metrics/metrics-endpoint.ts'),
  ]);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const spec = ROUTER_METRICS[0];
  new Counter({
    name: spec.name,
    help: spec.help,
    labelNames: spec.labels,
    registers: [registry],
    collect() {
      this.reset();
      for (const [kind, count] of tally.clientFaults()) this.inc({ kind }, count);
    },
  });
  return startMetricsServer(
    { render: async () => ({ contentType: registry.contentType, body: await registry.metrics() }) },
    port,
    log,
  );
}
