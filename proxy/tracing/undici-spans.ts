/**
 * Client spans for the requests this process sends through undici (the static-HTTP store, the S3
 * store's small requests, the rules service, the router's reads) and over the S3 store's own
 * sockets (large reads and single PUTs: storage-adapter/streaming/socket-request-channels.ts), with
 * the W3C `traceparent` added so the next hop continues the trace. Both publish every request on
 * diagnostics channels in the same shapes; subscribing here reaches every pool, client and socket
 * without their code knowing about tracing. A request that carries a
 * `traceparent` already (the router sets its own) is left as it is; so is one sent outside a
 * traced request (probes) or by the exporter itself (tracing suppressed).
 */
import diagnostics from 'node:diagnostics_channel';
import { context, propagation, type Span, SpanKind, SpanStatusCode, trace, type Tracer } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_FULL,
} from '@opentelemetry/semantic-conventions';
import { SOCKET_REQUEST_CHANNELS } from '../../storage-adapter/streaming/socket-request-channels.ts';

interface UndiciRequest {
  readonly method: string;
  readonly origin: string | URL;
  readonly path: string;
  readonly headers: string[];
  addHeader(key: string, value: string): unknown;
}

const spans = new WeakMap<object, Span>();

function hasTraceparent(headers: readonly string[]): boolean {
  for (let i = 0; i < headers.length; i += 2) if (headers[i]!.toLowerCase() === 'traceparent') return true;
  return false;
}

/** Subscribes; the returned function unsubscribes. */
export function traceUndiciRequests(tracer: Tracer): () => void {
  const onCreate = (message: unknown) => {
    const { request } = message as { request: UndiciRequest };
    const active = context.active();
    if (isTracingSuppressed(active) || !trace.getSpan(active)?.isRecording()) return;
    if (!Array.isArray(request.headers) || hasTraceparent(request.headers)) return;
    const origin = new URL(String(request.origin));
    const query = request.path.indexOf('?');
    // The path only: a query may carry a signature.
    const path = query === -1 ? request.path : request.path.slice(0, query);
    const span = tracer.startSpan(
      request.method,
      {
        kind: SpanKind.CLIENT,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: request.method,
          [ATTR_SERVER_ADDRESS]: origin.hostname,
          [ATTR_SERVER_PORT]: Number(origin.port) || (origin.protocol === 'https:' ? 443 : 80),
          [ATTR_URL_FULL]: `${origin.origin}${path}`,
        },
      },
      active,
    );
    spans.set(request, span);
    const carrier: Record<string, string> = {};
    propagation.inject(trace.setSpan(active, span), carrier);
    for (const name in carrier) request.addHeader(name, carrier[name]!);
  };
  const onHeaders = (message: unknown) => {
    const { request, response } = message as { request: object; response: { statusCode: number } };
    const span = spans.get(request);
    if (!span) return;
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, response.statusCode);
    // The response head is the store's first byte.
    span.addEvent('first_byte');
    if (response.statusCode >= 500) {
      span.setAttribute(ATTR_ERROR_TYPE, String(response.statusCode));
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
  };
  const onTrailers = (message: unknown) => {
    const { request } = message as { request: object };
    spans.get(request)?.end();
    spans.delete(request);
  };
  const onError = (message: unknown) => {
    const { request, error } = message as { request: object; error: { code?: unknown; name?: string } };
    const span = spans.get(request);
    if (!span) return;
    const type = typeof error.code === 'string' ? error.code : (error.name ?? 'Error');
    span.setAttribute(ATTR_ERROR_TYPE, type);
    span.setStatus({ code: SpanStatusCode.ERROR, message: type });
    span.end();
    spans.delete(request);
  };
  const subscriptions = [
    ['undici:request:create', onCreate],
    ['undici:request:headers', onHeaders],
    ['undici:request:trailers', onTrailers],
    ['undici:request:error', onError],
    [SOCKET_REQUEST_CHANNELS.create, onCreate],
    [SOCKET_REQUEST_CHANNELS.headers, onHeaders],
    [SOCKET_REQUEST_CHANNELS.done, onTrailers],
    [SOCKET_REQUEST_CHANNELS.error, onError],
  ] as const;
  for (const [name, fn] of subscriptions) diagnostics.subscribe(name, fn);
  return () => {
    for (const [name, fn] of subscriptions) diagnostics.unsubscribe(name, fn);
  };
}
