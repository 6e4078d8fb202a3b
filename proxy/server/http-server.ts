import { wasRevoked } from '../gates/revoked-responses.ts';
import type http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { AddressInfo, Socket } from 'node:net';
import type { Logger } from 'pino';
import { unauthorized } from '../../policy/auth/authenticator.ts';
import { hasPresignParams } from '../../policy/auth/presign-signature.ts';
import { browserSafeChallenge } from '../gates/challenge.ts';
import { CONSOLE_SECURITY_HEADERS, isConsolePath } from '../console/security-headers.ts';
import { hasDuplicateAuthorization } from './authorization-header.ts';
import { GatewayError } from './errors.ts';
import { sendError, toHttpError } from './http-errors.ts';
import { CLIENT_FAULT_LOG, LogBudget } from '../../lib/log-budget.ts';
import { makeGraceful } from './graceful-server.ts';
import { createListener } from './listener.ts';
import type { ServedTls } from '../tls/served-tls.ts';
import { GatewayResponse } from './gateway-response.ts';
import { type ExchangeServer, onResponseClose, RequestExchange } from './request-exchange.ts';
import {
  DEFAULT_FRONT_DOOR,
  installFrontDoor,
  serverOptions,
  type FrontDoor,
  type FrontDoorLimits,
} from './front-door.ts';
import { RouteTable } from './route-table.ts';
import { parseRequestTarget } from './request-path.ts';
import type { AuditSink, Gate, RefusalAuditSink, RequestContext, RequestObservation, Route } from './route-types.ts';
import { runInTrace } from '../tracing/request-trace.ts';
import type { Tracing } from '../tracing/tracing.ts';

/** What the server needs of tracing: the tracer, and whose trace context a peer may continue. */
export interface ServerTracing {
  readonly tracing: Tracing;
  readonly mayContinue: (peer: string | undefined) => boolean;
}

export interface GatewayServer {
  readonly server: http.Server;
  listen(port: number, host: string, shared?: boolean): Promise<AddressInfo>;
  /** Stops accepting, waits up to `timeoutMs` for in-flight requests, then cuts the rest. */
  close(timeoutMs: number): Promise<void>;
  readonly inFlight: number;
  /** Open connections, refusals and timeouts of the front door (metrics). */
  readonly frontDoor: FrontDoor;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/;

export function createGatewayServer(options: {
  routes: readonly Route[];
  gates: readonly Gate[];
  log: Logger;
  /** A reader: every method but GET/HEAD is 405 `read_only` before any route or gate runs. */
  readOnly?: boolean;
  /** Called once per request when its response closes (metrics). Must not throw. */
  onRequest?: (observation: RequestObservation) => void;
  /**
   * Called with the error code of each answer given before a request existed (a malformed or late
   * head, an unmet Expect, a CONNECT): client faults `onRequest` never sees. Must not throw.
   */
  onEarlyFault?: (code: string) => void;
  /** Timeouts and the connection bound (proxy/server/front-door.ts); default the documented defaults. */
  limits?: FrontDoorLimits;
  /** The certificate to serve (proxy/tls/served-tls.ts); undefined = plain HTTP. */
  tls?: ServedTls;
  /** Records the audited routes' actions (proxy/audit/); undefined on a reader, which changes nothing. */
  audit?: AuditSink;
  /** Records refused attempts at the routes that ask for it (`Route.auditRefusal`: the console's sign-in). */
  auditRefusal?: RefusalAuditSink;
  /** Sees every request with its principal when its response closes (usage statistics, proxy/stats/). Must not throw. */
  onUsage?: (ctx: RequestContext, observation: RequestObservation) => void;
  /** Tracing (proxy/tracing/): a server span per request; undefined = off. */
  tracing?: ServerTracing;
}): GatewayServer {
  const table = new RouteTable<Route>();
  for (const route of options.routes) {
    checkAuditDeclared(route);
    table.add({ methods: route.methods, template: route.template, value: route });
  }
  const { audit, auditRefusal } = options;
  const gates = [...options.gates];
  const { log, tracing } = options;

  const limits = options.limits ?? DEFAULT_FRONT_DOOR;
  // The per-request line is at info: below that level its fields are not even gathered.
  const logRequests = log.isLevelEnabled('info');
  const server = createListener({
    http: { ...serverOptions(limits), ServerResponse: GatewayResponse },
    tls: options.tls,
    log,
  });
  const exchangeServer: ExchangeServer = {
    log,
    logRequests,
    onRequest: options.onRequest,
    onUsage: options.onUsage,
    continueBody: (req, res) => frontDoor.continueBody(req, res),
    faultLog: new LogBudget(CLIENT_FAULT_LOG),
  };
  const frontDoor = installFrontDoor(
    server,
    limits,
    log,
    (req, plainRes) => {
      const res = plainRes as GatewayResponse;
      // The request's own id is always made here: it is what the log lines and the audit trail
      // correlate on, so a client must not choose it (it could name another request's lines). A sane
      // id the client sent is kept beside it and is what its answer carries back.
      const incomingId = req.headers['x-request-id'];
      const clientReqId = typeof incomingId === 'string' && REQUEST_ID.test(incomingId) ? incomingId : undefined;
      const reqId = randomUUID();
      res.addEarlyHeader('x-request-id', clientReqId ?? reqId);
      // Every answer, JSON and errors included: no browser may sniff a body into another type.
      res.addEarlyHeader('x-content-type-options', 'nosniff');

      // The URL object is built when a handler asks for it (the query of a pre-signed link), or at
      // once when the path is not simple enough to read without the parser (request-path.ts).
      const target = req.url ?? '/';
      const parsed = parseRequestTarget(target);
      const url = typeof parsed === 'string' ? undefined : parsed;
      const pathname = typeof parsed === 'string' ? parsed : parsed?.pathname;
      // A console answer is a browser's page even when it is an error (a gate's 401 or 403, a 404):
      // none may be framed or run anything, so its headers go on before anyone answers.
      if (pathname !== undefined && isConsolePath(pathname))
        for (const [name, value] of CONSOLE_SECURITY_HEADERS) res.addEarlyHeader(name, value);
      const exchange = new RequestExchange(exchangeServer, req, res, reqId, clientReqId, url);
      res.exchange = exchange;
      res.on('close', onResponseClose);
      // Admitted once the request is recorded: the front door's own refusal (503 over the connection
      // bound or while draining) is counted with its status like every other answer. Its line goes to
      // debug: an overload must not flood the log (the front door's refusal counters are its record).
      if (!frontDoor.admit(req, res)) {
        exchange.quiet = true;
        return;
      }
      if (tracing) exchange.trace = tracing.tracing.startServer(req, tracing.mayContinue);
      if (pathname === undefined) {
        answerError(exchange, new GatewayError('invalid_request', 'The request target is not a valid URL.'));
        return;
      }
      // No name, id, cursor or filter here may hold a NUL (PostgreSQL refuses it in text): refused
      // up front, rather than as a database error (a 500 for the client's fault) wherever one is read.
      if (target.includes('%00')) {
        answerError(exchange, new GatewayError('invalid_request', 'The request target holds a NUL byte (%00).'));
        return;
      }
      if (hasDuplicateAuthorization(req.rawHeaders)) {
        const headers: Record<string, string> = req.complete ? {} : { connection: 'close' };
        answerError(exchange, new GatewayError('duplicate_authorization', undefined, { headers }));
        return;
      }
      if (options.readOnly && req.method !== 'GET' && req.method !== 'HEAD') {
        // The body stays unread: close the connection after the answer rather than drain it.
        const headers: Record<string, string> = { allow: 'GET, HEAD' };
        if (!req.complete) headers.connection = 'close';
        answerError(exchange, new GatewayError('read_only', undefined, { headers }));
        return;
      }
      const match = table.match(req.method ?? 'GET', pathname);
      if (match.kind === 'not_found') {
        answerError(exchange, new GatewayError('not_found', 'No such route.'));
        return;
      }
      if (match.kind === 'method_not_allowed') {
        exchange.route = match.template;
        // A link's parameters on another method are a link misused: the same 401 as a bad key (docs/clients.md).
        if (target.includes('X-Arkvory-') && hasPresignParams(exchange.url.searchParams)) {
          answerError(exchange, browserSafeChallenge(exchange, unauthorized()));
          return;
        }
        answerError(
          exchange,
          new GatewayError('method_not_allowed', undefined, { headers: { allow: match.allow.join(', ') } }),
        );
        return;
      }
      const routeDef = match.route.value;
      exchange.route = match.route.template;
      exchange.params = match.params;
      exchange.access = routeDef.access;
      // An unsampled request runs outside its span's context, as an untraced one (request-trace.ts).
      if (exchange.trace === undefined || !exchange.trace.isRecording)
        void runRoute(exchange, routeDef, gates, audit, auditRefusal);
      else void runInTrace(exchange.trace, () => runRoute(exchange, routeDef, gates, audit, auditRefusal));
    },
    options.onEarlyFault,
  );

  const graceful = makeGraceful(server, frontDoor);
  return {
    server,
    get inFlight() {
      return graceful.inFlight;
    },
    frontDoor,
    listen: (port, host, shared) => graceful.listen(port, host, shared),
    close: (timeoutMs) => graceful.close(timeoutMs),
  };
}

/**
 * Answers `err`. A client fault (`isClientFault`) writes its line, and later its request line, at
 * info only within the server's fault budget; past it at debug. Every one is counted
 * (`arkvory_http_client_faults_total`).
 */
function answerError(exchange: RequestExchange, err: unknown): void {
  const mapped = toHttpError(err);
  if (exchange.noteFault(mapped.status, mapped.code)) {
    exchange.faultLine({ code: mapped.code }, mapped.message);
    sendError(exchange.res, err);
  } else sendError(exchange.res, err, exchange.log);
}

/** A route that changes state names its audit action (or null): checked once, like the gate chain. */
function checkAuditDeclared(route: Route): void {
  if (route.audit !== undefined || route.methods.every((m) => m === 'GET' || m === 'HEAD')) return;
  throw new Error(`route ${route.methods.join(',')} ${route.template} declares no audit action (proxy/audit/)`);
}

async function runRoute(
  ctx: RequestExchange,
  route: Route,
  gates: readonly Gate[],
  audit: AuditSink | undefined,
  auditRefusal?: RefusalAuditSink,
): Promise<void> {
  // An audited action's answer ends only once its row is written (or its failure logged): a client
  // that saw success finds the row, and one client's changes are recorded in the order it made them.
  const held = route.audit && audit ? holdEnd(ctx.res) : undefined;
  try {
    for (const gate of gates) {
      const pending = gate(ctx);
      if (pending) await pending;
    }
    if (!route.continuesBodyItself) ctx.continueBody();
    await route.handle(ctx);
    // Once the action succeeded; the sink never throws (its failure is logged, the answer stands).
    if (route.audit && audit && ctx.res.statusCode < 400) await audit(ctx, route.audit);
  } catch (err) {
    // The change was made before the failure (a read back for the answer): it is recorded all the
    // same, before the error answer ends (the sink never throws).
    if (route.audit && audit && ctx.actionTaken) await audit(ctx, route.audit);
    // A refused attempt (a failed sign-in), recorded before its answer ends, as an action is, also
    // when its client has gone: the attempt was made.
    else if (route.auditRefusal && auditRefusal) {
      const { status, code } = toHttpError(err);
      if (status === 401 || status === 403) await auditRefusal(ctx, route.auditRefusal, code);
    }
    // Reset by the gateway, its credential revoked while it ran: logged as that already.
    if (wasRevoked(ctx.res)) return;
    if (clientIsGone(ctx)) {
      // The client left (or was cut for idling): its doing, not a fault of ours.
      const fields = { code: 'client_aborted', reason: (err as Error | undefined)?.message };
      const message = 'client went away before the response finished';
      if (ctx.noteFault(499, 'client_aborted')) ctx.faultLine(fields, message);
      else ctx.log.info(fields, message);
      // An answer handed over whole (the 408) is left to flush; anything else is cut.
      if (!ctx.res.destroyed && !ctx.res.writableEnded) ctx.res.destroy();
      return;
    }
    answerError(ctx, err);
  } finally {
    held?.();
  }
}

/**
 * Holds a successful answer's `res.end()` until the returned function is called, which ends the
 * response as asked meanwhile (if it was). The head may leave before: only the end waits. For routes
 * that answer with one `end` and never wait for their own response to finish (the audited JSON routes).
 */
function holdEnd(res: http.ServerResponse): () => void {
  const end = res.end;
  let asked: Parameters<typeof end> | undefined;
  res.end = function (this: http.ServerResponse, ...args: Parameters<typeof end>) {
    // A refusal records nothing, so nothing to wait for; the front door's own answers (a 408 for a
    // stalled body) must leave at once.
    if (this.statusCode >= 400) return end.apply(this, args);
    asked = args;
    return this;
  } as typeof end;
  return () => {
    // Back to the class's own method (this instance had none of its own).
    Reflect.deleteProperty(res, 'end');
    // A response cut meanwhile (a client gone, a failure after the head) has nothing left to end.
    if (asked !== undefined && !res.destroyed) end.apply(res, asked);
  };
}

/** The response closed before it finished, or the connection is gone (Node detaches it at the end: null). */
function clientIsGone(ctx: RequestContext): boolean {
  // Already answered (the front door's 408 for a stalled body, perhaps still flushing): the body's
  // failure follows from it. (`readableEnded`, not `complete`: node:http2 says complete once aborted.)
  if (ctx.res.writableEnded) return ctx.req.destroyed && !ctx.req.readableEnded;
  const socket = ctx.req.socket as Socket | null;
  return ctx.signal.aborted || ctx.res.destroyed || socket === null || socket.destroyed;
}
