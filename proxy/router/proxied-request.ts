/**
 * One client request on its way through the router: picks a gateway, relays its answer, and sends a
 * GET/HEAD without body once more to another gateway when the first fails before any byte of its
 * answer was relayed: no answer (connect error, reset, idle timeout) or a 502/503/504 head (its store
 * failed, it is draining). Once, never after the response started, and only while the request is
 * younger than the idle timeout (the client's budget: it never waits for a head longer than about
 * twice the silence it would be cut for). The request goes again as it came (Range, conditionals).
 * Each content read's outcome also feeds outlier detection, with failures that are the gateway's
 * own: no answer, or a 5xx head where another gateway answered the same read without one (every
 * gateway shares the store, so the same 5xx from two is the object's or the store's, and a client
 * could repeat it to get healthy gateways ejected). Guarantees of proxy-handler.ts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { GatewayError } from '../server/errors.ts';
import { sendError } from '../server/http-errors.ts';
import type { BackendPool, BackendView } from './backend-pool.ts';
import { responseHeaderList } from './hop-by-hop.ts';
import { classifyRequest, isRetryable, type RequestClass } from './route-class.ts';
import { type RetryReason, retryReasonOf } from './router-stats.ts';
import { CONNECT_FAILURES, noGateway, OWN_FAILURES, unrelayableHead, upstreamFailure } from './upstream-errors.ts';

/** One try of a request against one gateway. */
export interface Attempt {
  readonly backend: BackendView;
  readonly number: number;
  responded: boolean;
  done: boolean;
  /** The exchange with the gateway. */
  upstream?: UpstreamCall;
  /** The idle sweep's last look at the exchange (proxy-handler.ts). */
  idleBytes: number;
  idleSince: number;
  /** Its place in the idle sweep's list (-1: not watched). */
  slot: number;
  /** The attempt is over: it no longer counts against its gateway nor is watched for silence. */
  release(): void;
  /** It no longer counts against its gateway (least-active choice); the idle watch goes on. */
  releaseSlot(): void;
  onResponse(response: UpstreamResponse): void;
}

/**
 * The exchange with one gateway as an attempt sees it, whichever client carries it (GET over
 * undici, everything else over node:http: proxy-handler.ts says why).
 */
export interface UpstreamCall {
  /** Bytes moved either way so far; -1 while it waits for its connection (the idle sweep's input). */
  moved(): number;
  /** Cuts the exchange and its connection; the attempt's error callback hears `err` if nothing ended it before. */
  destroy(err?: Error): void;
  /**
   * The client, not the gateway, holds the exchange now: it has yet to send body bytes the router
   * is ready to pass on, or it has not taken the answer's bytes already relayed. Such silence is
   * the client's, bounded by the front door's body and send timeouts, never the idle sweep's.
   */
  waitsOnClient(): boolean;
}

/** A gateway's response head, its body still to come. */
export interface UpstreamResponse {
  readonly status: number;
  /** The head as received: name, value, … (hop-by-hop headers included). */
  readonly rawHeaders: readonly string[];
  /** The parsed `Connection` header, for the names it lists. */
  readonly connection: string | string[] | undefined;
  /**
   * Streams the body into `res` with backpressure and ends `res`; `done` is called once, with an
   * error when the body was cut (then `res` is not ended).
   */
  relayTo(res: ServerResponse, done: (err?: Error) => void): void;
  /**
   * Reads the body and drops it, so the connection stays reusable; `done` is called once, when the
   * body ended or was cut (until then the attempt stays under the idle timeout).
   */
  discard(done: () => void): void;
  /** Drops the body and the connection. */
  destroy(): void;
}

export interface RequestOutcome {
  kind: RequestClass;
  backend: string | undefined;
  attempts: number;
}

/** What every attempt sends upstream, worked out once per client request. */
export interface Upstream {
  /** End-to-end request headers plus the forwarding ones, as a flat name, value, … list. */
  readonly headers: string[];
  /** The client asked for `100 Continue`: the gateway is asked too and its 100 relayed. */
  readonly expectsContinue: boolean;
  /** The request announces a body (a non-zero Content-Length or Transfer-Encoding). */
  readonly hasBody: boolean;
  /**
   * The id the client's answer carries (its own sane `X-Request-Id`, else the router's), in place
   * of the gateway's (which echoes the router's id it was sent: forwarded.ts).
   */
  readonly answerId: string;
}

/** What a request needs from the handler that owns the agents and the pool. */
export interface Relay {
  readonly pool: BackendPool;
  readonly idleTimeoutMs: number;
  /**
   * Sends the request to `attempt.backend` (setting `attempt.upstream`); `onError` hears a failure
   * before or during the response, `attempt.onResponse` the response head.
   */
  forward(
    req: IncomingMessage,
    res: ServerResponse,
    upstream: Upstream,
    attempt: Attempt,
    onError: (err: Error) => void,
  ): void;
  /** The attempt is over (answered, failed, or its client went away): no more idle watch. */
  settled(attempt: Attempt): void;
  noteUnreachable(url: string, reason: string): void;
  /** A content read's outcome at `url`, for outlier detection (`failed`: the gateway's own failure). */
  recordRead(url: string, failed: boolean, log: () => Logger): void;
  /** A retry is made (counted). */
  countRetry(reason: RetryReason): void;
  /** Connecting failed for want of the router's own descriptors or ports (counted, logged within a budget). */
  noteOwnFailure(err: Error, log: () => Logger): void;
}

/** The first attempt excludes no gateway. */
const NO_EXCLUSIONS: ReadonlySet<string> = new Set();

export class ProxiedRequest {
  readonly outcome: RequestOutcome;
  readonly #relay: Relay;
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #upstream: Upstream;
  readonly #logFor: () => Logger;
  readonly #retryable: boolean;
  /** When the request arrived (monotonic ms; read only for a retryable request). */
  readonly #startedAt: number;
  #clientGone = false;
  #current: Attempt | undefined;
  /** A gateway whose 5xx head to this content read waits for the retry's answer to be judged. */
  #judging: string | undefined;

  constructor(relay: Relay, req: IncomingMessage, res: ServerResponse, upstream: Upstream, log: () => Logger) {
    this.#relay = relay;
    this.#req = req;
    this.#res = res;
    this.#upstream = upstream;
    this.#logFor = log;
    const method = req.method ?? 'GET';
    this.outcome = { kind: classifyRequest(method, req.url ?? '/'), backend: undefined, attempts: 0 };
    this.#retryable = isRetryable(method, {
      'content-length': req.headers['content-length'],
      'transfer-encoding': req.headers['transfer-encoding'],
    });
    this.#startedAt = this.#retryable ? performance.now() : 0;
    // One listener for every attempt.
    res.once('close', () => {
      const current = this.#current;
      if (!res.writableFinished) {
        // The client went away (or was cut): the gateway must not keep sending.
        this.#clientGone = true;
        if (current && !current.done) current.upstream?.destroy();
      }
      current?.release();
    });
    // The client's body ended early (it went away, or stalled and was answered 408 here): the
    // gateway must not keep waiting for the rest. (Without a body there is nothing to wait for.)
    // Also once the answer is relayed: the request to the gateway never ends, so its connection
    // would stay out of the pool, counted nowhere, until the gateway closes it. An HTTP/2 client
    // gets there by sending all its Content-Length bytes but no END_STREAM: the gateway reads the
    // whole body and answers, the router's stream is reset after the answer (an early answer to it),
    // and each such stream held a gateway connection for the gateway's keep-alive timeout.
    if (upstream.hasBody)
      req.once('close', () => {
        if (!req.complete) this.#current?.upstream?.destroy();
      });
  }

  /** Starts the first attempt. */
  run(): RequestOutcome {
    this.#start(NO_EXCLUSIONS, undefined);
    return this.outcome;
  }

  #fail(err: GatewayError): void {
    if (this.#clientGone) return;
    const res = this.#res;
    if (!res.headersSent) res.setHeader('x-request-id', this.#upstream.answerId);
    sendError(res, err, this.#logFor());
  }

  #start(excluded: ReadonlySet<string>, previousError: GatewayError | undefined): void {
    const { pool } = this.#relay;
    const backend = pool.pick(this.outcome.kind, excluded);
    if (!backend) {
      this.#fail(previousError ?? noGateway(this.outcome.kind));
      return;
    }
    this.outcome.backend = backend.url;
    this.outcome.attempts++;
    const releaseSlot = pool.acquire(backend.url);
    const attempt: Attempt = {
      backend,
      number: this.outcome.attempts,
      responded: false,
      done: false,
      idleBytes: -1,
      idleSince: 0,
      slot: -1,
      releaseSlot,
      release: () => {
        releaseSlot();
        this.#relay.settled(attempt);
      },
      onResponse: (response) => this.#onResponse(attempt, excluded, response),
    };
    this.#current = attempt;
    this.#relay.forward(this.#req, this.#res, this.#upstream, attempt, (err) => this.#onError(attempt, excluded, err));
  }

  #onResponse(attempt: Attempt, excluded: ReadonlySet<string>, response: UpstreamResponse): void {
    const res = this.#res;
    const { backend } = attempt;
    // Done, or the client was already answered here (a 408 for its stalled body).
    if (attempt.done || res.headersSent) {
      response.destroy();
      return;
    }
    attempt.responded = true;
    const { status } = response;
    const read = this.outcome.kind === 'content-read';
    // A gateway whose store failed (502/504), or that is draining or cut off from its store (503),
    // answers before any payload: another gateway may serve the same bytes.
    const reason = retryReasonOf(status);
    if (reason !== undefined && this.#mayRetry(attempt)) {
      const next = new Set([...excluded, backend.url]);
      const other = this.#relay.pool.pick(this.outcome.kind, next);
      if (other) {
        // Whose failure this is, the other gateway's answer says (#judgeHead).
        if (read) this.#judging = backend.url;
        attempt.done = true;
        attempt.releaseSlot();
        // Watched until the dropped body is in: a gateway that stalls it is cut by the idle sweep,
        // never left holding a connection.
        response.discard(() => attempt.release());
        this.#relay.countRetry(reason);
        this.#logFor().info(
          { backend: backend.url, status, next: other.url },
          `gateway answered ${status} before the body; retrying once elsewhere`,
        );
        this.#start(next, undefined);
        return;
      }
    }
    if (read) this.#judgeHead(backend.url, status);
    // A raw list, with no header set on `res` before: node:http writes it without a header object.
    try {
      res.writeHead(status, responseHeaderList(response.rawHeaders, response.connection, this.#upstream.answerId));
    } catch (err) {
      // A head an HTTP/1.1 gateway may send but node:http2 refuses to carry (a single-value header
      // twice, a status over 599): a 502 for this request, never a throw out of the HTTP client's
      // callback (an uncaught one ends the process; undici's swallowing one leaves the client waiting).
      attempt.done = true;
      response.destroy();
      attempt.release();
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      this.#logFor().warn(
        { backend: backend.url, status, err: (err as Error).message },
        "gateway's answer cannot be carried over the client's connection; answered 502",
      );
      this.#fail(unrelayableHead(err));
      return;
    }
    // A body cut short (reset, gateway killed) ends with an error: never end the client's cleanly then.
    response.relayTo(res, (err) => {
      if (attempt.done) return;
      attempt.done = true;
      attempt.release();
      if (err && !this.#clientGone) {
        this.#logFor().warn(
          { backend: backend.url, err: err.message },
          'upstream failed in the middle of the body; client response destroyed',
        );
        res.destroy();
      }
    });
  }

  /**
   * Outlier detection's input from a content read's final head. Below 500 the gateway served, and a
   * first gateway whose 5xx was retried here failed where another did not: that one counts. A 5xx
   * (500 is never retried; the retry's own 5xx; no other gateway to ask) counts against nobody:
   * what fails the same on every gateway (a damaged object: 502 `slice_digest_mismatch`; one slow
   * object: 504 `upstream_timeout`; a store down for all: 503 `store_unreachable`) is no gateway's
   * fault, and a 5xx compared with nothing cannot tell.
   */
  #judgeHead(url: string, status: number): void {
    const judged = this.#judging;
    this.#judging = undefined;
    if (status >= 500) return;
    if (judged !== undefined) this.#relay.recordRead(judged, true, this.#logFor);
    this.#relay.recordRead(url, false, this.#logFor);
  }

  /** The first attempt of a bodiless GET/HEAD whose client is still there, within its budget. */
  #mayRetry(attempt: Attempt): boolean {
    return (
      this.#retryable &&
      attempt.number === 1 &&
      !this.#clientGone &&
      performance.now() - this.#startedAt < this.#relay.idleTimeoutMs
    );
  }

  #onError(attempt: Attempt, excluded: ReadonlySet<string>, err: Error): void {
    const res = this.#res;
    const { backend } = attempt;
    if (attempt.done) return;
    attempt.done = true;
    attempt.release();
    if (attempt.responded) {
      // Headers are out: never end it cleanly.
      res.destroy();
      return;
    }
    // The client is gone, or was already answered here (a 408 for a stalled body): nothing to report.
    if (this.#clientGone || res.writableEnded) return;
    const mapped = upstreamFailure(err, this.#relay.idleTimeoutMs);
    // The client's fault, whichever gateway is tried: answered once, at info, no stack.
    if (mapped.code === 'malformed_request') {
      this.#logFor().info({ code: mapped.code, err: err.message }, 'request refused by the HTTP client');
      this.#fail(mapped);
      return;
    }
    // No answer at all is the gateway's own failure (its process, its host, its link). A 5xx a
    // first gateway gave stays uncounted: the one compared with it did not answer.
    this.#judging = undefined;
    // The router's own shortage, not the gateway's: not held against it, not retried, a 503 not
    // logged per request (a shortage fails thousands at once).
    if (OWN_FAILURES.has((err as NodeJS.ErrnoException).code ?? '')) {
      this.#relay.noteOwnFailure(err, this.#logFor);
      this.#res.setHeader('x-request-id', this.#upstream.answerId);
      sendError(this.#res, mapped);
      return;
    }
    if (this.outcome.kind === 'content-read') this.#relay.recordRead(backend.url, true, this.#logFor);
    // Only a failed connect says the gateway is down; a reset or a silence may be one request's.
    if (CONNECT_FAILURES.has((err as NodeJS.ErrnoException).code ?? ''))
      this.#relay.noteUnreachable(backend.url, `cannot connect: ${err.message}`);
    if (this.#mayRetry(attempt)) {
      const next = new Set([...excluded, backend.url]);
      const other = this.#relay.pool.pick(this.outcome.kind, next);
      if (other) {
        this.#relay.countRetry('connection');
        this.#logFor().info(
          { backend: backend.url, err: err.message, next: other.url },
          'gateway failed before answering; retrying once elsewhere',
        );
        this.#start(next, mapped);
        return;
      }
    }
    this.#logFor().warn(
      { backend: backend.url, err: err.message, code: mapped.code },
      'gateway failed before answering',
    );
    this.#fail(mapped);
  }
}
