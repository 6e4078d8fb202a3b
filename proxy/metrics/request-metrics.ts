/** `arkvory_http_requests_total`, `…_request_duration_seconds`, `…_bytes_total`, `…_client_faults_total`: one observation per request. */
import type { Registry } from 'prom-client';
import type { RequestObservation } from '../server/route-types.ts';
import { REQUEST_SECONDS_BUCKETS, specOf } from './catalogue.ts';
import { counter } from './families.ts';
import { type Series, TalliedHistogram } from './tallied-histogram.ts';

/** Methods outside this set are counted as `other`, so a client cannot invent label values. */
const METHODS = new Set(['GET', 'HEAD', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS']);

/** The request families' inputs: each request's observation, and the client faults no request carried. */
export interface RequestMetrics {
  /** What the HTTP server calls when a response closes. */
  observe(observation: RequestObservation): void;
  /** A client fault answered before any request existed (a malformed head, a CONNECT…), by its code. */
  earlyFault(code: string): void;
}

/** Registers the request families. */
export function registerRequestMetrics(registry: Registry): RequestMetrics {
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

  // Bounded: error codes of the catalogue, status numbers, client_aborted.
  const faults = new Map<string, number>();
  counter(registry, 'arkvory_http_client_faults_total', function () {
    this.reset();
    for (const [code, n] of faults) this.inc({ code }, n);
  });

  const countFault = (code: string) => faults.set(code, (faults.get(code) ?? 0) + 1);

  const observe = (o: RequestObservation) => {
    if (o.fault !== undefined) countFault(o.fault);
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
  };
  return { observe, earlyFault: countFault };
}
