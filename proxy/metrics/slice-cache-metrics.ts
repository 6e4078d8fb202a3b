/** `arkvory_slice_cache_*`: the slice cache's counters (storage-adapter/slice-cache/), read at scrape time. */
import { Counter, type Gauge, type Registry } from 'prom-client';
import type { SliceCacheStats } from '../../storage-adapter/slice-cache/index.ts';
import { counter, gauge } from './families.ts';

/** Registers the slice cache's families; without a cache (`undefined` stats) they export no series. */
export function registerSliceCacheMetrics(registry: Registry, stats: () => SliceCacheStats | undefined): void {
  const slice = (metric: Counter | Gauge, read: (s: SliceCacheStats) => Array<[Record<string, string>, number]>) => {
    const s = stats();
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
  counter(registry, 'arkvory_slice_cache_disk_errors_total', function () {
    slice(this, (s) => [[{}, s.diskErrors]]);
  });
  counter(registry, 'arkvory_slice_cache_evictions_total', function () {
    slice(this, (s) => [[{}, s.evictions]]);
  });
  counter(registry, 'arkvory_slice_cache_relayed_fills_total', function () {
    slice(this, (s) => [[{}, s.relayedFills]]);
  });
  counter(registry, 'arkvory_slice_cache_abandoned_fills_total', function () {
    slice(this, (s) => [[{}, s.abandonedFills]]);
  });
  counter(registry, 'arkvory_slice_cache_origin_resumes_total', function () {
    slice(this, (s) => [[{}, s.originResumes]]);
  });
  gauge(registry, 'arkvory_slice_cache_held_bytes', function () {
    slice(this, (s) => [[{}, s.heldBytes]]);
  });
  gauge(registry, 'arkvory_slice_cache_memory_bytes', function () {
    slice(this, (s) => [[{}, s.memoryBytes]]);
  });
}
