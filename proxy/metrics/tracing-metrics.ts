/** `arkvory_trace_spans_*`: spans exported and dropped (docs/tracing.md), read at scrape time; zero with tracing off. */
import type { Registry } from 'prom-client';
import { counter, gauge } from './families.ts';

/** What the tracing metrics read (proxy/tracing/tracing.ts `Tracing`). */
export interface TracingStatus {
  readonly counts: {
    readonly exported: number;
    readonly droppedQueueFull: number;
    readonly droppedExportFailed: number;
  };
  readonly pending: number;
}

export function registerTracingMetrics(registry: Registry, tracing: TracingStatus | undefined): void {
  counter(registry, 'arkvory_trace_spans_exported_total', function () {
    this.reset();
    this.inc(tracing?.counts.exported ?? 0);
  });
  counter(registry, 'arkvory_trace_spans_dropped_total', function () {
    this.reset();
    this.inc({ reason: 'queue_full' }, tracing?.counts.droppedQueueFull ?? 0);
    this.inc({ reason: 'export_failed' }, tracing?.counts.droppedExportFailed ?? 0);
  });
  gauge(registry, 'arkvory_trace_spans_pending', function () {
    this.set(tracing?.pending ?? 0);
  });
}
