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

/** The timers an export's deadline runs on; tests pass their own. */
export interface ExportTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Node's timers, unreferenced: a pending deadline never keeps the process up. */
export const systemTimers: ExportTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** An export the collector did not finish answering within the export timeout. */
export class ExportTimeoutError extends Error {
  readonly code = 'export_timeout';
  constructor(timeoutMs: number) {
    super(`OTLP export not answered within ${timeoutMs} ms`);
    this.name = 'ExportTimeoutError';
  }
}

/**
 * An outage of the collector begins (the first export failing after one that succeeded, or the
 * first of all) or ends (the first succeeding after failures): one of each per outage, however many
 * exports fail in it, so an unreachable collector costs two log lines, not one per export.
 */
export type ExportHealthChange =
  | { readonly failing: true; readonly reason: string }
  | { readonly failing: false; readonly failedSpans: number };

/**
 * Why an export failed, as a stable word: an error's string code (`ECONNREFUSED`,
 * `export_timeout`), `http_<status>` for a collector's refusal, else the error's class name. Never
 * its message: a collector's answer body is in it.
 */
export function exportFailureReason(error: unknown): string {
  const { code, name } = (error ?? {}) as { code?: unknown; name?: unknown };
  if (typeof code === 'string' && /^[A-Za-z0-9_]{1,64}$/.test(code)) return code;
  if (typeof code === 'number' && Number.isInteger(code)) return `http_${code}`;
  return typeof name === 'string' && /^[A-Za-z0-9_]{1,64}$/.test(name) ? name : 'unknown';
}

/**
 * Counts what `inner` exported or failed to, and tells `settled` how many spans it answered for.
 * Every export is answered within `timeoutMs`: the OTLP transport's own timeout is an idle one, so a
 * collector that trickles its answer would hold an export, and its spans' room in the bound, for as
 * long as it trickles. Past the deadline the export counts as failed and a late answer is ignored.
 */
export class CountingExporter implements SpanExporter {
  readonly #inner: SpanExporter;
  readonly #counts: ExportCounts;
  readonly #settled: (spans: number) => void;
  readonly #timeoutMs: number;
  readonly #timers: ExportTimers;
  readonly #onHealth: ((change: ExportHealthChange) => void) | undefined;
  /** Spans failed since the outage began; undefined while exports succeed. */
  #outageFailed: number | undefined = undefined;

  constructor(
    inner: SpanExporter,
    counts: ExportCounts,
    settled: (spans: number) => void,
    options: { timeoutMs: number; timers?: ExportTimers; onHealth?: (change: ExportHealthChange) => void },
  ) {
    this.#inner = inner;
    this.#counts = counts;
    this.#settled = settled;
    this.#timeoutMs = options.timeoutMs;
    this.#timers = options.timers ?? systemTimers;
    this.#onHealth = options.onHealth;
  }

  export(spans: ReadableSpan[], resultCallback: (result: ExportResult) => void): void {
    let answered = false;
    const answer = (result: ExportResult) => {
      if (answered) return;
      answered = true;
      this.#timers.clearTimeout(timer);
      if (result.code === ExportResultCode.SUCCESS) this.#counts.exported += spans.length;
      else this.#counts.droppedExportFailed += spans.length;
      this.#noteHealth(result, spans.length);
      this.#settled(spans.length);
      resultCallback(result);
    };
    const timer = this.#timers.setTimeout(
      () => answer({ code: ExportResultCode.FAILED, error: new ExportTimeoutError(this.#timeoutMs) }),
      this.#timeoutMs,
    );
    this.#inner.export(spans, answer);
  }

  #noteHealth(result: ExportResult, spans: number): void {
    if (result.code === ExportResultCode.SUCCESS) {
      if (this.#outageFailed === undefined) return;
      const failedSpans = this.#outageFailed;
      this.#outageFailed = undefined;
      this.#onHealth?.({ failing: false, failedSpans });
    } else if (this.#outageFailed === undefined) {
      this.#outageFailed = spans;
      this.#onHealth?.({ failing: true, reason: exportFailureReason(result.error) });
    } else this.#outageFailed += spans;
  }

  /** The inner exporter's, bounded by the export timeout: it waits for exports a trickle holds. */
  shutdown(): Promise<void> {
    return this.#bounded(this.#inner.shutdown());
  }

  forceFlush(): Promise<void> {
    return this.#bounded(this.#inner.forceFlush?.() ?? Promise.resolve());
  }

  #bounded(work: Promise<void>): Promise<void> {
    return new Promise((resolve) => {
      const timer = this.#timers.setTimeout(resolve, this.#timeoutMs);
      const done = () => {
        this.#timers.clearTimeout(timer);
        resolve();
      };
      work.then(done, done);
    });
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
