/**
 * The front door of an HTTP server (the gateway's and the router's), modelled on nginx: what a
 * client it does not control may hold, and for how long. One job per module under front-door/:
 *  - connection-bound.ts: a bound on open connections (idle keep-alive closed first, then those
 *    without a request yet, then a fast 503, far past it closed at once);
 *  - pending-handshakes.ts: a bound on TLS handshakes in progress;
 *  - descriptor-budget.ts: both bounds and a reserve within the process's descriptor limit;
 *  - timeouts.ts: the head, body-idle, send-idle and keep-alive timeouts;
 *  - lingering-close.ts: an answer sent before its request body was read closes the connection,
 *    lingering so the client reads the answer;
 *  - drain.ts: at shutdown, idle connections closed and new requests a fast 503;
 *  - client-errors.ts: heads Node could not parse or that took too long, answered and closed.
 * This module composes them around one request handler.
 */
import type http from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import tls from 'node:tls';
import type { Logger } from 'pino';
import type { GatewayError } from './errors.ts';
import { connectionEvent } from './listener.ts';
import { answerClientErrors } from './front-door/client-errors.ts';
import { answerNodeAnswers } from './front-door/node-answers.ts';
import { sendError } from './http-errors.ts';
import { ConnectionBound, overloadRefusal } from './front-door/connection-bound.ts';
import { ASSUMED_DESCRIPTOR_LIMIT, defaultMaxConnections, descriptorLimit } from './front-door/descriptor-budget.ts';
import { announcesBody, beginRequest, Connections, inTurn, stateOf } from './front-door/connection-state.ts';
import { closeIdleConnections, drainRefusal } from './front-door/drain.ts';
import { closeEarlyAnswer } from './front-door/lingering-close.ts';
import { boundPendingHandshakes } from './front-door/pending-handshakes.ts';
import { Http2Front, type Http2Server, type Http2Snapshot } from './front-door/http2.ts';
import { isHttp2 } from './http2-messages.ts';
import { type FrontDoorTimeouts, Timeouts } from './front-door/timeouts.ts';

export {
  defaultMaxConnections,
  descriptorLimit,
  OVERFLOW_ANSWERED,
  RESERVED_DESCRIPTORS,
} from './front-door/descriptor-budget.ts';
export { announcesBody } from './front-door/connection-state.ts';
export { LINGER } from './front-door/lingering-close.ts';
export { serverOptions } from './front-door/timeouts.ts';

export interface FrontDoorLimits extends FrontDoorTimeouts {
  /**
   * Open connections served normally; undefined = derived from the descriptor limit, so that they,
   * on TLS the handshakes in progress, and a reserve fit within it (front-door/descriptor-budget.ts).
   */
  readonly maxConnections: number | undefined;
}

/** The documented defaults (proxy/config/config.ts), for servers built without a config (tests). */
export const DEFAULT_FRONT_DOOR: FrontDoorLimits = {
  headersTimeoutMs: 30_000,
  bodyIdleTimeoutMs: 60_000,
  sendIdleTimeoutMs: 60_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: undefined,
};

export interface FrontDoorCounters {
  readonly open: number;
  readonly maxConnections: number;
  /** The bound on TLS handshakes in progress; 0 on a plain listener. */
  readonly maxPendingHandshakes: number;
  /** Connections answered 503 or closed because the bound was reached. */
  readonly refused: number;
  /** Idle keep-alive connections closed to make room. */
  readonly idleClosed: number;
  readonly timeouts: { readonly body: number; readonly send: number };
  /** HTTP/2 sessions, streams, GOAWAYs and resets (front-door/http2.ts); all zero on plain HTTP. */
  readonly http2: Http2Snapshot;
}

export interface FrontDoor {
  /**
   * Call in the request handler before anything reads the request or answers it (the server first
   * sets up what records the answer). False when the request was answered already (over the
   * connection bound or draining: 503); the handler must then do nothing more.
   */
  admit(req: IncomingMessage, res: ServerResponse): boolean;
  /** Sends `100 Continue` if the client asked for it and it was not sent yet: the checks passed. */
  continueBody(req: IncomingMessage, res: ServerResponse): void;
  /**
   * Shutdown has begun: idle keep-alive connections are closed, every later answer closes its
   * connection, and new requests other than the health checks get a fast 503 (a balancer's
   * readiness probe sees the drain instead of a refused connection).
   */
  drain(): void;
  counters(): FrontDoorCounters;
}

const EXPECTS_CONTINUE = Symbol('arkvory.expectsContinue');
type TrackedRequest = IncomingMessage & { [EXPECTS_CONTINUE]?: boolean };

/**
 * Installs the limits on `server` (created with `serverOptions(limits)`). `handler` is the request
 * handler: it also receives requests that asked for `100 Continue`, which is then sent only when
 * the handler calls `continueBody` (after its checks), never by Node on its own.
 */
export function installFrontDoor(
  server: http.Server,
  limits: FrontDoorLimits,
  log: Logger,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  /**
   * Hears the error code of each answer given before a request existed (a head the parser refused or
   * that timed out, an unmet Expect, a CONNECT): client faults no request observation counts.
   */
  answeredEarly?: (code: string) => void,
): FrontDoor {
  const connections = new Connections();
  const bound = new ConnectionBound(
    limits.maxConnections ??
      defaultMaxConnections(descriptorLimit() ?? ASSUMED_DESCRIPTOR_LIMIT, server instanceof tls.Server),
    connections,
  );
  let draining = false;

  server.prependListener(connectionEvent(server), (socket) => bound.accept(socket, connections.add(socket)));
  const pending = boundPendingHandshakes(server, bound.maxConnections);
  // HTTP/1.1 requests on one connection are handled one after the other (pipelining: inTurn says
  // why); HTTP/2 streams are bounded per session instead, and wait while their session's answers
  // hold their send budget (front-door/http2.ts).
  const inOrder = (req: IncomingMessage, res: ServerResponse) => {
    if (isHttp2(req)) {
      h2.dispatch(req, res, handler);
      return;
    }
    const state = stateOf(req.socket);
    if (state === undefined) handler(req, res);
    else inTurn(state, req.socket, () => handler(req, res));
  };
  server.on('request', inOrder);
  server.on('checkContinue', (req: TrackedRequest, res: ServerResponse) => {
    req[EXPECTS_CONTINUE] = true;
    inOrder(req, res);
  });
  const timeouts = new Timeouts(server, limits, log);
  // A TLS listener speaks HTTP/2 too: sessions and streams get the same bounds (front-door/http2.ts).
  const h2 = new Http2Front(server as unknown as Http2Server, limits, log, timeouts);
  answerClientErrors(server, log, answeredEarly);
  answerNodeAnswers(server, log, answeredEarly);

  return {
    admit(req, res) {
      const socket = req.socket;
      const state = stateOf(socket);
      if (state) beginRequest(state, req, res);
      if (isHttp2(req)) h2.admitStream(req, res);
      else {
        // An HTTP/1.0 message with Transfer-Encoding is framed as no 1.0 peer (a proxy in front)
        // reads it: processed, then the connection closes (RFC 9112 §6.1), so what follows its
        // body is never read as a request of its own.
        if (req.httpVersionMinor === 0 && req.headers['transfer-encoding'] !== undefined) res.shouldKeepAlive = false;
        const body = announcesBody(req);
        timeouts.arm(socket, req, res, body);
        if (body) closeEarlyAnswer(socket, req, res);
      }
      if (state?.overflow || draining) {
        res.shouldKeepAlive = false;
        if (draining && isHttp2(req)) h2.drainSessionOf(req.stream);
        const path = (req.url ?? '/').split('?', 1)[0]!;
        const refusal = draining ? drainRefusal(req.method, path) : overloadRefusal(req.method, path);
        if (refusal !== undefined) {
          refuse(res, refusal);
          return false;
        }
      }
      return true;
    },
    continueBody(req, res) {
      const r = req as TrackedRequest;
      if (!r[EXPECTS_CONTINUE]) return;
      r[EXPECTS_CONTINUE] = false;
      if (!res.headersSent) res.writeContinue();
    },
    drain() {
      draining = true;
      closeIdleConnections(connections);
      h2.drain();
    },
    counters() {
      return {
        open: connections.size,
        maxConnections: bound.maxConnections,
        maxPendingHandshakes: pending?.maxPending ?? 0,
        refused: bound.refused,
        idleClosed: bound.idleClosed,
        timeouts: { ...timeouts.counts },
        http2: h2.snapshot(),
      };
    },
  };
}

/**
 * The fast 503 over the bound or while draining: not logged per request (the front door's
 * refusal counters are the record), so an overload cannot flood the log.
 */
function refuse(res: ServerResponse, refusal: GatewayError): void {
  sendError(res, refusal);
}
