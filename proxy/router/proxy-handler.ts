/**
 * Sends one client request to a gateway over keep-alive connections and streams the answer back.
 * Guarantees:
 * - bodies stream both ways with backpressure, never buffered, never through fetch;
 * - a client that goes away aborts the upstream request (proxied-request.ts destroys it when the
 *   client's response closes unfinished or its body ends early);
 * - an upstream failure after the response head was sent destroys the client response, so a cut
 *   body never looks complete (the client resumes with Range);
 * - a GET/HEAD without body whose gateway fails before any byte was relayed (connect error, reset,
 *   timeout, or a 502/503/504 head) is sent once more to another healthy gateway (proxied-request.ts);
 * - content reads feed outlier detection with the gateway's own failures only (proxied-request.ts,
 *   backend-pool.ts, outlier-detector.ts);
 * - redirects are passed through, never followed.
 *
 * Two clients, one per kind of request: a GET goes through undici's dispatcher
 * (dispatched-exchange.ts: the read path, cheaper per small request than node:http's client);
 * everything else (uploads with `Expect: 100-continue`, HEAD, DELETE) through node:http
 * (node-exchange.ts says why). Why not a proxy library (docs/router.md, "Proxying"): what the router
 * needs from one is these few lines, and a library's per-request work (options and header objects
 * copied, `debug` calls, listeners per pass) would cost more than the relay itself on small answers.
 */
import type { Agent, AgentOptions, IncomingMessage, ServerResponse } from 'node:http';
import http from '../../lib/node-http.ts';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { type Dispatcher, Pool } from 'undici';
import { announcesBody } from '../server/front-door.ts';
import type { BackendPool, PoolChange } from './backend-pool.ts';
import { DispatchedExchange } from './dispatched-exchange.ts';
import { buildUpstreamHeaders, type HopCache, type TrustedProxies } from './forwarded.ts';
import { sendOverNode, type NodeTarget } from './node-exchange.ts';
import {
  ProxiedRequest,
  type Relay,
  type RequestOutcome,
  type Upstream,
  type UpstreamCall,
} from './proxied-request.ts';
import { classifyRequest } from './route-class.ts';
import type { RouterStats } from './router-stats.ts';
import { ConnectTimeout, UpstreamTimeout } from './upstream-errors.ts';
import { gatewayConnector } from './gateway-connector.ts';
import { type ClosableTarget, createUpstreamTargets } from './upstream-targets.ts';
import { LogBudget } from '../../lib/log-budget.ts';
import { knownMethod } from '../../lib/http-method.ts';
import type { ClientFaults } from './client-faults.ts';
import { HEAD_TOO_LARGE, upstreamHeadBytes } from './forwardable.ts';

/**
 * An `Expect` asking for `100 Continue`, as node:http's server reads it (its `continueExpression`):
 * every request it hands over as `checkContinue` waits for a 100 only the gateway can give.
 */
const CONTINUE_EXPECTED = /(?:^|\W)100-continue(?:$|\W)/i;

/** Lines per minute for the router's own shortage of descriptors or ports (docs/router.md). */
export const OWN_FAILURE_LOG = { linesPerInterval: 5, intervalMs: 60_000 } as const;

export type { RequestOutcome } from './proxied-request.ts';

export interface ProxyHandlerOptions {
  pool: BackendPool;
  trusted: TrustedProxies;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
  onPoolChange?: (change: PoolChange) => void;
  /** Retries and ejections are counted here (the router's metrics read it). */
  stats: RouterStats;
  /** Answers a request that cannot be forwarded (a head too large for the gateways). */
  faults: ClientFaults;
  /**
   * What a gateway's parser takes (`upstreamHeadBytes` below it): node:http's `maxHeaderSize`, the
   * same Node as the router's unless `--max-http-header-size` differs between them.
   */
  maxHeadBytes?: number;
}

export interface ProxyHandler {
  /**
   * `ids.reqId` (the router's own) is forwarded as `x-request-id`; `ids.answerId` (the client's
   * sane id, else the router's) is the one its answer carries. `log` gives the request's logger
   * (made on first use: most requests log nothing through it). `traceHeaders`: the trace context
   * that replaces the client's `traceparent`/`tracestate` (the router's own span's, or none);
   * undefined passes the client's on as they are. `ids.clientReqId`: the client's sane id, for a
   * refusal's line.
   */
  handle(
    req: IncomingMessage,
    res: ServerResponse,
    ids: { readonly reqId: string; readonly answerId: string; readonly clientReqId?: string | undefined },
    log: () => Logger,
    traceHeaders?: readonly string[],
  ): RequestOutcome;
  close(): void;
}

/** One gateway as the router reaches it, parsed once. */
interface Target extends NodeTarget, ClosableTarget {
  /** GETs go through it (dispatched-exchange.ts). */
  readonly dispatcher: Pool;
  /**
   * undici's key for a request's TLS name, the same for every request to this gateway: left to it,
   * each client's Host would be one, and a request naming another than the connection's closes it.
   * The name checked is the connector's (gateway-connector.ts).
   */
  readonly servername: string;
}

/**
 * A new connection that is not established within `ms` is destroyed with `ECONNECT_TIMEOUT` (a
 * connect failure: the gateway leaves the pool). Armed once per connection in the agent, so a
 * reused keep-alive connection costs nothing here.
 */
function withConnectTimeout<A extends Agent>(agent: A, ms: number): A {
  const create = agent.createConnection.bind(agent);
  agent.createConnection = (options, callback) => {
    const socket = create(options, callback) as Socket | null | undefined;
    if (!socket?.connecting || ms <= 0) return socket;
    const timer = setTimeout(() => {
      socket.destroy(new ConnectTimeout(`no connection within ${ms} ms`));
    }, ms);
    timer.unref();
    const clear = () => clearTimeout(timer);
    socket.once('connect', clear);
    socket.once('close', clear);
    return socket;
  };
  return agent;
}

/** An attempt as the idle sweep sees it. */
interface Watched {
  readonly upstream?: UpstreamCall | undefined;
  readonly backend: { readonly url: string };
  /** Bytes the exchange had moved at the last sweep that saw them change, and when. */
  idleBytes?: number;
  idleSince?: number;
  /** Where the sweep keeps it (-1: not watched). */
  slot?: number;
}

/**
 * The idle timeout of every upstream request in flight (no byte either way for `idleTimeoutMs`):
 * one sweep every quarter of the timeout (at most 1 s, at least 50 ms) compares the bytes each
 * exchange has moved with the last sweep's. A per-request socket timeout (`setTimeout`) would instead arm a
 * timer and two listeners per request and refresh the timer on every read and write. A silence is
 * never cut before `idleTimeoutMs`, and at most two sweeps after it. A connect in progress is not
 * silence: the connect timeout covers it. Nor is a silence the client holds (`waitsOnClient`): cut
 * here, a client stalling its upload or its reading would get a 504 or a cut answer blamed on the
 * gateway (and count against it in outlier detection) whenever this timeout is the shorter one.
 *
 * The attempts are kept in an array (each knows its slot; the last one fills a removed one's slot),
 * not a `Set`: a long-lived Set with an add and a delete per request kept every request's objects
 * alive through V8's young-generation collections (a 4 KiB load promoted ~0.5 MiB per scavenge and
 * each scavenge took ~1.7 ms; with the array the heap stays flat and a scavenge takes ~0.5 ms).
 */
export function createIdleSweep(
  idleTimeoutMs: number,
  onIdle: (attempt: Watched) => void,
  now: () => number = () => performance.now(),
) {
  const tickMs = Math.max(50, Math.min(1000, Math.floor(idleTimeoutMs / 4)));
  const watched: Watched[] = [];
  let timer: NodeJS.Timeout | undefined;
  const remove = (attempt: Watched) => {
    const at = attempt.slot ?? -1;
    if (at < 0 || watched[at] !== attempt) return;
    const last = watched.pop()!;
    if (last !== attempt) {
      watched[at] = last;
      last.slot = at;
    }
    attempt.slot = -1;
  };
  const sweep = () => {
    const at = now();
    for (let i = watched.length - 1; i >= 0; i--) {
      const attempt = watched[i]!;
      const bytes = attempt.upstream?.moved() ?? -1;
      // A silence the client holds (its body still to come, or its answer not taken) is not the
      // gateway's: the front door's body and send timeouts cut that client.
      if (bytes === -1 || bytes !== attempt.idleBytes || attempt.upstream!.waitsOnClient()) {
        attempt.idleBytes = bytes;
        attempt.idleSince = at;
      } else if (at - attempt.idleSince! >= idleTimeoutMs) {
        remove(attempt);
        onIdle(attempt);
      }
    }
    if (watched.length === 0) {
      clearInterval(timer);
      timer = undefined;
    }
  };
  return {
    tickMs,
    sweep,
    watch(attempt: Watched): void {
      attempt.idleBytes = -1;
      attempt.idleSince = now();
      // Watched already (as a Set would have it): its silence counts from now, it is not added twice.
      if (attempt.slot !== undefined && watched[attempt.slot] === attempt) return;
      attempt.slot = watched.length;
      watched.push(attempt);
      if (timer === undefined) {
        timer = setInterval(sweep, tickMs);
        timer.unref();
      }
    },
    unwatch(attempt: Watched): void {
      remove(attempt);
    },
    get size(): number {
      return watched.length;
    },
    close(): void {
      watched.length = 0;
      clearInterval(timer);
      timer = undefined;
    },
  };
}

/**
 * A GET undici can carry as it came: no body, no `Expect` (undici's HTTP/1.1 client refuses the
 * header) and an origin-form target (it refuses `*`). Anything else goes over node:http.
 */
function viaDispatcher(req: IncomingMessage, upstream: Upstream): boolean {
  return req.method === 'GET' && !upstream.hasBody && !upstream.expectsContinue && req.url?.[0] === '/';
}

export function createProxyHandler(options: ProxyHandlerOptions): ProxyHandler {
  const agentOptions: AgentOptions = {
    keepAlive: true,
    keepAliveMsecs: 1000,
    maxFreeSockets: 256,
    scheduling: 'lifo',
    // node:http's agent drops a pooled connection ahead of the gateway's announced
    // `Keep-Alive: timeout=N` only when its sockets have a timeout of their own; without one it
    // kept them past it and sent requests on connections the gateway was closing ("socket hang
    // up", a 502 for an upload, which cannot be retried). On a socket in use the timeout only
    // emits an event nobody listens to: the idle sweep below decides. 2 s ahead, as undici.
    timeout: options.idleTimeoutMs,
    agentKeepAliveTimeoutBuffer: 2000,
  };
  const agents = {
    http: withConnectTimeout(new http.Agent(agentOptions), options.connectTimeoutMs),
    https: withConnectTimeout(new https.Agent(agentOptions), options.connectTimeoutMs),
  };
  const { idleTimeoutMs } = options;
  const idle = createIdleSweep(idleTimeoutMs, (attempt) =>
    attempt.upstream?.destroy(new UpstreamTimeout(`no byte from ${attempt.backend.url} for ${idleTimeoutMs} ms`)),
  );
  // Parsed once per gateway instead of once per request.
  const targets = createUpstreamTargets<Target>(
    (url) => options.pool.has(url),
    (url) => {
      const parsed = new URL(url);
      const secure = parsed.protocol === 'https:';
      const port = Number(parsed.port) || (secure ? 443 : 80);
      // WHATWG URLs keep IPv6 brackets in `hostname`; a socket address has none.
      const hostname = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
      const dispatcher = new Pool(parsed.origin, {
        // The gateway's certificate is checked against `hostname`, not the client's Host.
        connect: gatewayConnector(hostname, options.connectTimeoutMs),
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      return {
        request: secure ? https.request : http.request,
        agent: secure ? agents.https : agents.http,
        hostname,
        port,
        // No undici timeouts but the connect's: silence is the idle sweep's (it also sees uploads).
        dispatcher,
        servername: hostname,
        close: () => dispatcher.close(),
      };
    },
  );

  const ownFailureLog = new LogBudget(OWN_FAILURE_LOG);
  const maxHeadBytes = options.maxHeadBytes ?? http.maxHeaderSize;
  const relay: Relay = {
    pool: options.pool,
    idleTimeoutMs,
    forward(req, res, upstream, attempt, onError) {
      const target = targets.of(attempt.backend.url);
      // Watched before it starts: a request refused at once settles (and is unwatched) right away.
      idle.watch(attempt);
      if (viaDispatcher(req, upstream)) {
        const exchange = new DispatchedExchange({ onResponse: attempt.onResponse, onError });
        attempt.upstream = exchange;
        // The client's Host goes upstream as sent (empty when it sent none).
        const dispatch: Dispatcher.DispatchOptions & { servername: string } = {
          method: 'GET',
          path: req.url ?? '/',
          headers: upstream.headers,
          servername: target.servername,
        };
        target.dispatcher.dispatch(dispatch, exchange);
      } else {
        // The gateway decides whether a body is wanted (auth, size, admission): the head carries
        // `Expect: 100-continue` and goes out now; the gateway's 100 is relayed, then the body flows.
        attempt.upstream = sendOverNode(target, req, res, upstream, attempt.onResponse, onError);
      }
    },
    settled(attempt) {
      idle.unwatch(attempt);
    },
    noteUnreachable(url, reason) {
      const change = options.pool.markUnreachable(url, reason);
      if (change) options.onPoolChange?.(change);
    },
    recordRead(url, failed, log) {
      const ejection = options.pool.recordRead(url, failed);
      if (!ejection) return;
      options.stats.ejections++;
      log().warn(
        { backend: url, failuresInARow: ejection.failuresInARow, ejectedForMs: ejection.forMs },
        'gateway ejected from reads: consecutive failures of its own (no answer, or a 5xx another gateway did not give)',
      );
    },
    countRetry(reason) {
      options.stats.retries[reason]++;
    },
    noteOwnFailure(err, log) {
      options.stats.overloaded.descriptors++;
      const turn = ownFailureLog.take('descriptors', performance.now());
      if (!turn.write) return;
      log().error(
        { err: err.message, code: (err as NodeJS.ErrnoException).code, suppressed: turn.suppressed },
        'router out of descriptors or local ports: requests answered 503 (raise its descriptor limit or lower its load)',
      );
    },
  };

  return {
    handle(req, res, { reqId, answerId, clientReqId }, log, traceHeaders) {
      const { headers, socket } = req;
      // A connection reset under its request (sent, then RST at once) has a socket that no longer
      // reads its peer. Forwarded, the request named its client `unknown`, where a gateway that
      // trusts the router stops its walk: the router's own address, so the client chose it (its
      // DELETEs done and audited in the router's name, its failures counted against nobody). Its
      // client is gone and reads no answer: nothing is forwarded.
      if (socket.remoteAddress === undefined) {
        res.destroy();
        return { kind: classifyRequest(req.method ?? 'GET', req.url ?? '/'), backend: undefined, attempts: 0 };
      }
      // An HTTP/1.0 client's expectation is ignored (RFC 9110 §10.1.1), as a gateway's node:http
      // ignores it: relayed, the gateway's `100 Continue` would reach a client (or a proxy in front)
      // that reads it as the final answer and every later answer on the connection as the previous
      // request's (RFC 9110 §15.2: no 1xx to an HTTP/1.0 client).
      const expectsContinue =
        typeof headers.expect === 'string' &&
        CONTINUE_EXPECTED.test(headers.expect) &&
        !(req.httpVersionMajor === 1 && req.httpVersionMinor === 0);
      const list = buildUpstreamHeaders(
        {
          rawHeaders: req.rawHeaders,
          headers,
          remoteAddress: socket.remoteAddress,
          encrypted: (socket as { encrypted?: boolean }).encrypted === true,
          trusted: options.trusted,
          requestId: reqId,
        },
        socket as HopCache,
      );
      // Expect is hop-by-hop (stripped above): ask the gateway again, whose checks decide.
      if (expectsContinue) list.push('expect', '100-continue');
      // A request that named no authority (HTTP/1.0 without Host: node:http refuses an HTTP/1.1
      // one, node:http2 a stream without :authority or Host) goes on with an empty Host, as RFC 9112 §3.2 has a client send for a target without
      // one. Left to the HTTP clients, it carried the gateway's own address (undici's and
      // node:http's default), which the gateway then put in the answer: a pre-signed link to the
      // gateway's internal address, past the router.
      if (headers.host === undefined) list.push('host', '');
      if (traceHeaders) replaceTraceContext(list, traceHeaders);
      // A head the router took (HTTP/1.1 up to the same limit, an HTTP/2 header list up to
      // HTTP2_SETTINGS.maxHeaderListSize) may no longer fit a gateway once the forwarding headers
      // are in: the gateway would refuse it (400, no request line) and close its connection.
      if (upstreamHeadBytes(req.url ?? '/', list) >= maxHeadBytes) {
        options.faults.refuse(res, HEAD_TOO_LARGE, { reqId, clientReqId }, knownMethod(req.method));
        return { kind: classifyRequest(req.method ?? 'GET', req.url ?? '/'), backend: undefined, attempts: 0 };
      }
      const hasBody = announcesBody(req);
      // The id goes back with every answer; for a request with a body set now, so that an answer
      // the front door gives (408 for a stalled body) carries it too. Bodiless requests leave `res`
      // untouched: writeHead with a raw list and nothing set before is node:http's fast path.
      if (hasBody) res.setHeader('x-request-id', answerId);
      const upstream: Upstream = { headers: list, expectsContinue, hasBody, answerId };
      return new ProxiedRequest(relay, req, res, upstream, log).run();
    },
    close() {
      idle.close();
      agents.http.destroy();
      agents.https.destroy();
      targets.destroyAll((target) => void target.dispatcher.destroy().catch(() => {}));
    },
  };
}

/** The client's trace context out of `list`, `traceHeaders` (the router span's, or none) in. */
function replaceTraceContext(list: string[], traceHeaders: readonly string[]): void {
  for (let i = list.length - 2; i >= 0; i -= 2) {
    const name = list[i]!.toLowerCase();
    if (name === 'traceparent' || name === 'tracestate') list.splice(i, 2);
  }
  list.push(...traceHeaders);
}
