/**
 * The gateway's Prometheus metrics. Request figures arrive through `observeRequest` (the HTTP
 * server's per-request observer); every other source registers its own families when it is built,
 * through the `register…Metrics` function beside this module (front door, bandwidth, admission,
 * lease, store uploads, caches), and they are read at scrape time from aggregates the policy and
 * storage modules already keep (`snapshot()`, `uploadStats()`), so nothing under policy/ or
 * storage-adapter/ knows about prom-client. No label carries a principal id, key, path or file name.
 */
import { collectDefaultMetrics, register as defaultRegistry, type Registry } from 'prom-client';
import type { RequestObservation } from '../server/route-types.ts';
import { registerRequestMetrics } from './request-metrics.ts';

export interface GatewayMetrics {
  /** Where each source registers its families. */
  readonly registry: Registry;
  observeRequest(observation: RequestObservation): void;
  /** A client fault answered before any request existed (proxy/server/front-door.ts `answeredEarly`). */
  countEarlyFault(code: string): void;
  /** The exposition text and its content type. */
  render(): Promise<{ contentType: string; body: string }>;
}

/**
 * One per process. `registry` defaults to prom-client's default registry, where the rate-limit
 * counters (policy/rate-limit/metrics.ts) also register, so one scrape shows both.
 */
export function createGatewayMetrics(options: { registry?: Registry; processMetrics?: boolean } = {}): GatewayMetrics {
  const registry = options.registry ?? defaultRegistry;
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry });
  const requests = registerRequestMetrics(registry);
  return {
    registry,
    observeRequest: requests.observe,
    countEarlyFault: requests.earlyFault,
    async render() {
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
  };
}
