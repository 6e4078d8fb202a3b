/**
 * The gateway's Prometheus metrics. Request figures arrive through `observeRequest` (the HTTP
 * server's per-request observer); everything else is read at scrape time from aggregates the
 * policy and storage modules already keep (`snapshot()`, `uploadStats()`), so nothing under
 * policy/ or storage-adapter/ knows about prom-client. No label carries a principal id, key, path
 * or file name.
 */
import {
  collectDefaultMetrics,
  Counter,
  Gauge,
  Histogram,
  register as defaultRegistry,
  type Registry,
} from 'prom-client';
import type { Coordinator, RenewalOutcome } from '../../policy/lease/coordinator.ts';
import type { CacheStats } from '../../lib/cache-stats.ts';
import type { UploadStats } from '../../storage-adapter/store.ts';
import type { SliceCacheStats } from '../../storage-adapter/slice-cache/index.ts';
import type { RequestObservation } from '../server/route-types.ts';
import type { Transfers } from '../gates/transfers.ts';
import type { FrontDoorCounters } from '../server/front-door.ts';
import { type Series, TalliedHistogram } from './tallied-histogram.ts';
import { RENEWAL_SECONDS_BUCKETS, REQUEST_SECONDS_BUCKETS, specOf, type GatewayMetricName } from './catalogue.ts';

export interface GatewayMetrics {
  readonly registry: Registry;
  observeRequest(observation: RequestObservation): void;
  watchTransfers(transfers: Transfers): void;
  watchCoordinator(coordinator: Coordinator): void;
  watchStore(store: { uploadStats(): UploadStats }): void;
  /** The slice cache's counters (storage-adapter/slice-cache/), read at scrape time. */
  watchSliceCache(stats: () => SliceCacheStats | undefined): void;
  /** Read-path caches (catalog, open files, small blobs), read at scrape time. */
  watchCaches(stats: () => readonly CacheStats[]): void;
  watchFrontDoor(frontDoor: { counters(): FrontDoorCounters }): void;
  /** The exposition text and its content type. */
  render(): Promise<{ contentType: string; body: string }>;
}

/** Methods outside this set are counted as `other`, so a client cannot invent label values. */
const METHODS = new Set(['GET', 'HEAD', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS']);
const DIRECTIONS = ['download', 'upload'] as const;
const LEASE_STATES = ['standalone', 'held', 'lapsed', 'fenced'] as const;

function counter(registry: Registry, name: GatewayMetricName, collect?: (this: Counter) => void): Counter {
  const spec = specOf(name);
  return new Counter({
    name,
    help: spec.help,
    labelNames: spec.labels,
    registers: [registry],
    ...(collect ? { collect } : {}),
  });
}

function gauge(registry: Registry, name: GatewayMetricName, collect: (this: Gauge) => void): Gauge {
  const spec = specOf(name);
  return new Gauge({ name, help: spec.help, labelNames: spec.labels, registers: [registry], collect });
}

/**
 * One per process. `registry` defaults to prom-client's default registry, where the rate-limit
 * counters (policy/rate-limit/metrics.ts) also register, so one scrape shows both.
 */
export function createGatewayMetrics(options: { registry?: Registry; processMetrics?: boolean } = {}): GatewayMetrics {
  const registry = options.registry ?? defaultRegistry;
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry });

  // Request counts and bytes are plain numbers on the hot path, handed to prom-client at scrape
  // time (its inc() hashes and validates a label object per call). Found by walking method →
  // status → route (strings and numbers the server already holds), not by a key string built and
  // hashed per request.
  interface RequestSeries {
    readonly labels: Record<string, string>;
    count: number;
    readonly duration: Series;
  }
  const requestSeries: RequestSeries[] = [];
  const seriesByMethod = new Map<string, Map<number, Map<string, RequestSeries>>>();
  counter(registry, 'arkvory_http_requests_total', function () {
    this.reset();
    for (const { labels, count } of requestSeries) this.inc(labels, count);
  });
  const durationSpec = specOf('arkvory_http_request_duration_seconds');
  const duration = new TalliedHistogram({
    name: durationSpec.name,
    help: durationSpec.help,
    buckets: REQUEST_SECONDS_BUCKETS,
    registry,
  });
  let bytesIn = 0;
  let bytesOut = 0;
  counter(registry, 'arkvory_http_bytes_total', function () {
    this.reset();
    this.inc({ direction: 'in' }, bytesIn);
    this.inc({ direction: 'out' }, bytesOut);
  });

  let transfers: Transfers | undefined;
  const eachDirection = (
    metric: Counter | Gauge,
    read: (s: ReturnType<Transfers['governors']['download']['snapshot']>) => number,
  ) => {
    if (!transfers) return;
    // Counters mirror running totals the governors keep: reset, then set to the total.
    if (metric instanceof Counter) metric.reset();
    for (const direction of DIRECTIONS) {
      const value = read(transfers.governors[direction].snapshot());
      if (metric instanceof Counter) metric.inc({ direction }, value);
      else metric.set({ direction }, value);
    }
  };
  counter(registry, 'arkvory_bandwidth_granted_bytes_total', function () {
    eachDirection(this, (s) => s.grantedBytes);
  });
  counter(registry, 'arkvory_bandwidth_granted_quanta_total', function () {
    eachDirection(this, (s) => s.grantedQuanta);
  });
  counter(registry, 'arkvory_bandwidth_waited_quanta_total', function () {
    eachDirection(this, (s) => s.waitedTakes);
  });
  counter(registry, 'arkvory_bandwidth_late_dropped_bytes_total', function () {
    eachDirection(this, (s) => s.lateDroppedBytes);
  });
  gauge(registry, 'arkvory_bandwidth_waiting_quanta', function () {
    eachDirection(this, (s) => s.waitingQuanta);
  });
  counter(registry, 'arkvory_bandwidth_rejected_total', function () {
    eachDirection(this, (s) => s.rejectedBusy);
  });
  gauge(registry, 'arkvory_bandwidth_limit_bytes_per_second', function () {
    if (!transfers) return;
    for (const direction of DIRECTIONS) {
      const s = transfers.governors[direction].snapshot();
      this.set({ direction, scope: 'process' }, s.rateBytesPerSec);
      this.set({ direction, scope: 'principal' }, s.perPrincipalBytesPerSec);
    }
  });

  const admissionKinds = () => {
    if (!transfers) return [];
    const a = transfers.admission.snapshot();
    return [
      ['download', a.downloads],
      ['upload', a.uploads],
    ] as const;
  };
  gauge(registry, 'arkvory_admission_active', function () {
    for (const [kind, c] of admissionKinds()) this.set({ kind }, c.active);
  });
  gauge(registry, 'arkvory_admission_queued', function () {
    for (const [kind, c] of admissionKinds()) this.set({ kind }, c.queued);
  });
  counter(registry, 'arkvory_admission_rejected_total', function () {
    this.reset();
    for (const [kind, c] of admissionKinds()) this.inc({ kind }, c.rejected);
  });

  let coordinator: Coordinator | undefined;
  gauge(registry, 'arkvory_lease_state', function () {
    if (!coordinator) return;
    const current =
      coordinator.fencedReason !== undefined
        ? 'fenced'
        : coordinator.snapshot() === null
          ? 'standalone'
          : coordinator.isPermitted()
            ? 'held'
            : coordinator.fencedReason !== undefined
              ? 'fenced'
              : 'lapsed';
    for (const state of LEASE_STATES) this.set({ state }, state === current ? 1 : 0);
  });
  const renewals = counter(registry, 'arkvory_lease_renewals_total');
  for (const outcome of ['confirmed', 'rejected', 'failed'] satisfies RenewalOutcome[]) renewals.inc({ outcome }, 0);
  const renewalSpec = specOf('arkvory_lease_renewal_duration_seconds');
  const renewalSeconds = new Histogram({
    name: renewalSpec.name,
    help: renewalSpec.help,
    buckets: [...RENEWAL_SECONDS_BUCKETS],
    registers: [registry],
  });
  const fencing = counter(registry, 'arkvory_lease_fencing_events_total');
  fencing.inc(0);

  let store: { uploadStats(): UploadStats } | undefined;
  counter(registry, 'arkvory_storage_uploads_total', function () {
    const s = store?.uploadStats() ?? { committed: 0, discarded: 0, failed: 0 };
    this.reset();
    for (const outcome of ['committed', 'discarded', 'failed'] as const) this.inc({ outcome }, s[outcome]);
  });

  let cacheStats: () => readonly CacheStats[] = () => [];
  const eachCache = (metric: Counter | Gauge, read: (s: CacheStats) => number) => {
    metric.reset();
    for (const s of cacheStats()) {
      if (metric instanceof Counter) metric.inc({ cache: s.cache }, read(s));
      else metric.set({ cache: s.cache }, read(s));
    }
  };
  counter(registry, 'arkvory_cache_hits_total', function () {
    eachCache(this, (s) => s.hits);
  });
  counter(registry, 'arkvory_cache_misses_total', function () {
    eachCache(this, (s) => s.misses);
  });
  gauge(registry, 'arkvory_cache_entries', function () {
    eachCache(this, (s) => s.entries);
  });
  gauge(registry, 'arkvory_cache_bytes', function () {
    eachCache(this, (s) => s.bytes);
  });

  let sliceStats: () => SliceCacheStats | undefined = () => undefined;
  const slice = (metric: Counter | Gauge, read: (s: SliceCacheStats) => Array<[Record<string, string>, number]>) => {
    const s = sliceStats();
    metric.reset();
    if (!s) return;
    for (const [labels, value] of read(s)) {
      if (metric instanceof Counter) metric.inc(labels, value);
      else metric.set(labels, value);
    }
  };
  counter(registry, 'arkvory_slice_cache_requests_total', function () {
    slice(this, (s) => [
      [{ result: 'hit' }, s.hitRequests],
      [{ result: 'miss' }, s.missRequests],
      [{ result: 'bypass' }, s.bypassRequests],
    ]);
  });
  counter(registry, 'arkvory_slice_cache_bytes_total', function () {
    slice(this, (s) => [
      [{ source: 'hit' }, s.hitBytes],
      [{ source: 'miss' }, s.missBytes],
    ]);
  });
  counter(registry, 'arkvory_slice_cache_origin_bytes_total', function () {
    slice(this, (s) => [[{}, s.originBytes]]);
  });
  gauge(registry, 'arkvory_slice_cache_fills_in_flight', function () {
    slice(this, (s) => [[{}, s.fillsInFlight]]);
  });
  gauge(registry, 'arkvory_slice_cache_waiters', function () {
    slice(this, (s) => [[{}, s.waiters]]);
  });
  counter(registry, 'arkvory_slice_cache_digest_failures_total', function () {
    slice(this, (s) => [
      [{ where: 'origin' }, s.digestFailures.origin],
      [{ where: 'disk' }, s.digestFailures.disk],
    ]);
  });
  counter(registry, 'arkvory_slice_cache_evictions_total', function () {
    slice(this, (s) => [[{}, s.evictions]]);
  });
  counter(registry, 'arkvory_slice_cache_relayed_fills_total', function () {
    slice(this, (s) => [[{}, s.relayedFills]]);
  });
  gauge(registry, 'arkvory_slice_cache_held_bytes', function () {
    slice(this, (s) => [[{}, s.heldBytes]]);
  });

  let frontDoor: { counters(): FrontDoorCounters } | undefined;
  gauge(registry, 'arkvory_http_open_connections', function () {
    if (frontDoor) this.set(frontDoor.counters().open);
  });
  gauge(registry, 'arkvory_http_max_connections', function () {
    if (frontDoor) this.set(frontDoor.counters().maxConnections);
  });
  counter(registry, 'arkvory_http_connections_refused_total', function () {
    this.reset();
    this.inc(frontDoor?.counters().refused ?? 0);
  });
  counter(registry, 'arkvory_http_idle_connections_closed_total', function () {
    this.reset();
    this.inc(frontDoor?.counters().idleClosed ?? 0);
  });
  counter(registry, 'arkvory_http_client_timeouts_total', function () {
    const t = frontDoor?.counters().timeouts ?? { body: 0, send: 0 };
    this.reset();
    this.inc({ phase: 'body' }, t.body);
    this.inc({ phase: 'send' }, t.send);
  });

  return {
    registry,
    watchCaches(stats) {
      cacheStats = stats;
    },
    watchSliceCache(stats) {
      sliceStats = stats;
    },
    watchFrontDoor(f) {
      frontDoor = f;
    },
    observeRequest(o) {
      const method = METHODS.has(o.method) ? o.method : 'other';
      // Bounded: methods above, route templates, status codes.
      let byStatus = seriesByMethod.get(method);
      if (!byStatus) seriesByMethod.set(method, (byStatus = new Map()));
      let byRoute = byStatus.get(o.status);
      if (!byRoute) byStatus.set(o.status, (byRoute = new Map()));
      let series = byRoute.get(o.route);
      if (!series) {
        const labels = { method, route: o.route, status: String(o.status) };
        series = { labels, count: 0, duration: duration.series(labels) };
        byRoute.set(o.route, series);
        requestSeries.push(series);
      }
      series.count++;
      series.duration.observe(o.seconds);
      if (o.bytesIn > 0) bytesIn += o.bytesIn;
      if (o.bytesOut > 0) bytesOut += o.bytesOut;
    },
    watchTransfers(t) {
      transfers = t;
    },
    watchCoordinator(c) {
      coordinator = c;
      c.onRenewal((outcome, seconds) => {
        renewals.inc({ outcome });
        renewalSeconds.observe(seconds);
      });
      c.onFenced(() => fencing.inc());
    },
    watchStore(s) {
      store = s;
    },
    async render() {
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
  };
}
