/**
 * What the front door keeps per client connection, shared by its parts: the connection bound and
 * the drain close idle keep-alive connections, the timeouts look at the request in progress.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export interface ConnectionState {
  /** The connection's own socket (an HTTP/2 session shows only a proxy of it, which cannot destroy it). */
  readonly socket: Socket;
  /** Requests in progress on this connection (0 or 1: HTTP/1.1 answers in order). */
  active: number;
  served: number;
  /** Accepted past the connection bound: its request gets a fast 503 (health checks excepted). */
  overflow: boolean;
  req: IncomingMessage | undefined;
  res: ServerResponse | undefined;
  /**
   * Closes the HTTP/2 session on this connection (ALPN `h2`) with GOAWAY, cut if it outstays its
   * last stream (front-door/http2.ts); its requests are streams, `active` counts them. Undefined
   * on HTTP/1.1.
   */
  closeSession: (() => void) | undefined;
  /**
   * Pipelined HTTP/1.1 requests parsed while one was in progress, each started when the one before
   * it closes (`inTurn`); undefined when none waits.
   */
  waiting: Array<() => void> | undefined;
}

const STATE = Symbol('arkvory.connection');
type TrackedSocket = Socket & { [STATE]?: ConnectionState };

/** Every open client connection of one server, with its state. */
export class Connections {
  readonly #sockets = new Set<TrackedSocket>();

  get size(): number {
    return this.#sockets.size;
  }

  /** Starts tracking a new connection until it closes. */
  add(socket: Socket): ConnectionState {
    const tracked = socket as TrackedSocket;
    const state: ConnectionState = {
      socket,
      active: 0,
      served: 0,
      overflow: false,
      req: undefined,
      res: undefined,
      closeSession: undefined,
      waiting: undefined,
    };
    tracked[STATE] = state;
    this.#sockets.add(tracked);
    tracked.once('close', () => {
      this.#sockets.delete(tracked);
      // Their client is gone: the requests still waiting are never started.
      state.waiting = undefined;
    });
    return state;
  }

  [Symbol.iterator](): IterableIterator<Socket> {
    return this.#sockets.values();
  }
}

/** The state of a tracked connection; undefined for a socket the front door never saw. */
export function stateOf(socket: Socket): ConnectionState | undefined {
  return (socket as TrackedSocket)[STATE];
}

/** Marks `req` in progress on its connection until its response closes. */
export function beginRequest(state: ConnectionState, req: IncomingMessage, res: ServerResponse): void {
  state.active++;
  state.served++;
  state.req = req;
  state.res = res;
  res.once('close', () => {
    state.active--;
    state.req = undefined;
    state.res = undefined;
    const next = state.waiting?.shift();
    if (next === undefined) return;
    // An answer that closed the connection (`Connection: close`: an early answer, a drain, an
    // HTTP/1.0 request with Transfer-Encoding) ends what it serves: the requests pipelined behind it
    // are never processed (RFC 9112 §9.6), their client gets no answer to them and may send them again.
    if (!res.shouldKeepAlive) {
      state.waiting = undefined;
      return;
    }
    if (state.waiting!.length === 0) {
      state.waiting = undefined;
      req.socket.resume();
    }
    next();
  });
}

/**
 * Runs `start` (the server's request handler) now, or, while a request is in progress on the
 * connection (an HTTP/1.1 client pipelining), once every request before it has closed. Node's
 * server emits pipelined requests at once and answers them in order: without this each would be
 * handled at the same time (the router forwarding all of them upstream, the gateway reading all
 * their files), holding a descriptor or an admission slot per request instead of one per
 * connection. The socket is paused meanwhile, so Node parses no more than the bytes it holds.
 */
export function inTurn(state: ConnectionState, socket: Socket, start: () => void): void {
  if (state.active === 0) {
    start();
    return;
  }
  if (socket.destroyed) return;
  (state.waiting ??= []).push(start);
  // Again with each one: Node resumes a socket it paused itself once its answers drain.
  socket.pause();
}

/** A keep-alive connection between requests: it served one and has none in progress. */
export function isIdleKeepAlive(state: ConnectionState): boolean {
  return state.active === 0 && state.served > 0;
}

/** True when the request head announces a body (a non-zero Content-Length or a chunked body). */
export function announcesBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/**
 * An idle keep-alive connection: its last answer may still be in the buffer, so end (flush, FIN)
 * first. An idle HTTP/2 connection gets GOAWAY instead (no stream is open on it).
 */
export function closeIdle(socket: Socket): void {
  const closeSession = stateOf(socket)?.closeSession;
  if (closeSession !== undefined) {
    closeSession();
    return;
  }
  if (socket.writableLength === 0) {
    socket.destroy();
    return;
  }
  socket.end();
  const timer = setTimeout(() => socket.destroy(), 1000);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
}
