/**
 * How long a client may idle, modelled on nginx:
 *  - headers: the whole request head within `headersTimeoutMs` (client_header_timeout), else 408
 *    (answered by client-errors.ts, where Node reports it);
 *  - request body idle: no body byte for `bodyIdleTimeoutMs` (client_body_timeout) → 408 when
 *    nothing was answered yet, and the connection closes, so the handler's body stream fails;
 *  - response send idle: the client takes no byte for `sendIdleTimeoutMs` (send_timeout) → cut;
 *  - keep-alive idle: `keepAliveTimeoutMs` (keepalive_timeout) between requests.
 */
import type http from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { BODY_TIMEOUT } from '../errors.ts';
import { sendError } from '../http-errors.ts';
import { announcesBody, stateOf } from './connection-state.ts';
import { isPacing } from './pacing.ts';
import { TimeoutLines } from './timeout-lines.ts';

export interface FrontDoorTimeouts {
  readonly headersTimeoutMs: number;
  readonly bodyIdleTimeoutMs: number;
  readonly sendIdleTimeoutMs: number;
  readonly keepAliveTimeoutMs: number;
}

/** Options for `http.createServer` that the front door needs from the start. */
export function serverOptions(limits: FrontDoorTimeouts): http.ServerOptions {
  return {
    requestTimeout: 0,
    headersTimeout: limits.headersTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // Node checks the head timeout on this interval (default 30 s, which would double it).
    connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs),
  };
}

/** What the connection is doing when its socket idled past the current timeout. */
export interface IdleConnection {
  /** A request is in progress (else the connection idled between requests). */
  readonly inRequest: boolean;
  /** The request body was read to its end (or there is none). */
  readonly complete: boolean;
  readonly announcesBody: boolean;
  readonly headersSent: boolean;
  /** A take of the request's bandwidth meter waits: the silence is the gateway's pacing (pacing.ts). */
  readonly pacing?: boolean;
}

export type IdleAction =
  /** No request in progress: close without a word. */
  | { readonly kind: 'close' }
  /** The gateway paces the request: the timeout starts again, the connection stays. */
  | { readonly kind: 'wait' }
  /** The body stalled before anything was answered: 408, then close. */
  | { readonly kind: 'answer408' }
  /** Too late for an answer: cut, counted as `counter` and logged with `phase`. */
  | { readonly kind: 'cut'; readonly counter: 'body' | 'send'; readonly phase: 'request_body' | 'response' };

/** The decision for a socket that idled past its timeout. */
export function idleAction(c: IdleConnection): IdleAction {
  if (!c.inRequest) return { kind: 'close' };
  if (c.pacing) return { kind: 'wait' };
  const bodyPending = !c.complete && c.announcesBody;
  if (bodyPending && !c.headersSent) return { kind: 'answer408' };
  return { kind: 'cut', counter: bodyPending ? 'body' : 'send', phase: c.complete ? 'response' : 'request_body' };
}

/** The timeouts of one server: the `timeout` handler and the per-request socket timeouts. */
export class Timeouts {
  /** Connections closed because the client idled past the body or send timeout. */
  readonly counts = { body: 0, send: 0 };
  /** Their lines, bounded per phase (HTTP/2's streams write theirs here too). */
  readonly lines: TimeoutLines;
  readonly #limits: FrontDoorTimeouts;
  /** Each connection's keep-alive timer (#watchKeepAlive), one at a time. */
  readonly #keepAlive = new WeakMap<Socket, NodeJS.Timeout>();

  constructor(server: http.Server, limits: FrontDoorTimeouts, log: Logger) {
    this.#limits = limits;
    this.lines = new TimeoutLines(log);
    server.on('timeout', (socket: Socket) => this.#onIdle(socket));
  }

  /** Arms the idle timeout for a request just admitted: the body's first, then the response's. */
  arm(socket: Socket, req: IncomingMessage, res: ServerResponse, hasBody: boolean): void {
    const limits = this.#limits;
    socket.setTimeout(hasBody ? limits.bodyIdleTimeoutMs : limits.sendIdleTimeoutMs);
    if (hasBody)
      req.once('end', () => {
        socket.setTimeout(limits.sendIdleTimeoutMs);
        this.#watchSend(socket, res);
      });
    else this.#watchSend(socket, res);
    // An answer that closes its connection (lingering after an early answer) is closed by its own end.
    res.once('close', () => {
      if (res.shouldKeepAlive) this.#watchKeepAlive(socket);
    });
  }

  /**
   * After an answer, Node closes the connection at the keep-alive timeout, on a socket timer any
   * byte pushes back; the head timeout starts only with a head, and blank lines start none. So a
   * connection that sends no request is closed here too: at the keep-alive timeout when it sent
   * nothing, else at the head timeout after that (what it sent may be the start of a slow head).
   */
  #watchKeepAlive(socket: Socket): void {
    const state = stateOf(socket);
    if (state === undefined || socket.destroyed) return;
    const served = state.served;
    const noRequestSince = () => !socket.destroyed && state.served === served && state.active === 0;
    const bytesRead = socket.bytesRead;
    clearTimeout(this.#keepAlive.get(socket));
    const timer = setTimeout(() => {
      if (!noRequestSince()) return;
      if (socket.bytesRead === bytesRead) {
        socket.destroy();
        return;
      }
      const head = setTimeout(() => {
        if (noRequestSince()) socket.destroy();
      }, this.#limits.headersTimeoutMs);
      head.unref();
      this.#keepAlive.set(socket, head);
    }, this.#limits.keepAliveTimeoutMs);
    timer.unref();
    this.#keepAlive.set(socket, timer);
  }

  /**
   * The socket's idle timer is pushed back by any byte the client sends, and the parser skips blank
   * lines between requests without starting a head (so the head timeout never starts): a client
   * that takes none of its answer while it sends those would hold the connection, and what the
   * request holds, for ever. So the send timeout is also judged on what the client took: an answer
   * with bytes queued toward it and none taken for the timeout is handled as a send timeout (within
   * one to two timeouts of its last byte taken).
   */
  #watchSend(socket: Socket, res: ServerResponse): void {
    if (res.closed || socket.destroyed) return;
    const ms = this.#limits.sendIdleTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const check = (taken: number) => {
      timer = setTimeout(() => {
        if (res.closed || socket.destroyed) return;
        const now = sentBytes(socket);
        if (now !== taken || socket.writableLength === 0) check(now);
        // Bytes queued toward the client and none taken: its silence, whatever the pacing.
        else this.#onIdle(socket, false);
      }, ms);
      timer.unref();
    };
    check(sentBytes(socket));
    res.once('close', () => clearTimeout(timer));
  }

  // A socket idle past its current timeout: which one depends on what the connection is doing.
  #onIdle(socket: Socket, pacingCounts = true): void {
    const state = stateOf(socket);
    const { req, res } = state ?? {};
    const inRequest = state !== undefined && state.active !== 0 && req !== undefined && res !== undefined;
    const action = idleAction({
      inRequest,
      complete: req?.complete ?? true,
      announcesBody: req !== undefined && announcesBody(req),
      headersSent: res?.headersSent ?? false,
      pacing: pacingCounts && req !== undefined && isPacing(req),
    });
    if (action.kind === 'wait') {
      // Armed again from now: once the take passes, a client that then sends or takes nothing is
      // still timed out (an upload's reading resumes with no byte of activity to arm it).
      socket.setTimeout(req?.complete === false ? this.#limits.bodyIdleTimeoutMs : this.#limits.sendIdleTimeoutMs);
      return;
    }
    if (action.kind === 'close' || !req || !res) {
      socket.destroy();
      return;
    }
    const limits = this.#limits;
    if (action.kind === 'answer408') {
      this.counts.body++;
      this.lines.write(
        { code: 'client_timeout', phase: 'request_body', idleMs: limits.bodyIdleTimeoutMs },
        'no request body byte in time; answering 408 and closing',
      );
      answerStalledBody(socket, req, res);
      return;
    }
    this.counts[action.counter]++;
    this.lines.write(
      {
        code: 'client_timeout',
        phase: action.phase,
        idleMs: action.phase === 'response' ? limits.sendIdleTimeoutMs : limits.bodyIdleTimeoutMs,
      },
      'client idle past its timeout; connection closed',
    );
    socket.destroy();
  }
}

/** Bytes the socket handed to the kernel: written, less those still queued. */
function sentBytes(socket: Socket): number {
  return socket.bytesWritten - socket.writableLength;
}

/** 408 to an upload whose body stalled before anything was answered, then the connection closes. */
function answerStalledBody(socket: Socket, req: IncomingMessage, res: ServerResponse): void {
  res.shouldKeepAlive = false;
  // Logged by the caller with the phase and the timeout: not again here.
  sendError(res, BODY_TIMEOUT);
  res.once('finish', () => socket.destroy());
  // Node stops tracking a request once its response finished: fail the body the handler is
  // still reading, so the upload is dropped and its slot released.
  // (Destroyed without an error: a proxy's error handlers would find the request detached.)
  socket.once('close', () => req.destroy());
  const cut = setTimeout(() => socket.destroy(), 1000);
  cut.unref();
  socket.once('close', () => clearTimeout(cut));
}
