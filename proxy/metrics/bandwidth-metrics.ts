/** `arkvory_bandwidth_*`: the running totals the two governors keep, read at scrape time. */
import { Counter, type Gauge, type Registry } from 'prom-client';
import type { BandwidthSnapshot } from '../../policy/bandwidth/index.ts';
import { counter, gauge } from './families.ts';

const DIRECTIONS = ['download', 'upload'] as const;
const NONE_UNANSWERED = { download: 0, upload: 0 } as const;

/**
 * Registers the bandwidth families of `governors` (one per process); `unanswered`, a worker's takes
 * failed because its coordinating process stopped answering (none elsewhere).
 */
export function registerBandwidthMetrics(
  registry: Registry,
  governors: Readonly<Record<'download' | 'upload', { snapshot(): BandwidthSnapshot }>>,
  unanswered: Readonly<Record<'download' | 'upload', number>> = NONE_UNANSWERED,
): void {
  const eachDirection = (metric: Counter | Gauge, read: (s: BandwidthSnapshot) => number) => {
    // Counters mirror running totals the governors keep: reset, then set to the total.
    if (metric instanceof Counter) metric.reset();
    for (const direction of DIRECTIONS) {
      const value = read(governors[direction].snapshot());
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
  counter(registry, 'arkvory_bandwidth_unanswered_total', function () {
    this.reset();
    for (const direction of DIRECTIONS) this.inc({ direction }, unanswered[direction]);
  });
  gauge(registry, 'arkvory_bandwidth_limit_bytes_per_second', function () {
    for (const direction of DIRECTIONS) {
      const s = governors[direction].snapshot();
      this.set({ direction, scope: 'process' }, s.rateBytesPerSec);
      this.set({ direction, scope: 'principal' }, s.perPrincipalBytesPerSec);
    }
  });
}
