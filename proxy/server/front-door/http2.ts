/**
 * The front door for HTTP/2 connections (a TLS listener offers `h2` by ALPN beside `http/1.1`).
 * What HTTP/1.1 does per socket is done here per connection (a session) and per stream (a request):
 *  - the connection bound counts connections, so a session is one (connection-bound.ts, unchanged);
 *  - a session with no stream open is closed with GOAWAY after the head timeout (no first stream) or
 *    the keep-alive timeout (between streams), whatever PINGs it sends (http2-session-watch.ts, on
 *    an injected clock, decides when);
 *  - each stream has the body-idle and send-idle timeouts of a request: a stalled upload gets 408 and
 *    its stream is reset (RST_STREAM NO_ERROR after the answer), or CANCEL when its answer had begun;
 *    a stalled download is reset (CANCEL); the other streams of the connection go on (node:http2's
 *    stream timeout, and the session's `StallWatch` for a stream with bytes queued, see below);
 *  - an answer sent before the request body was read ends with RST_STREAM NO_ERROR (RFC 9113 §8.1),
 *    where HTTP/1.1 lingers and closes the connection;
 *  - a stream the client resets fails its request body (never a silent end of a truncated upload) and
 *    closes its response, which aborts the request's work and frees its admission slot;
 *  - floods: more than `CONTROL_FRAME_BUDGET` PING/SETTINGS frames or `RESET_BUDGET` streams reset
 *    by the client per window end the session with GOAWAY ENHANCE_YOUR_CALM (rapid reset,
 *    CVE-2023-44487; nghttp2 has a reset rate limit of its own, this one is tighter);
 *  - what a session's answers hold toward a client that does not read is bounded
 *    (http2-send-budget.ts): a new stream's handler waits while the answers in progress fill the
 *    budget (32 at most, counted from the moment their handler runs, so a burst of streams whose
 *    handlers wait on I/O counts before it writes), a streamed body's next chunk while their unsent
 *    bytes do; an answer holding unsent bytes that sent none for the send
 *    timeout is reset (CANCEL, counted as `send_timeout`; while its request body is due and
 *    receives nothing, at the body timeout, counted as `body_timeout`) by the session's
 *    `StallWatch`, since node:http2's own timeout of a stream with bytes queued is pushed back by
 *    any frame its session sends;
 *  - the drain sends GOAWAY to every session: open streams finish, no new one starts;
 *  - a session closed (idle, drain, the connection bound) is cut `SESSION_LINGER_MS` after its last
 *    stream closed, and a stream the front door reset whose RST_STREAM did not go out within the
 *    send timeout cuts its connection: a client that stops reading at the TCP level holds nothing;
 *  - sessions, streams, and every GOAWAY and RST_STREAM the front door sends are counted
 *    (`Http2Counters`, the `arkvory_http2_*` metrics).
 * The protocol limits node:http2 enforces itself (concurrent streams, header list size, HPACK table,
 * session memory, invalid frames) are `HTTP2_SETTINGS` and `HTTP2_SESSION_LIMITS`, given to the
 * server in proxy/server/listener.ts.
 */
import http2, { type Http2Session, type ServerHttp2Stream } from 'node:http2';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { CLIENT_FAULT_LOG, LogBudget } from '../../../lib/log-budget.ts';
import { BODY_TIMEOUT } from '../errors.ts';
import { sendError } from '../http-errors.ts';
import { announcesBody, stateOf } from './connection-state.ts';
import { type FrontDoorTimeouts, idleAction } from './timeouts.ts';
import { isPacing } from './pacing.ts';
import { type FloodKind, SessionWatch, type SessionWatchDeps } from './http2-session-watch.ts';
import type { TimeoutLines } from './timeout-lines.ts';
import { type Held, SEND_BUDGET, SendBudget, type StallPhase, StallWatch } from './http2-send-budget.ts';
import { StreamErrors } from './http2-stream-errors.ts';
import type { Http2Request, Http2Response } from '../http2-messages.ts';
import { type Clock, systemClock } from '../../../policy/clock.ts';
import type { TimerHandle, Timers } from '../../../policy/timers.ts';

export { CONTROL_FRAME_BUDGET, RESET_BUDGET } from './http2-session-watch.ts';
export { SEND_BUDGET } from './http2-send-budget.ts';

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

/** Why the front door sent a session GOAWAY (`arkvory_http2_goaway_sent_total`). */
export type GoawayReason = 'idle' | 'drain' | 'ping_flood' | 'settings_flood' | 'rapid_reset';
/** Why the front door reset a stream (`arkvory_http2_stream_resets_sent_total`). */
export type StreamResetReason = 'send_timeout' | 'body_timeout' | 'early_answer' | 'malformed';

const FLOOD_REASON: Record<FloodKind, GoawayReason> = {
  ping: 'ping_flood',
  settings: 'settings_flood',
  reset: 'rapid_reset',
};

/** What the front door counts for HTTP/2, read at scrape time (proxy/metrics/front-door-metrics.ts). */
export interface Http2Counters {
  /** Sessions (HTTP/2 connections) since start. */
  sessions: number;
  /** Streams (requests) since start. */
  streams: number;
  /** Streams the client ended with RST_STREAM before their answer ended, whatever the code (a cancel, or a rapid reset). */
  resetsReceived: number;
  /** Sessions ended by a protocol error node:http2 caught (malformed or invalid frames, a header list past its bound, an unacknowledged PING flood). */
  sessionErrors: number;
  /** Answers (a new stream's handler, a streamed body's chunk) that waited for their session's send budget. */
  sendBudgetWaits: number;
  readonly goaways: Record<GoawayReason, number>;
  readonly resetsSent: Record<StreamResetReason, number>;
}

/** Open now, beside the running totals. */
export interface Http2Snapshot extends Http2Counters {
  readonly openSessions: number;
  readonly openStreams: number;
  /** Answers waiting for their session's send budget now. */
  readonly sendBudgetWaiting: number;
}

/** The front door's part of one session. */
interface SessionFront {
  readonly watch: SessionWatch;
  readonly budget: SendBudget;
  readonly stalls: StallWatch<ServerHttp2Stream>;
  /** Streams whose handler ran and still open, with their responses: what `budget` measures. */
  readonly answers: Map<ServerHttp2Stream, Http2Response>;
  /** GOAWAY, and the cut once no stream is open (`SESSION_LINGER_MS`); false when it was closing already. */
  readonly close: () => boolean;
  /** Ends the session and its connection at once, pending writes or not. */
  readonly cut: () => void;
}

const ABORTED = 'the client reset the stream';
/** How long a flooding session's GOAWAY may take to leave before the connection is cut. */
const GOAWAY_LINGER_MS = 250;
/**
 * How long a closing session with no stream open may take to flush what it wrote before its
 * connection is cut: node:http2 ends such a session only once its bytes left, so a client that
 * stops reading at the TCP level (its window shut) kept an idle, drained or bound-closed session,
 * and its descriptor, for ever. HTTP/1.1's idle close lingers as long (connection-state.ts).
 */
export const SESSION_LINGER_MS = 1000;

/** What this module needs of the server: its sessions. */
export interface Http2Server {
  on(event: 'session', listener: (session: Http2Session) => void): unknown;
}

/** The process's clock; idle timers that do not keep the process alive by themselves. */
const SYSTEM_WATCH: SessionWatchDeps = {
  clock: systemClock,
  timers: {
    setTimeout: (callback, delayMs) => setTimeout(callback, delayMs).unref(),
    clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
  },
};

/** Installs the session bookkeeping on an HTTP/2-capable server. */
export class Http2Front {
  readonly #counts: Http2Counters = {
    sessions: 0,
    streams: 0,
    resetsReceived: 0,
    sessionErrors: 0,
    sendBudgetWaits: 0,
    goaways: { idle: 0, drain: 0, ping_flood: 0, settings_flood: 0, rapid_reset: 0 },
    resetsSent: { send_timeout: 0, body_timeout: 0, early_answer: 0, malformed: 0 },
  };
  readonly #sessions = new Map<Http2Session, SessionFront>();
  readonly #limits: FrontDoorTimeouts;
  readonly #log: Logger;
  readonly #timeoutCounts: { body: number; send: number };
  readonly #timeoutLines: TimeoutLines;
  readonly #watch: SessionWatchDeps;
  /** A flood's lines, per kind: anyone can open sessions and flood them as fast as they can connect. */
  readonly #floodLines = new LogBudget(CLIENT_FAULT_LOG);

  constructor(
    server: Http2Server,
    limits: FrontDoorTimeouts,
    log: Logger,
    /** HTTP/1.1's timeouts (timeouts.ts): one count and one bound on lines for both. */
    timeouts: { readonly counts: { body: number; send: number }; readonly lines: TimeoutLines },
    time: { clock: Clock; timers: Timers } = SYSTEM_WATCH,
  ) {
    this.#limits = limits;
    this.#log = log;
    this.#timeoutCounts = timeouts.counts;
    this.#timeoutLines = timeouts.lines;
    this.#watch = time;
    server.on('session', (session) => this.#track(session));
  }

  /** The counters, and the sessions and streams open now. */
  snapshot(): Http2Snapshot {
    let openStreams = 0;
    let waits = 0;
    let waiting = 0;
    for (const { watch, budget } of this.#sessions.values()) {
      openStreams += watch.openStreams;
      waits += budget.waited;
      waiting += budget.waiting;
    }
    const c = this.#counts;
    return {
      ...c,
      sendBudgetWaits: c.sendBudgetWaits + waits,
      sendBudgetWaiting: waiting,
      goaways: { ...c.goaways },
      resetsSent: { ...c.resetsSent },
      openSessions: this.#sessions.size,
      openStreams,
    };
  }

  #track(session: Http2Session): void {
    const counts = this.#counts;
    counts.sessions++;
    const timers = this.#watch.timers;
    let linger: TimerHandle | undefined;
    // A closing session whose last stream closed has nothing left but bytes to flush.
    const cutOnceIdle = () => {
      if (linger !== undefined || session.destroyed || watch.openStreams > 0) return;
      linger = timers.setTimeout(() => {
        linger = undefined;
        // A stream the client opened before it read the GOAWAY: its close arms this again.
        if (watch.openStreams === 0) cut();
      }, SESSION_LINGER_MS);
    };
    const close = () => {
      if (!closeSession(session)) return false;
      cutOnceIdle();
      return true;
    };
    const socket = session.socket;
    const state = socket ? stateOf(socket) : undefined;
    if (state) state.closeSession = close;
    // node:http2's destroy of a session still waits for its pending write, which a client that reads
    // nothing never lets finish: the connection's own socket is destroyed with it.
    const cut = () => {
      session.destroy();
      state?.socket.destroy();
    };
    const watch = new SessionWatch(this.#limits, this.#watch, {
      idle: () => {
        if (close()) counts.goaways.idle++;
      },
      flood: (kind) => this.#flood(session, kind),
    });
    const answers = new Map<ServerHttp2Stream, Http2Response>();
    const budget = new SendBudget(SEND_BUDGET, () => heldBy(answers));
    const stalls = new StallWatch(
      { sendMs: this.#limits.sendIdleTimeoutMs, bodyMs: this.#limits.bodyIdleTimeoutMs },
      this.#watch.timers,
      {
        answers: () => answers.keys(),
        progressOf: (s) => progressOf(s, answers.get(s)!),
        unsentOf,
        bodyDue: (s) => !remoteClosed(s),
      },
      (stalled, phase) => this.#stalled(stalled, phase),
    );
    this.#sessions.set(session, { watch, budget, stalls, answers, close, cut });
    // A malformed request (DATA past its content-length) is reset alone, not its whole connection.
    const streamErrors = new StreamErrors(session, (resets) => {
      if (this.#log.isLevelEnabled('debug'))
        this.#log.debug({ code: 'http2_malformed_request', streams: resets }, 'HTTP/2 malformed request; stream reset');
    });
    session.on('ping', () => watch.controlFrame('ping'));
    session.on('remoteSettings', () => watch.controlFrame('settings'));
    // One listener per session, not a closure (and a `once` wrapper) per stream: 'close' is emitted once.
    const onStreamClose = function (this: ServerHttp2Stream): void {
      // A reset of ours (a timeout, an early answer) is counted where it is sent, not here. A
      // client's RST_STREAM with NO_ERROR before the answer ended is a reset all the same (`aborted`).
      // nghttp2's reset of a malformed request is counted as sent, and toward the client's budget.
      const malformed = streamErrors.closed(this);
      const resetByClient = !malformed && !sentReset.has(this) && (this.rstCode !== NGHTTP2_NO_ERROR || this.aborted);
      if (resetByClient) counts.resetsReceived++;
      if (malformed) counts.resetsSent.malformed++;
      watch.streamClosed(resetByClient || malformed);
      // What it held is let go, sent or not: answers waiting for the budget may go on.
      if (answers.delete(this)) budget.sent();
      if (session.closed) cutOnceIdle();
    };
    // Streams node:http2 reset itself before they became requests (a header list past its bound,
    // over the concurrency bound) emit nothing: they are the gaps in the client's stream ids, seen
    // at the next stream and on a poll (a client may send nothing else), and count as resets.
    const refused = new RefusedStreams(session, (n) => watch.streamsRefused(n), this.#watch.timers);
    // Before node:http2's own listener hands the stream to the request handler: a stream is counted
    // open before its request runs (a `/metrics` scrape counts itself).
    session.prependListener('stream', (stream: ServerHttp2Stream) => {
      refused.opened(stream.id ?? 0);
      counts.streams++;
      watch.streamOpened();
      stream.on('close', onStreamClose);
    });
    // After node:http2's own listener, which hands the stream to the request handler or, without a
    // request, to node-answers.ts (CONNECT: 405; an Expect other than 100-continue: 417): such a
    // stream is reset once that answer is out, as any early answer, so a client leaving it
    // half-open holds neither an open-stream count (the session never idles) nor its connection.
    session.on('stream', (stream: ServerHttp2Stream) => {
      if (!admitted.has(stream)) this.#resetAfterEarlyAnswer(stream, undefined);
    });
    // Protocol errors of a client (bad frames, a flood nghttp2 caught) are its doing: debug.
    session.on('error', (err: NodeJS.ErrnoException) => {
      counts.sessionErrors++;
      this.#log.debug({ code: 'http2_session_error', reason: err.code ?? err.message }, 'HTTP/2 session error');
    });
    session.once('close', () => {
      if (linger !== undefined) timers.clearTimeout(linger);
      refused.end();
      watch.end();
      budget.end();
      stalls.end();
      counts.sendBudgetWaits += budget.waited;
      this.#sessions.delete(session);
    });
  }

  #flood(session: Http2Session, kind: FloodKind): void {
    if (session.destroyed) return;
    this.#counts.goaways[FLOOD_REASON[kind]]++;
    const turn = this.#floodLines.take(kind, this.#watch.clock.monotonicMs());
    const fields = { code: 'http2_flood', kind };
    const message = 'HTTP/2 client over its frame budget; session ended';
    if (turn.write) this.#log.info(turn.suppressed > 0 ? { ...fields, suppressed: turn.suppressed } : fields, message);
    else if (this.#log.isLevelEnabled('debug')) this.#log.debug(fields, message);
    // GOAWAY first (a destroy would say NO_ERROR), then the connection is cut once it went out (or
    // not: a flooding client that reads nothing holds no connection either).
    session.goaway(NGHTTP2_ENHANCE_YOUR_CALM);
    const front = this.#sessions.get(session);
    const cut = setTimeout(() => (front ? front.cut() : session.destroy()), GOAWAY_LINGER_MS);
    cut.unref();
    session.once('close', () => clearTimeout(cut));
  }

  /**
   * Answers holding unsent bytes that made no progress for their timeout: cut as node:http2's
   * timeout of the stream would cut them, the send timeout's or, while the body is due, the body's.
   */
  #stalled(stalled: readonly ServerHttp2Stream[], phase: StallPhase): void {
    const body = phase === 'body';
    let cut = 0;
    for (const stream of stalled) {
      if (stream.closed) continue;
      this.#reset(stream, NGHTTP2_CANCEL, body ? 'body_timeout' : 'send_timeout');
      cut++;
    }
    if (cut === 0) return;
    this.#timeoutCounts[phase] += cut;
    this.#timeoutLines.write(
      {
        code: 'client_timeout',
        phase: body ? 'request_body' : 'response',
        idleMs: body ? this.#limits.bodyIdleTimeoutMs : this.#limits.sendIdleTimeoutMs,
        protocol: 'h2',
        streams: cut,
      },
      body
        ? 'client sent no body byte and took no byte of its answers in time; streams reset'
        : 'client took no byte of its answers in time; streams reset',
    );
  }

  /** Drain: GOAWAY to every session; streams in progress finish, no new one is accepted. */
  drain(): void {
    for (const { close } of this.#sessions.values()) if (close()) this.#counts.goaways.drain++;
  }

  /**
   * A request that arrived while draining, on a session the drain's GOAWAY did not reach (its
   * handshake ended after the drain began): GOAWAY now, so its answer is the last one, as an
   * HTTP/1.1 connection closes after its answer.
   */
  drainSessionOf(stream: ServerHttp2Stream): void {
    const session = stream.session;
    const front = session === undefined ? undefined : this.#sessions.get(session);
    if (front?.close()) this.#counts.goaways.drain++;
  }

  /** Destroys every session (the end of a graceful close). */
  destroyAll(): void {
    for (const session of this.#sessions.keys()) session.destroy();
  }

  /**
   * Hands an HTTP/2 request to `handler` now, or once its session's answers in progress leave room
   * in their send budget (http2-send-budget.ts): its answer counts from then on, whatever it does
   * before writing. A stream reset while it waits is never handled.
   */
  dispatch(
    req: IncomingMessage & { stream: ServerHttp2Stream },
    res: ServerResponse,
    handler: (req: IncomingMessage, res: ServerResponse) => void,
  ): void {
    const stream = req.stream;
    const front = this.#sessions.get(stream.session!);
    if (front === undefined) {
      handler(req, res);
      return;
    }
    if (front.budget.mayStart()) {
      begin(front, stream, res);
      handler(req, res);
      return;
    }
    // The waiting stream is the handler's, not one node:http2 answered itself.
    admitted.add(stream);
    const { budget } = front;
    const resume = () => {
      stream.off('close', cancel);
      if (stream.closed || stream.destroyed) return;
      begin(front, stream, res);
      handler(req, res);
    };
    const cancel = () => budget.cancel(resume);
    stream.once('close', cancel);
    budget.waitToStart(resume);
  }

  /**
   * Per-stream part of admitting a request: its timeouts, an early answer's reset, a client's
   * reset failing the request body.
   */
  admitStream(req: IncomingMessage & { stream: ServerHttp2Stream }, res: ServerResponse): void {
    const stream = req.stream;
    admitted.add(stream);
    const hasBody = announcesBody(req) || !stream.endAfterHeaders;
    // Before node:http2's own listener ends the request body: a reset body fails, never ends.
    stream.prependListener('close', () => {
      if (stream.rstCode !== NGHTTP2_NO_ERROR) failBody(req);
    });
    // A client's RST_STREAM NO_ERROR mid-body closes the stream with no error code, and node:http2
    // then ends the request body as if whole: a body without a Content-Length (which nghttp2 would
    // have checked) would be stored truncated. The stream is aborted first: the body fails there.
    if (hasBody) stream.once('aborted', () => failBody(req));
    this.#armTimeouts(stream, req, res, hasBody);
    if (hasBody) this.#resetAfterEarlyAnswer(stream, req);
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
        pacing: isPacing(req),
      });
      if (action.kind === 'wait') {
        // Armed again from now, as over HTTP/1.1 (timeouts.ts).
        stream.setTimeout(hasBody && !complete ? limits.bodyIdleTimeoutMs : limits.sendIdleTimeoutMs);
        return;
      }
      if (action.kind === 'answer408') {
        this.#timeoutCounts.body++;
        this.#timeoutLines.write(
          { code: 'client_timeout', phase: 'request_body', idleMs: limits.bodyIdleTimeoutMs, protocol: 'h2' },
          'no request body byte in time; answering 408 and resetting the stream',
        );
        // RST_STREAM NO_ERROR once the answer is out (#resetAfterEarlyAnswer, on the stream's
        // 'finish'): the client stops sending, the connection stays. Not before: a stream closed
        // while its answer is still queued, then destroyed by the failed body's handler, leaves
        // node:http2 writing the pending data forever (a spinning loop and unbounded memory).
        bodyTimedOut.add(stream);
        failBody(req);
        sendError(res, BODY_TIMEOUT);
        return;
      }
      const counter = action.kind === 'cut' ? action.counter : 'send';
      this.#timeoutCounts[counter]++;
      this.#timeoutLines.write(
        {
          code: 'client_timeout',
          phase: action.kind === 'cut' ? action.phase : 'response',
          idleMs: counter === 'send' ? limits.sendIdleTimeoutMs : limits.bodyIdleTimeoutMs,
          protocol: 'h2',
        },
        'client idle past its timeout; stream reset',
      );
      // The timeout that fired names the reset: a body stalled after the answer began is the
      // body's, whoever else was idle (the send timeout is armed only once the body ended).
      this.#reset(stream, NGHTTP2_CANCEL, counter === 'body' ? 'body_timeout' : 'send_timeout');
    });
  }

  /**
   * Resets `stream` with `code` (unless it closed already), counted as ours, not the client's. The
   * stream closes once its RST_STREAM went out: when that has not happened within the send timeout,
   * the client takes no byte of its connection at all (its TCP window is shut, so a send timeout
   * that reset the stream let go of nothing: neither its slot nor the connection), which is cut.
   */
  #reset(stream: ServerHttp2Stream, code: number, reason: StreamResetReason): void {
    if (stream.closed) return;
    sentReset.add(stream);
    this.#counts.resetsSent[reason]++;
    stream.close(code);
    const session = stream.session;
    if (stream.destroyed || session === undefined) return;
    const timers = this.#watch.timers;
    const cut = timers.setTimeout(() => {
      if (stream.destroyed) return;
      this.#log.debug({ code: 'http2_connection_stalled' }, 'HTTP/2 client took no byte of its connection; cut');
      this.#sessions.get(session)?.cut();
    }, this.#limits.sendIdleTimeoutMs);
    stream.once('close', () => timers.clearTimeout(cut));
  }

  /**
   * An answer that went out before the request body was read: once it is sent, RST_STREAM NO_ERROR
   * tells the client to stop sending (RFC 9113 §8.1); the body the handler did not read fails.
   */
  #resetAfterEarlyAnswer(stream: ServerHttp2Stream, req: IncomingMessage | undefined): void {
    stream.once('finish', () => {
      if (remoteClosed(stream) || stream.closed) return;
      if (req) failBody(req);
      this.#reset(stream, NGHTTP2_NO_ERROR, bodyTimedOut.has(stream) ? 'body_timeout' : 'early_answer');
    });
  }
}

/** How often a session's stream ids are checked for streams node:http2 reset before any request. */
const REFUSED_POLL_MS = 1000;

/** The client's stream ids (odd, increasing) that never became a stream event, reported as they are found. */
class RefusedStreams {
  readonly #session: Http2Session;
  readonly #report: (count: number) => void;
  readonly #timers: Timers;
  /** The highest stream id accounted for, as a stream or as refused. */
  #accounted = 0;
  #poll: ReturnType<Timers['setTimeout']> | undefined;

  constructor(session: Http2Session, report: (count: number) => void, timers: Timers) {
    this.#session = session;
    this.#report = report;
    this.#timers = timers;
    this.#schedule();
  }

  /** A stream event: the ids skipped since the last one accounted for were refused. */
  opened(id: number): void {
    if (id <= this.#accounted) return;
    const skipped = (id - this.#accounted) / 2 - 1;
    this.#accounted = id;
    if (skipped > 0) this.#report(skipped);
  }

  end(): void {
    if (this.#poll !== undefined) this.#timers.clearTimeout(this.#poll);
    this.#poll = undefined;
  }

  #schedule(): void {
    this.#poll = this.#timers.setTimeout(() => {
      this.#check();
      this.#schedule();
    }, REFUSED_POLL_MS);
  }

  /**
   * Ids nghttp2 processed past the last one accounted for, with no stream event: refused. Not once
   * the session sent GOAWAY: streams the client opened before it read that are not its abuse.
   */
  #check(): void {
    if (this.#session.destroyed || this.#session.closed) return;
    const last = this.#session.state.lastProcStreamID ?? 0;
    if (last <= this.#accounted) return;
    const refused = (last - this.#accounted + 1) >> 1;
    this.#accounted = last;
    this.#report(refused);
  }
}

/** An answer begins: its session's budget counts it, its streamed body waits on that budget, the stall watch judges it. */
function begin(front: SessionFront, stream: ServerHttp2Stream, res: ServerResponse): void {
  const answer = res as unknown as Http2Response;
  front.answers.set(stream, answer);
  answer.sendBudget = front.budget;
  front.stalls.answering();
}

/**
 * What the answers in progress of a session hold: each whose handler ran and whose bytes are not
 * yet all out (written or not), and their queued bytes (written, not yet taken by the client's
 * flow-control window).
 */
function heldBy(answers: ReadonlyMap<ServerHttp2Stream, unknown>): Held {
  let count = 0;
  let queued = 0;
  for (const stream of answers.keys()) {
    if (stream.writableFinished) continue;
    count++;
    queued += stream.writableLength;
  }
  return { answers: count, queued };
}

/** Bytes an answer wrote that the client has not taken yet, as `StallWatch` judges them. */
function unsentOf(stream: ServerHttp2Stream): number {
  return stream.writableFinished ? 0 : stream.writableLength;
}

/** What `StallWatch` counts as progress: answer bytes the client took, and request body bytes received. */
function progressOf(stream: ServerHttp2Stream, answer: Http2Response): number {
  return answer.bodyBytesWritten - stream.writableLength + (answer.req as Http2Request).bodyBytesRead;
}

/** Streams the front door reset itself: their close is not a client's reset. */
const sentReset = new WeakSet<ServerHttp2Stream>();
/** Streams handed to the request handler (the rest node:http2 answered itself). */
const admitted = new WeakSet<ServerHttp2Stream>();
/** Streams answered 408 for a stalled body: their reset is counted as `body_timeout`. */
const bodyTimedOut = new WeakSet<ServerHttp2Stream>();

/**
 * GOAWAY (no error): open streams finish (each within its timeouts), then the connection closes, cut
 * `SESSION_LINGER_MS` after the last one at worst (the session's `close` in `Http2Front`). False
 * when the session was closing already.
 */
function closeSession(session: Http2Session): boolean {
  if (session.closed || session.destroyed) return false;
  session.close();
  return true;
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
