/**
 * Export that never holds a request up: finished spans wait in the SDK's batch processor and are
 * sent off the request path. Two things are added here. A bound on every span not yet answered for
 * (queued or being sent), so an unreachable collector costs at most that many spans of memory, and
 * the count of spans dropped, past the bound or in a failed export, for
 * `arkvory_trace_spans_dropped_total`.
 */
import type { Context } from '@opentelemetry/api';
import { type ExportResult, ExportResultCode } from '@opentelemetry/core';
import type { ReadableSpan, Span, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace';

export interface ExportCounts {
  exported: number;
  droppedQueueFull: number;
  droppedExportFailed: number;
}

/** Counts what `inner` exported or failed to, and tells `settled` how many spans it answered for. */
export class CountingExporter implements SpanExporter {
  readonly #inner: SpanExporter;
  readonly #counts: ExportCounts;
  readonly #settled: (spans: number) => void;

  constructor(inner: SpanExporter, counts: ExportCounts, settled: (spans: number) => void) {
    this.#inner = inner;
    this.#counts = counts;
    this.#settled = settled;
  }

  export(spans: ReadableSpan[], resultCallback: (result: ExportResult) => void): void {
    this.#inner.export(spans, (result) => {
      if (result.code === ExportResultCode.SUCCESS) this.#counts.exported += spans.length;
      else this.#counts.droppedExportFailed += spans.length;
      this.#settled(spans.length);
      resultCallback(result);
    });
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** Passes at most `maxPending` unanswered spans to `inner`; the rest are dropped and counted. */
export class BoundedProcessor implements SpanProcessor {
  readonly #inner: SpanProcessor;
  readonly #counts: ExportCounts;
  readonly #maxPending: number;
  #pending = 0;

  constructor(inner: SpanProcessor, counts: ExportCounts, maxPending: number) {
    this.#inner = inner;
    this.#counts = counts;
    this.#maxPending = maxPending;
  }

  /** Spans the exporter answered for (sent or failed): room for as many more. */
  settled(spans: number): void {
    this.#pending = Math.max(0, this.#pending - spans);
  }

  get pending(): number {
    return this.#pending;
  }

  onStart(span: Span, parentContext: Context): void {
    this.#inner.onStart(span, parentContext);
  }

  onEnd(span: ReadableSpan): void {
    // Unsampled spans are never exported (the batch processor skips them too).
    if ((span.spanContext().traceFlags & 1) === 0) return;
    if (this.#pending >= this.#maxPending) {
      this.#counts.droppedQueueFull++;
      return;
    }
    this.#pending++;
    this.#inner.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }
}
