/**
 * OpenTelemetry tracing of this process (docs/tracing.md): the SDK's tracer provider with a batch
 * processor over OTLP/HTTP, bounded and counted (bounded-export.ts), the W3C trace context as the
 * only propagator, AsyncLocalStorage as the context manager (so outgoing undici requests find the
 * request they serve), and server spans per request. Built only when the configuration turns
 * tracing on; otherwise nothing here is loaded.
 */
import type { IncomingMessage } from 'node:http';
import {
  type Attributes,
  type Context,
  context,
  propagation,
  ROOT_CONTEXT,
  type SpanContext,
  SpanKind,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { TraceState, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import {
  ATTR_NETWORK_PEER_ADDRESS,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_NETWORK_PROTOCOL_VERSION,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_NAME,
  ATTR_URL_PATH,
  ATTR_URL_SCHEME,
  ATTR_USER_AGENT_ORIGINAL,
} from '@opentelemetry/semantic-conventions';
import type { Logger } from 'pino';
import { knownMethod, spanMethod } from '../../lib/http-method.ts';
import { redactUrl } from '../../lib/redact-url.ts';
import type { TracingConfig } from '../config/config.ts';
import { createTrustedProxies, requestScheme, type TrustedProxies } from '../router/forwarded.ts';
import { BoundedProcessor, CountingExporter, type ExportCounts } from './bounded-export.ts';
import { RequestTrace } from './request-trace.ts';
import { cutExportRequestsAfter } from './export-deadline.ts';
import { createSampler, untrustedParent } from './sampler.ts';
import { spanPath } from './span-path.ts';
import { traceUndiciRequests } from './undici-spans.ts';
import { TRACE_STATE_KEY, UNTRUSTED_VALUE } from './untrusted-marker.ts';

export interface Tracing {
  readonly tracer: Tracer;
  /** Spans exported and dropped so far (arkvory_trace_spans_*). */
  readonly counts: Readonly<ExportCounts>;
  /** Spans handed to the exporter and not yet answered for. */
  readonly pending: number;
  /**
   * The server span of a request. `mayContinue`: whether the peer may continue a trace it sends
   * (ARKVORY_TRACE_CONTEXT_FROM); otherwise its `traceparent` is ignored and a new trace starts.
   * A continued trace's sampled flag is followed only from a peer in ARKVORY_TRUSTED_PROXIES, and
   * not when that peer marked it as a client's it does not trust (`arkvory=untrusted`).
   */
  startServer(req: IncomingMessage, mayContinue: (peer: string | undefined) => boolean): RequestTrace;
  /** `traceparent` (and `tracestate`) of a request's span as a flat header list, for a hop undici does not make. */
  headersOf(request: RequestTrace): string[];
  /** Exports what is queued (bounded by the export timeout) and stops. */
  shutdown(): Promise<void>;
}

const propagator = new W3CTraceContextPropagator();
let contextInstalled = false;

/**
 * Every string attribute is cut to this many characters: most come from the request (its path, its
 * headers), whose head a client may fill with up to 16 KiB. Any path of ordinary names fits.
 */
export const ATTRIBUTE_VALUE_LENGTH_LIMIT = 4096;
/** `server.address`: a host name has at most 253 characters (RFC 1035); more is no host name. */
export const SERVER_ADDRESS_LENGTH_LIMIT = 255;
/** `user_agent.original`: real clients name themselves in far less. */
export const USER_AGENT_LENGTH_LIMIT = 512;

/**
 * A `tracestate` is kept to this many characters (W3C trace context), the members that fit. The
 * SDK's TraceState keeps the header it was made from as well as its members, and every span of the
 * request shares it until exported: a client's 16 KiB of it would outweigh the span it rides on.
 */
const TRACE_STATE_LENGTH_LIMIT = 512;

/** The request's trace context as the propagator reads it, `tracestate` cut to the members kept. */
const requestHeaders = {
  get(carrier: IncomingMessage['headers'], key: string): string | string[] | undefined {
    const value = carrier[key];
    if (key !== 'tracestate' || value === undefined) return value;
    const joined = Array.isArray(value) ? value.join(',') : value;
    return joined.length > TRACE_STATE_LENGTH_LIMIT ? new TraceState(joined).serialize() : joined;
  },
  keys: (carrier: IncomingMessage['headers']) => Object.keys(carrier),
};

/**
 * The remote parent as a context, without the product's own `tracestate` member
 * (untrusted-marker.ts), and whether that member said the sender's own peer was untrusted. Taken
 * out whoever sent it: it counts from a trusted peer only (the caller's check), and it is never
 * passed on to a store or the rules service, where it would stand for this process's peer.
 */
function withoutMarker(remote: SpanContext): { context: Context; marked: boolean } {
  const value = remote.traceState?.get(TRACE_STATE_KEY);
  if (remote.traceState === undefined || value === undefined)
    return { context: trace.setSpanContext(ROOT_CONTEXT, remote), marked: false };
  const rest = remote.traceState.unset(TRACE_STATE_KEY);
  const { traceState: _, ...bare } = remote;
  // An empty list is no `tracestate` at all (W3C), not an empty header sent on.
  const kept = rest.serialize() === '' ? bare : { ...remote, traceState: rest };
  return { context: trace.setSpanContext(ROOT_CONTEXT, kept), marked: value === UNTRUSTED_VALUE };
}

/** The largest TCP port: a Host's "port" past it is no port. */
const MAX_PORT = 65_535;

/**
 * Parsed `host[:port]` of the Host header; undefined when absent. The port only when it is one: a
 * client's digits past 65535 (30 of them make an integer no int64 holds) would go out as an
 * `intValue` the collector cannot read, and it refuses the whole export, every other request's
 * spans in it too.
 */
function hostOf(req: IncomingMessage): { address: string; port: number | undefined } | undefined {
  const host = req.headers.host;
  if (!host) return undefined;
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(host);
  if (!m) return undefined;
  const port = m[2] !== undefined && m[2].length <= 5 ? Number(m[2]) : undefined;
  return { address: m[1]!, port: port !== undefined && port <= MAX_PORT ? port : undefined };
}

/**
 * The server span's HTTP semantic-convention attributes: the routed path only (span-path.ts), never
 * the query (a pre-signed link's signature is in it) nor an absolute-form target's user info; the
 * method `_OTHER` unless a known one, the Host and the user agent cut short (a client's to size).
 * `http.request.method_original` is left out: it would be the unbounded method again. `url.scheme`
 * is the client's by the gateway's one rule (`requestScheme`): the listener's, unless a trusted
 * proxy says how the client reached it; never what a client says of itself.
 */
function serverAttributes(
  req: IncomingMessage,
  method: string,
  peer: string | undefined,
  trusted: TrustedProxies,
): Attributes {
  const path = spanPath(req.url ?? '/');
  const host = hostOf(req);
  const attributes: Attributes = {
    [ATTR_HTTP_REQUEST_METHOD]: method,
    [ATTR_URL_SCHEME]: requestScheme(req, trusted).scheme,
    [ATTR_NETWORK_PROTOCOL_VERSION]: req.httpVersion,
  };
  if (path !== undefined) attributes[ATTR_URL_PATH] = path;
  if (host) attributes[ATTR_SERVER_ADDRESS] = host.address.slice(0, SERVER_ADDRESS_LENGTH_LIMIT);
  if (host?.port !== undefined) attributes[ATTR_SERVER_PORT] = host.port;
  if (peer) attributes[ATTR_NETWORK_PEER_ADDRESS] = peer;
  const userAgent = req.headers['user-agent'];
  if (userAgent) attributes[ATTR_USER_AGENT_ORIGINAL] = userAgent.slice(0, USER_AGENT_LENGTH_LIMIT);
  return attributes;
}

/**
 * `trustedProxies`: ARKVORY_TRUSTED_PROXIES (`config.trustedProxies`), whose word on the client's
 * scheme `url.scheme` takes, and whose sampled flag a continued trace follows; none when left out.
 */
export function openTracing(
  config: TracingConfig,
  options: { role: string; log: Logger; trustedProxies?: readonly string[] },
): Tracing {
  const trusted = createTrustedProxies(options.trustedProxies ?? []);
  if (!contextInstalled) {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(propagator);
    contextInstalled = true;
  }
  const counts: ExportCounts = { exported: 0, droppedQueueFull: 0, droppedExportFailed: 0 };
  const exporter = new OTLPTraceExporter({
    url: config.url,
    headers: { ...config.headers },
    timeoutMillis: config.exportTimeoutMs,
  });
  let bounded: BoundedProcessor | undefined;
  // The endpoint without user info or query (a collector's credentials or API key can ride in
  // either); never its headers, which may carry a token.
  const endpoint = redactUrl(config.url);
  const counting = new CountingExporter(exporter, counts, (n) => bounded?.settled(n), {
    timeoutMs: config.exportTimeoutMs,
    // One line as an outage begins and one as it ends, never one per failed export.
    onHealth: (change) => {
      if (change.failing)
        options.log.warn(
          { endpoint, reason: change.reason },
          'tracing: span exports failing; spans are dropped (arkvory_trace_spans_dropped_total) until one succeeds',
        );
      else options.log.info({ endpoint, failedSpans: change.failedSpans }, 'tracing: span exports succeed again');
    },
  });
  const batch = new BatchSpanProcessor({
    exporter: counting,
    maxQueueSize: config.maxQueueSize,
    maxExportBatchSize: config.maxExportBatchSize,
    scheduledDelayMillis: config.scheduleDelayMs,
    exportTimeoutMillis: config.batchTimeoutMs,
  });
  bounded = new BoundedProcessor(batch, counts, config.maxQueueSize);
  const provider = new TracerProvider({
    sampler: createSampler(config.sampler, config.samplerRatio),
    resource: resourceFromAttributes({
      ...config.resourceAttributes,
      [ATTR_SERVICE_NAME]: config.serviceName,
      'arkvory.role': options.role,
    }),
    spanProcessors: [bounded],
    spanLimits: { attributeValueLengthLimit: ATTRIBUTE_VALUE_LENGTH_LIMIT },
  });
  const tracer = provider.getTracer('arkvory');
  const unsubscribe = traceUndiciRequests(tracer);
  const uncut = cutExportRequestsAfter(config.exportTimeoutMs);
  options.log.info(
    { endpoint, sampler: config.sampler, ratio: config.samplerRatio },
    'tracing: spans exported over OTLP/HTTP',
  );
  const tracing: Tracing = {
    tracer,
    counts,
    get pending() {
      return bounded.pending;
    },
    startServer(req, mayContinue) {
      const peer = req.socket?.remoteAddress;
      let parent = ROOT_CONTEXT;
      if (req.headers.traceparent !== undefined && mayContinue(peer)) {
        const remote = trace.getSpanContext(propagator.extract(ROOT_CONTEXT, req.headers, requestHeaders));
        if (remote !== undefined) {
          // Only a trusted proxy (a router, whose span decided) is followed in its sampled flag: from
          // anyone else the trace id is kept, and the sampler decides as for a new trace (sampler.ts).
          // Nor is the flag of a client a trusted router with tracing off passed on marked untrusted.
          const { context: read, marked } = withoutMarker(remote);
          const trustedPeer = peer !== undefined && trusted.isTrusted(peer);
          parent = trustedPeer && !marked ? read : untrustedParent(read);
        }
      }
      // No attributes for the sampler: none of the OTEL_TRACES_SAMPLER samplers reads them, and an
      // unsampled request (most of them at a low ratio) should not build them at all.
      const span = tracer.startSpan(spanMethod(req.method), { kind: SpanKind.SERVER }, parent);
      if (span.isRecording()) span.setAttributes(serverAttributes(req, knownMethod(req.method), peer, trusted));
      return new RequestTrace(tracer, span, parent, config.recordPrincipal);
    },
    headersOf(request) {
      const carrier: Record<string, string> = {};
      propagator.inject(request.context, carrier, {
        set: (c, key, value) => {
          c[key] = value;
        },
      });
      const out: string[] = [];
      for (const name in carrier) out.push(name, carrier[name]!);
      return out;
    },
    async shutdown() {
      unsubscribe();
      await provider.shutdown().catch(() => {});
      // After the last flush: its requests are cut at their deadline too.
      uncut();
    },
  };
  return tracing;
}
