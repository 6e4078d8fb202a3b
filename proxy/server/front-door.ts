/**
 * The front door of an HTTP server (the gateway's and the router's), modelled on nginx: what a
 * client it does not control may hold, and for how long.
 *  - headers: the whole request head within `headersTimeoutMs` (client_header_timeout), else 408;
 *  - request body idle: no body byte for `bodyIdleTimeoutMs` (client_body_timeout) → 408 when
 *    nothing was answered yet, and the connection closes, so the handler's body stream fails;
 *  - response send idle: the client takes no byte for `sendIdleTimeoutMs` (send_timeout) → cut;
 *  - keep-alive idle: `keepAliveTimeoutMs` (keepalive_timeout) between requests;
 *  - early refusal: a response that goes out before its request body was read carries
 *    `Connection: close`, and the socket lingers (lingering_close): half-closed, the rest of the
 *    body is discarded for at most LINGER.ms and LINGER.bytes, then it is closed;
 *  - a bound on open connections: past it, idle keep-alive connections are closed first, then a
 *    new connection gets a fast 503 (health checks still answered), and far past it is closed at once.
 */
import type http from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { connectionEvent } from './listener.ts';

export interface FrontDoorLimits {
  readonly headersTimeoutMs: number;
  readonly bodyIdleTimeoutMs: number;
  readonly sendIdleTimeoutMs: number;
  readonly keepAliveTimeoutMs: number;
  /** Open connections served normally; undefined = derived from the descriptor limit. */
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

/**
 * Lingering close after an early answer: the rest of the body is read and discarded for at most
 * `ms` (nginx's lingering_timeout is 5 s) and `bytes`; past `bytes` reading stops (the client's
 * sends block) until the time is up. A close with unread bytes sends a reset, which can destroy the
 * answer before the client has read it: lingering lets it read the answer first.
 */
export const LINGER = { ms: 5000, bytes: 1024 * 1024 } as const;

/** Descriptors kept for everything that is not a client connection (pool, Redis, logs, files). */
export const RESERVED_DESCRIPTORS = 64;
/** Connections past the bound that still get an answer (a 503 or a health check) before being cut. */
export const OVERFLOW_ANSWERED = 32;
/** How long an over-the-bound connection may take to send its request head. */
const OVERFLOW_HEAD_MS = 2000;

/**
 * The default bound: every connection may need two descriptors (its socket and a blob file, or the
 * router's upstream socket), after the reserve. Pure, for the unit test and the docs.
 */
export function defaultMaxConnections(descriptorLimit: number): number {
  return Math.max(8, Math.floor((descriptorLimit - RESERVED_DESCRIPTORS - OVERFLOW_ANSWERED) / 2));
}

/** The soft RLIMIT_NOFILE of this process (Linux: /proc/self/limits); undefined when unknown. */
export function descriptorLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    return soft === undefined || soft === 'unlimited' ? undefined : Number(soft);
  } catch {
    return undefined;
  }
}

/** Options for `http.createServer` that the front door needs from the start. */
export function serverOptions(limits: FrontDoorLimits): http.ServerOptions {
  return {
    requestTimeout: 0,
    headersTimeout: limits.headersTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // Node checks the head timeout on this interval (default 30 s, which would double it).
    connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs),
  };
}

export interface FrontDoorCounters {
  readonly open: number;
  readonly maxConnections: number;
  /** Connections answered 503 or closed because the bound was reached. */
  readonly refused: number;
  /** Idle keep-alive connections closed to make room. */
  readonly idleClosed: number;
  readonly timeouts: { readonly body: number; readonly send: number };
}

export interface FrontDoor {
  /**
   * Call first in the request handler. False when the request was answered already (over the
   * connection bound: 503); the handler must then do nothing more.
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

interface ConnectionState {
  /** Requests in progress on this connection (0 or 1: HTTP/1.1 answers in order). */
  active: number;
  served: number;
  overflow: boolean;
  req: IncomingMessage | undefined;
  res: ServerResponse | undefined;
}

const STATE = Symbol('arkvory.connection');
const EXPECTS_CONTINUE = Symbol('arkvory.expectsContinue');
type TrackedSocket = Socket & { [STATE]?: ConnectionState };
type TrackedRequest = IncomingMessage & { [EXPECTS_CONTINUE]?: boolean };

const HEALTH_PATHS = new Set(['/health/live', '/health/status']);
/** While draining, readiness is answered too (503 `draining`), so a balancer sees why. */
const DRAIN_PATHS = new Set(['/health/live', '/health/status', '/health/ready']);
const OVERLOADED_BODY = JSON.stringify({ code: 'unavailable', message: 'Too many open connections; retry shortly.' });
const DRAINING_BODY = JSON.stringify({
  code: 'unavailable',
  message: 'This process is shutting down; retry (on another gateway).',
});
const HEAD_TIMEOUT_BODY = JSON.stringify({
  code: 'request_timeout',
  message: 'The request head did not arrive in time.',
});
/** The answer to a head that did not arrive within the header timeout (Node reports it as a client error). */
export const HEAD_TIMEOUT_RESPONSE = `HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(HEAD_TIMEOUT_BODY)}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n${HEAD_TIMEOUT_BODY}`;
const TIMEOUT_BODY = JSON.stringify({
  code: 'request_timeout',
  message: 'No request body byte arrived in time; the upload was dropped.',
});

/** True when the request head announces a body (a non-zero Content-Length or a chunked body). */
export function announcesBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

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
): FrontDoor {
  const maxConnections = limits.maxConnections ?? defaultMaxConnections(descriptorLimit() ?? 1024);
  const sockets = new Set<TrackedSocket>();
  let refused = 0;
  let idleClosed = 0;
  let draining = false;
  const timeouts = { body: 0, send: 0 };

  server.prependListener(connectionEvent(server), (socket: TrackedSocket) => {
    const state: ConnectionState = { active: 0, served: 0, overflow: false, req: undefined, res: undefined };
    socket[STATE] = state;
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    if (sockets.size <= maxConnections) return;
    // Past the bound: idle keep-alive connections go first.
    for (const other of sockets) {
      const s = other[STATE]!;
      if (s.active === 0 && s.served > 0 && !other.destroyed) {
        closeIdle(other);
        idleClosed++;
      }
    }
    let live = 0;
    for (const other of sockets) if (!other.destroyed && !other.writableEnded) live++;
    if (live <= maxConnections) return;
    refused++;
    if (live > maxConnections + OVERFLOW_ANSWERED) {
      // Far past the bound the descriptor matters more than an answer.
      socket.destroy();
      return;
    }
    state.overflow = true;
    const timer = setTimeout(() => socket.destroy(), OVERFLOW_HEAD_MS);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  });

  server.on('request', handler);
  server.on('checkContinue', (req: TrackedRequest, res: ServerResponse) => {
    req[EXPECTS_CONTINUE] = true;
    handler(req, res);
  });

  // A socket idle past its current timeout: which one depends on what the connection is doing.
  server.on('timeout', (socket: TrackedSocket) => {
    const state = socket[STATE];
    const { req, res } = state ?? {};
    if (!state || state.active === 0 || !req || !res) {
      socket.destroy();
      return;
    }
    if (!req.complete && announcesBody(req) && !res.headersSent) {
      timeouts.body++;
      log.info(
        { code: 'client_timeout', phase: 'request_body', idleMs: limits.bodyIdleTimeoutMs },
        'no request body byte in time; answering 408 and closing',
      );
      res.shouldKeepAlive = false;
      res.writeHead(408, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(TIMEOUT_BODY),
        'cache-control': 'no-store',
      });
      res.end(TIMEOUT_BODY, () => socket.destroy());
      // Node stops tracking a request once its response finished: fail the body the handler is
      // still reading, so the upload is dropped and its slot released.
      // (Destroyed without an error: a proxy's error handlers would find the request detached.)
      socket.once('close', () => req.destroy());
      const cut = setTimeout(() => socket.destroy(), 1000);
      cut.unref();
      socket.once('close', () => clearTimeout(cut));
      return;
    }
    if (!req.complete && announcesBody(req)) timeouts.body++;
    else timeouts.send++;
    log.info(
      {
        code: 'client_timeout',
        phase: req.complete ? 'response' : 'request_body',
        idleMs: req.complete ? limits.sendIdleTimeoutMs : limits.bodyIdleTimeoutMs,
      },
      'client idle past its timeout; connection closed',
    );
    socket.destroy();
  });

  /** An idle keep-alive connection: its last answer may still be in the buffer, so end (flush, FIN) first. */
  function closeIdle(socket: Socket): void {
    if (socket.writableLength === 0) {
      socket.destroy();
      return;
    }
    socket.end();
    const timer = setTimeout(() => socket.destroy(), 1000);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  }

  function linger(socket: Socket, req: IncomingMessage): void {
    let lingering = false;
    // Node ends a `Connection: close` response with destroySoon(); lingering replaces it.
    socket.destroySoon = function lingeringClose(this: Socket) {
      if (lingering) return;
      lingering = true;
      this.end();
      const timer = setTimeout(() => this.destroy(), LINGER.ms);
      timer.unref();
      this.once('close', () => clearTimeout(timer));
      let discarded = 0;
      req.on('data', (chunk: Buffer) => {
        discarded += chunk.length;
        // Enough read: stop reading (no reset that could drop the answer), close at the time bound.
        if (discarded > LINGER.bytes) req.pause();
      });
      req.on('error', () => this.destroy());
      req.on('end', () => this.destroy());
      req.resume();
    };
  }

  return {
    admit(req, res) {
      const socket = req.socket as TrackedSocket;
      const state = socket[STATE];
      const body = announcesBody(req);
      if (state) {
        state.active++;
        state.served++;
        state.req = req;
        state.res = res;
        res.once('close', () => {
          state.active--;
          state.req = undefined;
          state.res = undefined;
        });
      }
      socket.setTimeout(body ? limits.bodyIdleTimeoutMs : limits.sendIdleTimeoutMs);
      if (body) {
        req.once('end', () => socket.setTimeout(limits.sendIdleTimeoutMs));
        // Answered before the body was read: close after the answer instead of reading it all.
        const writeHead = res.writeHead;
        res.writeHead = function earlyRefusal(this: ServerResponse, ...args: unknown[]) {
          if (!req.complete) {
            this.shouldKeepAlive = false;
            linger(socket, req);
          }
          return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
        } as typeof res.writeHead;
      }
      if (state?.overflow || draining) {
        res.shouldKeepAlive = false;
        const path = (req.url ?? '/').split('?', 1)[0]!;
        const health =
          (draining ? DRAIN_PATHS : HEALTH_PATHS).has(path) && (req.method === 'GET' || req.method === 'HEAD');
        if (!health) {
          const body = draining ? DRAINING_BODY : OVERLOADED_BODY;
          res.writeHead(503, {
            'content-type': 'application/json; charset=utf-8',
            'content-length': Buffer.byteLength(body),
            'cache-control': 'no-store',
            'retry-after': '1',
          });
          res.end(req.method === 'HEAD' ? undefined : body);
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
      for (const socket of sockets) {
        const s = socket[STATE]!;
        if (s.active === 0 && s.served > 0) closeIdle(socket);
      }
    },
    counters() {
      return { open: sockets.size, maxConnections, refused, idleClosed, timeouts: { ...timeouts } };
    },
  };
}
