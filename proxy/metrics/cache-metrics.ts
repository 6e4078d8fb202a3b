/** `arkvory_cache_*{cache}`: the read-path caches (catalog, open files, small blobs), read at scrape time. */
import { Counter, type Gauge, type Registry } from 'prom-client';
import type { CacheStats } from '../../lib/cache-stats.ts';
import { counter, gauge } from './families.ts';

/** Registers the cache families; `stats` lists every cache of the process at the time of a scrape. */
export function registerCacheMetrics(registry: Registry, stats: () => readonly CacheStats[]): void {
  const eachCache = (metric: Counter | Gauge, read: (s: CacheStats) => number) => {
    metric.reset();
    for (const s of stats()) {
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
}
