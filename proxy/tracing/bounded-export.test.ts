/** The counting exporter's deadline and outage reports, on timers moved by hand. */
import { type ExportResult, ExportResultCode } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace';
import { expect, it } from 'vitest';
import {
  CountingExporter,
  type ExportCounts,
  type ExportHealthChange,
  ExportTimeoutError,
  type ExportTimers,
  exportFailureReason,
} from './bounded-export.ts';

/** Timers that fire only when the test advances them. */
class ManualTimers implements ExportTimers {
  now = 0;
  #next = 0;
  readonly #due = new Map<number, { at: number; fn: () => void }>();

  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.#next++;
    this.#due.set(id, { at: this.now + ms, fn });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.#due.delete(handle as number);
  }

  get armed(): number {
    return this.#due.size;
  }

  advance(ms: number): void {
    this.now += ms;
    for (const [id, timer] of [...this.#due]) {
      if (timer.at > this.now) continue;
      this.#due.delete(id);
      timer.fn();
    }
  }
}

/** An exporter whose answers the test gives: a collector still trickling its response never does. */
class HeldExporter implements SpanExporter {
  readonly callbacks: ((result: ExportResult) => void)[] = [];
  shutdownWork: Promise<void> = Promise.resolve();
  export(_spans: ReadableSpan[], resultCallback: (result: ExportResult) => void): void {
    this.callbacks.push(resultCallback);
  }
  shutdown(): Promise<void> {
    return this.shutdownWork;
  }
  forceFlush(): Promise<void> {
    return this.shutdownWork;
  }
}

const spans = (n: number) => Array.from({ length: n }, () => ({}) as ReadableSpan);

function setup() {
  const timers = new ManualTimers();
  const inner = new HeldExporter();
  const counts: ExportCounts = { exported: 0, droppedQueueFull: 0, droppedExportFailed: 0 };
  const settled: number[] = [];
  const results: ExportResult[] = [];
  const exporter = new CountingExporter(inner, counts, (n) => settled.push(n), { timeoutMs: 1000, timers });
  return { timers, inner, counts, settled, results, exporter };
}

it('an export not answered within the timeout counts as failed, releases its spans, and a late answer is ignored', () => {
  const { timers, inner, counts, settled, results, exporter } = setup();
  exporter.export(spans(4), (r) => results.push(r));
  timers.advance(999);
  expect(settled).toEqual([]);
  expect(results).toEqual([]);
  timers.advance(1);
  expect(counts).toEqual({ exported: 0, droppedQueueFull: 0, droppedExportFailed: 4 });
  expect(settled).toEqual([4]);
  expect(results).toHaveLength(1);
  expect(results[0]!.code).toBe(ExportResultCode.FAILED);
  expect(results[0]!.error).toBeInstanceOf(ExportTimeoutError);
  // The collector's answer, once it ends, changes nothing: the spans were already answered for.
  inner.callbacks[0]!({ code: ExportResultCode.SUCCESS });
  expect(counts).toEqual({ exported: 0, droppedQueueFull: 0, droppedExportFailed: 4 });
  expect(settled).toEqual([4]);
  expect(results).toHaveLength(1);
});

it('an answer in time is counted once and clears its deadline', () => {
  const { timers, inner, counts, settled, results, exporter } = setup();
  exporter.export(spans(3), (r) => results.push(r));
  exporter.export(spans(2), (r) => results.push(r));
  timers.advance(500);
  inner.callbacks[0]!({ code: ExportResultCode.SUCCESS });
  inner.callbacks[1]!({ code: ExportResultCode.FAILED });
  expect(timers.armed).toBe(0);
  timers.advance(5000);
  expect(counts).toEqual({ exported: 3, droppedQueueFull: 0, droppedExportFailed: 2 });
  expect(settled).toEqual([3, 2]);
  expect(results.map((r) => r.code)).toEqual([ExportResultCode.SUCCESS, ExportResultCode.FAILED]);
});

it('shutdown and flush wait for the exporter at most the export timeout', async () => {
  const { timers, inner, exporter } = setup();
  inner.shutdownWork = new Promise(() => {});
  let done = 0;
  void exporter.shutdown().then(() => done++);
  void exporter.forceFlush().then(() => done++);
  await Promise.resolve();
  expect(done).toBe(0);
  timers.advance(1000);
  await expect.poll(() => done).toBe(2);
});

it('an outage is reported once as it begins and once as it ends, however many exports fail in it', () => {
  const timers = new ManualTimers();
  const inner = new HeldExporter();
  const counts: ExportCounts = { exported: 0, droppedQueueFull: 0, droppedExportFailed: 0 };
  const changes: ExportHealthChange[] = [];
  const exporter = new CountingExporter(inner, counts, () => {}, {
    timeoutMs: 1000,
    timers,
    onHealth: (change) => changes.push(change),
  });
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:4318'), { code: 'ECONNREFUSED' });
  for (let i = 0; i < 50; i++) {
    exporter.export(spans(2), () => {});
    inner.callbacks[i]!({ code: ExportResultCode.FAILED, error: refused });
  }
  // A timed-out export inside the outage is one more failure, not a new outage.
  exporter.export(spans(3), () => {});
  timers.advance(1000);
  expect(changes).toEqual([{ failing: true, reason: 'ECONNREFUSED' }]);
  exporter.export(spans(1), () => {});
  inner.callbacks[51]!({ code: ExportResultCode.SUCCESS });
  exporter.export(spans(1), () => {});
  inner.callbacks[52]!({ code: ExportResultCode.SUCCESS });
  expect(changes).toEqual([
    { failing: true, reason: 'ECONNREFUSED' },
    { failing: false, failedSpans: 103 },
  ]);
  // The next outage is reported again, its reason a collector's status, never its answer's words.
  exporter.export(spans(1), () => {});
  inner.callbacks[53]!({
    code: ExportResultCode.FAILED,
    error: Object.assign(new Error('Unauthorized: token abc'), { name: 'OTLPExporterError', code: 401 }),
  });
  expect(changes.at(-1)).toEqual({ failing: true, reason: 'http_401' });
});

it('the reason of a failure is a stable word, never an error message', () => {
  expect(exportFailureReason(new ExportTimeoutError(1000))).toBe('export_timeout');
  expect(exportFailureReason(new Error('Concurrent export limit reached'))).toBe('Error');
  expect(exportFailureReason(Object.assign(new Error('x'), { code: 'not a code: secret' }))).toBe('Error');
  expect(exportFailureReason(undefined)).toBe('unknown');
});
