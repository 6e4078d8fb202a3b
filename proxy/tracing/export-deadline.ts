/**
 * A deadline on every HTTP request the OTLP exporter sends. CountingExporter (bounded-export.ts)
 * answers an export at OTEL_EXPORTER_OTLP_TIMEOUT, but the transport's own timeout is an idle one:
 * a collector that trickles its answer keeps the request, its socket and the serialised batch it
 * sends for as long as it trickles, and a new one is opened per export given up, up to the
 * exporter's concurrency limit (30), past which every export fails at once even when a fresh
 * connection would succeed. So each request is cut when its deadline passes. The exporter's
 * requests are those sent while tracing is suppressed: the batch processor exports in such a
 * context, and nothing else in the process makes one (undici-spans.ts tells them apart the same way).
 */
import diagnostics from 'node:diagnostics_channel';
import type { ClientRequest } from 'node:http';
import { context } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { ExportTimeoutError, type ExportTimers, systemTimers } from './bounded-export.ts';

/** node:http publishes each ClientRequest here as it is made, in the context of its caller. */
const REQUEST_CREATED = 'http.client.request.created';

/** Whether the request being made now is the exporter's; tests pass their own. */
const inExport = (): boolean => isTracingSuppressed(context.active());

/** Subscribes; the returned function unsubscribes. */
export function cutExportRequestsAfter(
  timeoutMs: number,
  options: { timers?: ExportTimers; isExport?: () => boolean } = {},
): () => void {
  const timers = options.timers ?? systemTimers;
  const isExport = options.isExport ?? inExport;
  const onCreated = (message: unknown) => {
    if (!isExport()) return;
    const { request } = message as { request: ClientRequest };
    const timer = timers.setTimeout(() => request.destroy(new ExportTimeoutError(timeoutMs)), timeoutMs);
    request.once('close', () => timers.clearTimeout(timer));
  };
  diagnostics.subscribe(REQUEST_CREATED, onCreated);
  return () => diagnostics.unsubscribe(REQUEST_CREATED, onCreated);
}
