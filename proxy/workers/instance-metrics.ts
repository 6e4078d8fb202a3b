/**
 * The instance's /metrics from its processes' families (the coordinating process's and each
 * worker's, as prom-client's `getMetricsAsJSON` gives them): summed, except the families whose
 * workers all report one setting or state.
 */
import { type Aggregator, AggregatorRegistry, type MetricType } from 'prom-client';
import { STORE_STATES } from '../store-health/store-health.ts';

/** A family as `getMetricsAsJSON` gives it, in the parts read here. */
export interface Family {
  name: string;
  type?: MetricType;
  aggregator?: Aggregator;
  values: Array<{ value: number; labels: Partial<Record<string, string | number>>; metricName?: string }>;
}

/** One value for the instance rather than a sum: the smallest for an expiry, the largest otherwise. */
export const NOT_SUMMED: Readonly<Record<string, 'max' | 'min'>> = {
  arkvory_bandwidth_limit_bytes_per_second: 'max',
  arkvory_lease_state: 'max',
  arkvory_tls_certificate_expiry_timestamp_seconds: 'min',
  // Every worker reloads the same files and counts the same broken states: once each, as one process would.
  arkvory_tls_reload_failures_total: 'max',
  arkvory_database_login_privileged: 'max',
  arkvory_router_gateways: 'max',
};

/** A family with one series per state, 1 for the current one: the instance shows its worst worker's. */
const ONE_STATE: Readonly<Record<string, readonly string[]>> = {
  arkvory_store_state: STORE_STATES,
};

export function sumInstance(lists: Family[][]): { contentType: string; body: Promise<string> } {
  for (const [name, order] of Object.entries(ONE_STATE)) keepWorstState(lists, name, order);
  // prom-client aggregates a family as its first list says: say it in each.
  for (const list of lists)
    for (const m of list) {
      const how = NOT_SUMMED[m.name] ?? (ONE_STATE[m.name] ? 'max' : undefined);
      if (how) m.aggregator = how;
    }
  const summed = AggregatorRegistry.aggregate(lists);
  return { contentType: summed.contentType, body: summed.metrics() };
}

/** Sets each process's series of `name` to 1 for the worst state any of them is in, 0 for the others. */
function keepWorstState(lists: Family[][], name: string, order: readonly string[]): void {
  const families = lists.flatMap((list) => list.filter((m) => m.name === name));
  let worst = -1;
  for (const family of families)
    for (const v of family.values) if (v.value === 1) worst = Math.max(worst, order.indexOf(String(v.labels.state)));
  if (worst < 0) return;
  for (const family of families)
    family.values = family.values.map((v) => ({ ...v, value: v.labels.state === order[worst] ? 1 : 0 }));
}
