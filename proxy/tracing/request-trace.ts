/**
 * One traced request as the server, its gates and routes see it: the server span, the context its
 * children and outgoing calls descend from, and the pacing totals the bandwidth meters add up
 * (written on the server span when the response closes). Undefined on a request when tracing is
 * off, so untraced requests pay for none of this.
 */
import {
  type Attributes,
  type Context,
  context,
  type Span,
  SpanStatusCode,
  trace,
  type Tracer,
} from '@opentelemetry/api';
import { ATTR_ERROR_TYPE, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_HTTP_ROUTE } from '@opentelemetry/semantic-conventions';
import { spanMethod } from '../../lib/http-method.ts';

export interface RequestFinish {
  readonly method: string;
  /** The route template; undefined where there is none (the router). */
  readonly route: string | undefined;
  readonly status: number;
  readonly bytesIn: number;
  readonly bytesOut: number;
  readonly completed: boolean;
  /** Recorded only when the operator turned it on (ARKVORY_TRACE_PRINCIPAL). */
  readonly principalId: string | undefined;
}

export class RequestTrace {
  readonly span: Span;
  readonly traceId: string;
  /** The gate running now (traced-gate.ts): a gate may describe its decision on it. */
  gateSpan: Span | undefined = undefined;
  /** Time the bandwidth governors held this request's body (ms), the bytes they let through, the waits. */
  pacedMs = 0;
  pacedBytes = 0;
  pacedWaits = 0;
  readonly #tracer: Tracer;
  readonly #recordPrincipal: boolean;
  readonly #parent: Context;
  #context: Context | undefined;

  constructor(tracer: Tracer, span: Span, parent: Context, recordPrincipal: boolean) {
    this.#tracer = tracer;
    this.span = span;
    this.#parent = parent;
    this.traceId = span.spanContext().traceId;
    this.#recordPrincipal = recordPrincipal;
  }

  /**
   * The server span's context: children and outgoing requests descend from it. Made when first
   * asked for: an unsampled request has no children, and nothing of it runs inside the context.
   */
  get context(): Context {
    return (this.#context ??= trace.setSpan(this.#parent, this.span));
  }

  /** Whether the request is sampled: unsampled requests create no children. */
  get isRecording(): boolean {
    return this.span.isRecording();
  }

  startChild(name: string, attributes?: Attributes): Span {
    return this.#tracer.startSpan(name, { attributes }, this.context);
  }

  finish(end: RequestFinish): void {
    const span = this.span;
    if (!span.isRecording()) {
      span.end();
      return;
    }
    if (end.route !== undefined) {
      // `HTTP unmatched` for a method of the client's own: the name never carries it.
      span.updateName(`${spanMethod(end.method)} ${end.route}`);
      span.setAttribute(ATTR_HTTP_ROUTE, end.route);
      span.setAttribute('arkvory.bytes_out', end.bytesOut);
      span.setAttribute('arkvory.bytes_in', end.bytesIn);
    }
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, end.status);
    if (this.pacedWaits > 0 || this.pacedBytes > 0) {
      span.setAttribute('arkvory.pacing.wait_ms', Math.round(this.pacedMs * 10) / 10);
      span.setAttribute('arkvory.pacing.waits', this.pacedWaits);
      span.setAttribute('arkvory.pacing.bytes', this.pacedBytes);
    }
    if (this.#recordPrincipal && end.principalId !== undefined) span.setAttribute('enduser.id', end.principalId);
    if (end.status >= 500) {
      span.setAttribute(ATTR_ERROR_TYPE, String(end.status));
      span.setStatus({ code: SpanStatusCode.ERROR });
    } else if (!end.completed) {
      span.setAttribute(ATTR_ERROR_TYPE, 'client_aborted');
    }
    span.end();
  }
}

/** Ends `span` as failed with the error's stable code (never its message: it may quote a request). */
export function endFailed(span: Span, err: unknown): void {
  const code = (err as { code?: unknown } | undefined)?.code;
  const type = typeof code === 'string' ? code : ((err as Error | undefined)?.name ?? 'Error');
  span.setAttribute(ATTR_ERROR_TYPE, type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type });
  span.end();
}

/**
 * Runs `fn` with `request`'s span as the active one (outgoing undici requests and store opens
 * descend from it). Needed for sampled requests only: what reads the active context
 * (undici-spans.ts, traced-store.ts) does nothing for a span that is not recording.
 */
export function runInTrace<T>(request: RequestTrace, fn: () => T): T {
  return context.with(request.context, fn);
}
