/**
 * The rules service's loopback `/metrics` (`ARKVORY_METRICS_PORT`; without it the service exports
 * none): what it shares with a gateway's listener, its front door's connections and HTTP/2 streams
 * and the served certificate (an alert on its expiry must see every TLS listener), plus process
 * metrics. prom-client is loaded only when the port is set.
 */
import type { Logger } from 'pino';
import { systemClock } from '../../policy/clock.ts';
import { systemTimers } from '../../policy/timers.ts';
import type { MetricsServer } from '../metrics/metrics-endpoint.ts';
import type { TlsStatus } from '../metrics/tls-metrics.ts';
import type { AuditFailures } from '../audit/request-audit.ts';
import type { FrontDoorCounters } from '../server/front-door.ts';

export interface RulesServiceSources {
  frontDoor: { counters(): FrontDoorCounters };
  /** The served certificate; undefined on plain HTTP. */
  tls: TlsStatus | undefined;
  /** Audit entries of its admin routes not recorded (request-audit.ts). */
  auditFailures: Readonly<AuditFailures>;
}

export async function startRulesServiceMetricsServer(
  port: number,
  sources: RulesServiceSources,
  log: Logger,
): Promise<MetricsServer> {
  const [
    { Registry, collectDefaultMetrics },
    { registerFrontDoorMetrics },
    { registerTlsMetrics },
    { startMetricsServer, spacedRenders },
    { registerAuditMetrics },
  ] = await Promise.all([
    import('prom-client'),
    import('../metrics/front-door-metrics.ts'),
    import('../metrics/tls-metrics.ts'),
    import('../metrics/metrics-endpoint.ts'),
    import('../metrics/audit-metrics.ts'),
  ]);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  registerFrontDoorMetrics(registry, sources.frontDoor);
  registerTlsMetrics(registry, sources.tls);
  registerAuditMetrics(registry, sources.auditFailures);
  const render = async () => ({ contentType: registry.contentType, body: await registry.metrics() });
  return startMetricsServer(spacedRenders({ render }, systemClock, systemTimers), port, log);
}
