/**
 * The front door for HTTP/2 connections (a TLS listener offers `h2` by ALPN beside `http/1.1`).
 * What HTTP/1.1 does per socket is done here per connection (a session) and per stream (a request):
 *  - the connection bound counts connections, so a session is one (connection-bound.ts, unchanged);
 *  - a session with no stream open is closed with GOAWAY after the head timeout (no first stream) or
 *    the keep-alive timeout (between streams), whatever PINGs it sends;
 *  - each stream has the body-idle and send-idle timeouts of a request: a stalled upload gets 408 and
 *    its stream is reset (RST_STREAM NO_ERROR after the answer), a stalled download is reset (CANCEL);
 *    the other streams of the connection go on;
 *  - an answer sent before the request body was read ends with RST_STREAM NO_ERROR (RFC 9113 §8.1),
 *    where HTTP/1.1 lingers and closes the connection;
 *  - a stream the client resets fails its request body (never a silent end of a truncated upload) and
 *    closes its response, which aborts the request's work and frees its admission slot;
 *  - floods: more than `CONTROL_FRAME_BUDGET` PING/SETTINGS frames or `RESET_BUDGET` streams reset
 *    by the client per window end the session with GOAWAY ENHANCE_YOUR_CALM (rapid reset,
 *    CVE-2023-44487; nghttp2 has a reset rate limit of its own, this one is tighter);
 *  - the drain sends GOAWAY to every session: open streams finish, no new one starts.
 * The protocol limits node:http2 enforces itself (concurrent streams, header list size, HPACK table,
 * session memory, invalid frames) are `HTTP2_SETTINGS` and `HTTP2_SESSION_LIMITS`, given to the
 * server in proxy/server/listener.ts.
 */
import http2, { type Http2Session, type ServerHttp2Stream } from 'node:http2';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { BODY_TIMEOUT } from '../errors.ts';
import { sendError } from '../http-errors.ts';
import { announcesBody, stateOf } from './connection-state.ts';
import { type FrontDoorTimeouts, idleAction } from './timeouts.ts';

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL, NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

/** SETTINGS the server announces. */
export const HTTP2_SETTINGS = {
  /** Streams open at once per connection (nginx's http2_max_concurrent_streams is 128; RFC 9113 suggests ≥ 100). */
  maxConcurrentStreams: 100,
  /**
   * Decoded header list per request: HTTP/1.1's 16 KiB head plus RFC 9113's 32 bytes per field for
   * 128 fields. An HPACK bomb (small frames that decode to a huge list) stops here: the stream is refused.
   */
  maxHeaderListSize: 16 * 1024 + 128 * 32,
  /** The HPACK table a client may make us keep (the protocol's default, 4 KiB). */
  headerTableSize: 4096,
  enablePush: false,
} as const;

/** node:http2 session options bounding what one connection may cost. */
export const HTTP2_SESSION_LIMITS = {
  /** MiB a session may hold in nghttp2 (queued frames, HPACK, stream state); past it new streams are refused. */
  maxSessionMemory: 10,
  /** Header fields per request, as HTTP/1.1 (node:http's default 2,000 is far above any client). */
  maxHeaderListPairs: 128,
  /** Malformed frames (and empty DATA frames, the "empty frames" flood) before the session ends. */
  maxSessionInvalidFrames: 100,
  /** Streams refused (over the concurrency bound) before the session ends. */
  maxSessionRejectedStreams: 100,
  /** Entries in one SETTINGS frame. */
  maxSettings: 32,
  /** PINGs of our own awaiting their ack. */
  maxOutstandingPings: 10,
  /** The bound a client's SETTINGS may not raise: we keep streams toward the client to this. */
  peerMaxConcurrentStreams: 100,
  /** A TLS connection that negotiated neither protocol (no ALPN) is served HTTP/1.1 (allowHTTP1); this bounds any other. */
  unknownProtocolTimeout: 10_000,
} as const;

/** PING and SETTINGS frames a client may send per window before its session ends. */
export const CONTROL_FRAME_BUDGET = { frames: 500, windowMs: 10_000 } as const;
/** Streams a client may reset per window before its session ends (rapid reset). */
export const RESET_BUDGET = { resets: 200, windowMs: 10_000 } as const;

/** Counts events in fixed windows: true once more than `max` fell in the current one. */
export class WindowCounter {
  readonly max: number;
  readonly windowMs: number;
  #windowStart = 0;
  #count = 0;

  constructor(max: number, windowMs: number) {
    this.max = max;
    this.windowMs = windowMs;
  }

  /** Counts one at `nowMs`; true when the budget is exceeded. */
  hit(nowMs: number): boolean {
    if (nowMs - this.#windowStart >= this.windowMs) {
      this.#windowStart = nowMs;
      this.#count = 0;
    }
    return ++this.#count > this.max;
  }
}

/** What the front door counts for HTTP/2 (metrics and tests). */
export interface Http2Counters {
  sessions: number;
  /** Sessions ended with GOAWAY ENHANCE_YOUR_CALM for a flood. */
  floods: number;
  /** Sessions closed idle (no stream within the head or keep-alive timeout). */
  idleClosed: number;
}

const ABORTED = 'the client reset the stream';
/** How long a flooding session's GOAWAY may take to leave before the connection is cut. */
const GOAWAY_LINGER_MS = 250;

/** What this module needs of the server: its sessions. */
export interface Http2Server {
  on(event: 'session', listener: (session: Http2Session) => void): unknown;
}

/** Installs the session bookkeeping on an HTTP/2-capable server. */
export class Http2Front {
  readonly counts: Http2Counters = { sessions: 0, floods: 0, idleClosed: 0 };
  readonly #sessions = new Set<Http2Session>();
  readonly #limits: FrontDoorTimeouts;
  readonly #log: Logger;
  readonly #timeoutCounts: { body: number; send: number };

  constructor(
    server: Http2Server,
    limits: FrontDoorTimeouts,
    log: Logger,
    timeoutCounts: { body: number; send: number },
  ) {
    this.#limits = limits;
    this.#log = log;
    this.#timeoutCounts = timeoutCounts;
    server.on('session', (session) => this.#track(session));
  }

  #track(session: Http2Session): void {
    this.counts.sessions++;
    this.#sessions.add(session);
    const socket = session.socket;
    const state = socket ? stateOf(socket) : undefined;
    if (state) state.session = session;
    const limits = this.#limits;
    let open = 0;
    let idle: NodeJS.Timeout | undefined;
    const armIdle = (ms: number) => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        if (open > 0 || session.closed || session.destroyed) return;
        this.counts.idleClosed++;
        closeSession(session);
      }, ms);
      idle.unref();
    };
    armIdle(limits.headersTimeoutMs);
    const control = new WindowCounter(CONTROL_FRAME_BUDGET.frames, CONTROL_FRAME_BUDGET.windowMs);
    const resets = new WindowCounter(RESET_BUDGET.resets, RESET_BUDGET.windowMs);
    let flooded = false;
    const flood = (kind: string) => {
      if (session.destroyed || flooded) return;
      flooded = true;
      this.counts.floods++;
      this.#log.info({ code: 'http2_flood', kind }, 'HTTP/2 client over its frame budget; session ended');
      // GOAWAY first (a destroy would say NO_ERROR), then the connection is cut once it went out.
      session.goaway(NGHTTP2_ENHANCE_YOUR_CALM);
      const cut = setTimeout(() => session.destroy(), GOAWAY_LINGER_MS);
      cut.unref();
      session.once('close', () => clearTimeout(cut));
    };
    session.on('ping', () => {
      if (control.hit(performance.now())) flood('ping');
    });
    session.on('remoteSettings', () => {
      if (control.hit(performance.now())) flood('settings');
    });
    session.on('stream', (stream: ServerHttp2Stream) => {
      open++;
      clearTimeout(idle);
      stream.once('close', () => {
        open--;
        if (stream.rstCode !== NGHTTP2_NO_ERROR && resets.hit(performance.now())) flood('reset');
        if (open === 0 && !session.destroyed) armIdle(limits.keepAliveTimeoutMs);
      });
    });
    // Protocol errors of a client (bad frames, a flood nghttp2 caught) are its doing: debug.
    session.on('error', (err: NodeJS.ErrnoException) => {
      this.#log.debug({ code: 'http2_session_error', reason: err.code ?? err.message }, 'HTTP/2 session error');
    });
    session.once('close', () => {
      clearTimeout(idle);
      this.#sessions.delete(session);
    });
  }

  /** Drain: GOAWAY to every session; streams in progress finish, no new one is accepted. */
  drain(): void {
    for (const session of this.#sessions) closeSession(session);
  }

  /** Destroys every session (the end of a graceful close). */
  destroyAll(): void {
    for (const session of this.#sessions) session.destroy();
  }

  /**
   * Per-stream part of admitting a request: its timeouts, an early answer's reset, a client's
   * reset failing the request body.
   */
  admitStream(req: IncomingMessage & { stream: ServerHttp2Stream }, res: ServerResponse): void {
    const stream = req.stream;
    const hasBody = announcesBody(req) || !stream.endAfterHeaders;
    // Before node:http2's own listener ends the request body: a reset body fails, never ends.
    stream.prependListener('close', () => {
      if (stream.rstCode !== NGHTTP2_NO_ERROR) failBody(req);
    });
    this.#armTimeouts(stream, req, res, hasBody);
    if (hasBody) resetAfterEarlyAnswer(stream, req);
  }

  #armTimeouts(stream: ServerHttp2Stream, req: IncomingMessage, res: ServerResponse, hasBody: boolean): void {
    const limits = this.#limits;
    stream.setTimeout(hasBody ? limits.bodyIdleTimeoutMs : limits.sendIdleTimeoutMs);
    if (hasBody) stream.once('end', () => stream.setTimeout(limits.sendIdleTimeoutMs));
    stream.on('timeout', () => {
      const complete = remoteClosed(stream);
      const action = idleAction({
        inRequest: true,
        complete,
        announcesBody: hasBody,
        headersSent: res.headersSent,
      });
      if (action.kind === 'answer408') {
        this.#timeoutCounts.body++;
        this.#log.info(
          { code: 'client_timeout', phase: 'request_body', idleMs: limits.bodyIdleTimeoutMs, protocol: 'h2' },
          'no request body byte in time; answering 408 and resetting the stream',
        );
        failBody(req);
        sendError(res, BODY_TIMEOUT);
        // RST_STREAM NO_ERROR once the answer is out: the client stops sending, the connection stays.
        if (!stream.closed) stream.close(NGHTTP2_NO_ERROR);
        return;
      }
      const counter = action.kind === 'cut' ? action.counter : 'send';
      this.#timeoutCounts[counter]++;
      this.#log.info(
        {
          code: 'client_timeout',
          phase: action.kind === 'cut' ? action.phase : 'response',
          idleMs: counter === 'send' ? limits.sendIdleTimeoutMs : limits.bodyIdleTimeoutMs,
          protocol: 'h2',
        },
        'client idle past its timeout; stream reset',
      );
      if (!stream.closed) stream.close(NGHTTP2_CANCEL);
    });
  }
}

/** GOAWAY (no error): open streams finish, then the connection closes; cut after the send timeout at worst. */
function closeSession(session: Http2Session): void {
  if (session.closed || session.destroyed) return;
  session.close();
}

/** The peer ended its side of the stream (its whole body arrived). */
function remoteClosed(stream: ServerHttp2Stream): boolean {
  return stream.endAfterHeaders || stream.destroyed || stream.state.remoteClose === 1;
}

/**
 * A request body that will not arrive whole fails (node:http's error for a connection cut mid-body)
 * rather than ending as if complete; with nobody reading it, it is only destroyed.
 */
function failBody(req: IncomingMessage): void {
  if (req.destroyed || req.readableEnded) return;
  if (req.listenerCount('error') === 0) req.destroy();
  else req.destroy(Object.assign(new Error(ABORTED), { code: 'ECONNRESET' }));
}

/**
 * An answer that went out before the request body was read: once it is sent, RST_STREAM NO_ERROR
 * tells the client to stop sending (RFC 9113 §8.1); the body the handler did not read fails.
 */
function resetAfterEarlyAnswer(stream: ServerHttp2Stream, req: IncomingMessage): void {
  stream.once('finish', () => {
    if (remoteClosed(stream) || stream.closed) return;
    failBody(req);
    stream.close(NGHTTP2_NO_ERROR);
  });
}
