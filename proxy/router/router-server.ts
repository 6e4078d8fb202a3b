/**
 * The router's HTTP server: `/health/live` and `/health/status` answered locally, every other
 * request proxied. `/health/status` is 200 while at least one gateway can serve reads; its body
 * says how many gateways are healthy and whether the writer is (no addresses: it is public).
 */
import type http from 'node:http';
import { createListener } from '../server/listener.ts';
import type { ServedTls } from '../tls/served-tls.ts';
import { makeGraceful } from '../server/graceful-server.ts';
import {
  DEFAULT_FRONT_DOOR,
  defaultMaxConnections,
  installFrontDoor,
  serverOptions,
  type FrontDoor,
  type FrontDoorLimits,
} from '../server/front-door.ts';
import { randomUUID } from 'node:crypto';
import type { AddressInfo, Socket } from 'node:net';
import { stateOf } from '../server/front-door/connection-state.ts';
import type { Logger } from 'pino';
import { knownMethod } from '../../lib/http-method.ts';
import { CLIENT_FAULT_LOG, LogBudget } from '../../lib/log-budget.ts';
import { sendError, sendJson } from '../server/http-errors.ts';
import { recordedStatus } from '../server/recorded-status.ts';
import type { BackendPool } from './backend-pool.ts';
import type { ClientFaults } from './client-faults.ts';
import { findClientFault } from './forwardable.ts';
import { asHttp1Head } from './http2-head.ts';
import type { ProxyHandler } from './proxy-handler.ts';
import type { Tracing } from '../tracing/tracing.ts';
import { relayedTraceContext } from '../tracing/untrusted-marker.ts';
import type { RouterStats } from './router-stats.ts';
import { ROUTER_BUSY } from './upstream-errors.ts';

const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/;

/**
 * The default bound on requests proxied at once: each holds one upstream connection, so with the
 * client connections bounded the same way (front door's `defaultMaxConnections`: what fits the
 * descriptors past the reserve and, on TLS, the handshakes in progress, two per connection) the
 * two together stay within the descriptor limit, however many requests an HTTP/2 connection
 * carries, and under any ARKVORY_MAX_CONNECTIONS the start accepted (it is at most this bound).
 */
export function defaultMaxInFlight(descriptorLimit: number, tls: boolean): number {
  return defaultMaxConnections(descriptorLimit, tls);
}
/** The outcome of a request answered here (health), never proxied. */
const LOCAL = { kind: 'local', backend: undefined, attempts: 0 } as const;

export interface RouterServer {
  readonly server: http.Server;
  /** `shared`: one of several workers listening on the port (SO_REUSEPORT). */
  listen(port: number, host: string, shared?: boolean): Promise<AddressInfo>;
  /** Stops accepting, lets in-flight requests run up to `timeoutMs`, then cuts the rest. */
  close(timeoutMs: number): Promise<void>;
  readonly frontDoor: FrontDoor;
}

export function createRouterServer(options: {
  pool: BackendPool;
  handler: ProxyHandler;
  log: Logger;
  isDraining: () => boolean;
  /** Requests that cannot be forwarded: answered 400, counted, logged within a budget. */
  faults: ClientFaults;
  limits?: FrontDoorLimits;
  /** The certificate to serve; undefined = plain HTTP. */
  tls?: ServedTls;
  /** A server span per forwarded request, its context sent on to the gateway; undefined = off. */
  tracing?: Tracing;
  /**
   * Whether a peer's `traceparent`/`tracestate` may be continued (ARKVORY_TRACE_CONTEXT_FROM). With
   * tracing off the router passes them on only then: a gateway trusting the router trusts them.
   */
  mayContinue: (peer: string | undefined) => boolean;
  /**
   * Whether a peer is one of the router's ARKVORY_TRUSTED_PROXIES. With tracing off, another peer's
   * `traceparent` goes on marked untrusted (untrusted-marker.ts): the gateway keeps its trace id but
   * does not follow its sampled flag.
   */
  isTrusted: (peer: string) => boolean;
  /** One worker of several: the workers of the instance, for `/health/status`. */
  workers?: () => Promise<Record<string, unknown>>;
  /** Counts requests in flight and those refused over `maxInFlight`. */
  stats: RouterStats;
  /** Requests proxied at once; past it a fast 503 (`defaultMaxInFlight`). */
  maxInFlight: number;
}): RouterServer {
  const { pool, handler, log, faults, stats, maxInFlight } = options;
  const limits = options.limits ?? DEFAULT_FRONT_DOOR;
  const server = createListener({ http: serverOptions(limits), tls: options.tls, log });
  // The per-request line is at info: below that level its fields are not even gathered.
  const logRequests = log.isLevelEnabled('info');
  // Request lines of 4xx answers, by status, and of 503s over maxInFlight: anyone can have the gateways refuse requests as fast as
  // they like (no key, a bad one), and the router cannot tell a principal's from a stranger's. Past
  // the budget they go to debug; the gateway that answered keeps a principal's line in full.
  const faultLines = new LogBudget(CLIENT_FAULT_LOG);
  // `100 Continue` is relayed from the gateway that made the checks (proxy-handler.ts), never sent here.
  const frontDoor = installFrontDoor(server, limits, log, (req, res) => {
    if (!frontDoor.admit(req, res)) return;
    // As on a gateway (http-server.ts): the router's own id is what its lines carry and what it
    // forwards, so a client cannot choose the id of any router line (nor make its request's lines
    // share one with another's). A sane id the client sent is logged beside it and is what its
    // answer carries back. x-request-id is set where an answer is made: the proxied head carries
    // it (proxy-handler.ts), local answers set it below.
    const incomingId = req.headers['x-request-id'];
    const clientReqId = typeof incomingId === 'string' && REQUEST_ID.test(incomingId) ? incomingId : undefined;
    const reqId = randomUUID();
    const answerId = clientReqId ?? reqId;
    // An HTTP/2 request is forwarded as the HTTP/1.1 head it stands for (no pseudo-headers, its
    // Host from :authority); one whose Host names another authority is not forwarded at all.
    const authorityFault = asHttp1Head(req);
    const url = req.url ?? '/';
    // Before anything else (and without the per-request line: a flood of these would be a flood of
    // lines): what undici or RFC 9112 refuses is answered here, not by a 502 after dispatch, and a
    // second Authorization is never forwarded.
    const fault = authorityFault ?? findClientFault(req.method ?? '', url, req.rawHeaders);
    if (fault) return faults.refuse(res, fault, { reqId, clientReqId }, knownMethod(req.method));
    const query = url.indexOf('?');
    const path = query === -1 ? url : url.slice(0, query);
    let outcome: { kind: string; backend: string | undefined; attempts: number } = LOCAL;
    let traceId: string | undefined;
    /** Refused over maxInFlight: a flood's doing, its line bounded as a 4xx's is. */
    let overloaded = false;
    // Below info the request line is not written: no listener, no clock reading.
    const started = logRequests ? performance.now() : 0;
    if (logRequests)
      res.once('close', () => {
        const status = recordedStatus(res);
        const budgeted = overloaded ? 'in_flight' : status >= 400 && status < 500 ? String(status) : undefined;
        const turn = budgeted === undefined ? undefined : faultLines.take(budgeted, performance.now());
        if (turn && !turn.write && !log.isLevelEnabled('debug')) return;
        log[turn && !turn.write ? 'debug' : 'info'](
          {
            reqId,
            clientReqId,
            traceId,
            // A method of the client's own (HTTP/2: any token, ~20 KB) is `_OTHER`, never copied here.
            method: knownMethod(req.method),
            kind: outcome.kind,
            backend: outcome.backend,
            attempts: outcome.attempts,
            status,
            ms: Math.round((performance.now() - started) * 10) / 10,
            completed: res.writableFinished,
            ...(turn?.write && turn.suppressed > 0 ? { suppressed: turn.suppressed } : {}),
          },
          'request',
        );
      });
    if ((path === '/health/live' || path === '/health/status') && (req.method === 'GET' || req.method === 'HEAD')) {
      res.setHeader('x-request-id', answerId);
      if (path === '/health/live') return sendJson(res, 200, { status: 'live' });
      const answer = (workers: Record<string, unknown>) => {
        const backends = pool.snapshot();
        const serving = pool.canServeReads && !options.isDraining();
        sendJson(res, serving ? 200 : 503, {
          status: serving ? 'serving' : options.isDraining() ? 'draining' : 'no_backend',
          role: 'router',
          backends: {
            total: backends.length,
            healthy: backends.filter((b) => b.healthy).length,
            reads: backends.filter((b) => b.healthy && b.store !== 'unreachable' && !b.ejected).length,
            storeUnreachable: backends.filter((b) => b.healthy && b.store === 'unreachable').length,
            ejected: backends.filter((b) => b.healthy && b.ejected).length,
          },
          writer: pool.hasHealthyWriter,
          ...workers,
        });
      };
      if (!options.workers) return answer({});
      // Its instance gone, a worker still answers for itself.
      void options.workers().then(answer, () => answer({}));
      return;
    }
    // Each request proxied holds an upstream connection, an HTTP/2 connection up to 100 of them:
    // bounded with the descriptors (defaultMaxInFlight), past it a 503 counted, not logged but for
    // the request line, itself within the budget of fault lines.
    if (stats.inFlight >= maxInFlight) {
      stats.overloaded.in_flight++;
      overloaded = true;
      res.setHeader('x-request-id', answerId);
      return sendError(res, ROUTER_BUSY);
    }
    stats.inFlight++;
    res.once('close', () => stats.inFlight--);
    // The request's child logger is made only when something is logged through it (a retry, a failure).
    let reqLog: Logger | undefined;
    const tracing = options.tracing;
    if (tracing === undefined) {
      // No decision of the router's to send: the client's context only as far as it is trusted.
      outcome = handler.handle(
        req,
        res,
        { reqId, answerId, clientReqId },
        () => (reqLog ??= log.child({ reqId, clientReqId })),
        relayedTraceContext(req.headers, req.socket.remoteAddress, options.mayContinue, options.isTrusted),
      );
      return;
    }
    const traced = tracing.startServer(req, options.mayContinue);
    traceId = traced.traceId;
    // Always the router's own context, sampled or not (an unsampled span's says so, flags 00): the
    // gateway continues what the router decided, never a client's trace id or sampled flag that the
    // router did not take.
    const routed = handler.handle(
      req,
      res,
      { reqId, answerId, clientReqId },
      () => (reqLog ??= log.child({ reqId, clientReqId, traceId: traced.traceId })),
      tracing.headersOf(traced),
    );
    outcome = routed;
    res.once('close', () => {
      traced.span.setAttributes({
        'arkvory.router.kind': routed.kind,
        'arkvory.router.attempts': routed.attempts,
        ...(routed.backend ? { 'arkvory.router.backend': routed.backend } : {}),
      });
      traced.finish({
        method: req.method ?? 'GET',
        route: undefined,
        status: recordedStatus(res),
        bytesIn: 0,
        bytesOut: 0,
        completed: res.writableFinished,
        principalId: undefined,
      });
    });
  });
  // The front door answers a head the parser refused; the router also counts it (HPE_*) as a client
  // fault like the ones found above. Resets and timeouts are not faults, nor is a client that closed
  // in the middle of a body (HPE_INVALID_EOF_STATE) or any error while a request is in progress: that
  // request was forwarded, its head was not refused.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (!err.code?.startsWith('HPE_') || err.code === 'HPE_INVALID_EOF_STATE') return;
    if ((stateOf(socket)?.active ?? 0) > 0) return;
    faults.noteMalformedHead(err.code);
  });
  const graceful = makeGraceful(server, frontDoor);
  return {
    server,
    listen: (port, host, shared) => graceful.listen(port, host, shared),
    close: (timeoutMs) => graceful.close(timeoutMs),
    frontDoor,
  };
}
