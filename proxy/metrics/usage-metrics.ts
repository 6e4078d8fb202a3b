/** `arkvory_usage_*`: the usage statistics kept in memory and lost (docs/observability.md), read at scrape time; zero with them off. */
import type { Registry } from 'prom-client';
import type { UsageStatus } from '../stats/usage-recorder.ts';
import { counter, gauge } from './families.ts';

export function registerUsageMetrics(registry: Registry, usage: UsageStatus | undefined): void {
  gauge(registry, 'arkvory_usage_pending_rows', function () {
    this.set(usage?.pendingRows ?? 0);
  });
  counter(registry, 'arkvory_usage_dropped_total', function () {
    this.reset();
    this.inc({ kind: 'download' }, usage?.dropped.downloads ?? 0);
    this.inc({ kind: 'request' }, usage?.dropped.requests ?? 0);
  });
  counter(registry, 'arkvory_usage_flush_failures_total', function () {
    this.reset();
    this.inc({ reason: 'failed' }, usage?.flushFailures.failed ?? 0);
    this.inc({ reason: 'timeout' }, usage?.flushFailures.timeout ?? 0);
  });
}
