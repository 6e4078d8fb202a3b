/**
 * Sends one client request to a gateway with node:http over keep-alive agents and streams the
 * answer back. Guarantees:
 * - bodies stream both ways with backpressure (pipe), never buffered, never through fetch;
 * - a client that goes away aborts the upstream request (proxied-request.ts destroys it when the
 *   client's response closes unfinished or its body ends early);
 * - an upstream failure after the response head was sent destroys the client response, so a cut
 *   body never looks complete (the client resumes with Range);
 * - a GET/HEAD without body whose gateway fails before answering (connect error, reset, timeout,
 *   or a 503 from a gateway that stopped serving) is sent once more to another healthy gateway
 *   (proxied-request.ts);
 * - redirects are passed through, never followed.
 *
 * Why node:http and not a proxy library (docs/router.md, "Proxying"): what the router needs from
 * one is the few lines of `forward` below, and http-proxy-3's per-request work (options and header
 * objects copied, `debug` calls, listeners per pass) was most of the router's CPU above a bare
 * node:http proxy on 4 KiB answers.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { RELEASE_MIN_BYTES, releaseBuffer } from '../../lib/release-buffer.ts';
import { announcesBody } from '../server/front-door.ts';
import type { BackendPool, PoolChange } from './backend-pool.ts';
import { buildUpstreamHeaders, type HopCache, type TrustedProxies } from './forwarded.ts';
import { relayChunks } from './relay-chunks.ts';
import { ProxiedRequest, type Relay, type RequestOutcome, type Upstream } from './proxied-request.ts';
import { UpstreamTimeout } from './upstream-errors.ts';

export type { RequestOutcome } from './proxied-request.ts';

export interface ProxyHandlerOptions {
  pool: BackendPool;
  trusted: TrustedProxies;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
  onPoolChange?: (change: PoolChange) => void;
}

export interface ProxyHandler {
  /** `log` gives the request's logger (made on first use: most requests log nothing through it). */
  handle(req: IncomingMessage, res: ServerResponse, reqId: string, log: () => Logger): RequestOutcome;
  close(): void;
}

/** One gateway as the router reaches it, parsed once. */
interface Target {
  readonly request: typeof http.request;
  readonly agent: http.Agent;
  readonly hostname: string;
  readonly port: number;
  /** `host:port` for a request that came without `Host` (HTTP/1.0). */
  readonly host: string;
}

/**
 * A new connection that is not established within `ms` is destroyed with `ECONNECT_TIMEOUT` (a
 * connect failure: the gateway leaves the pool). Armed once per connection in the agent, so a
 * reused keep-alive connection costs nothing here.
 */
function withConnectTimeout<A extends http.Agent>(agent: A, ms: number): A {
  const create = agent.createConnection.bind(agent);
  agent.createConnection = (options, callback) => {
    const socket = create(options, callback) as Socket | null | undefined;
    if (!socket?.connecting || ms <= 0) return socket;
    const timer = setTimeout(() => {
      const err = Object.assign(new Error('ECONNECT_TIMEOUT'), { code: 'ECONNECT_TIMEOUT' });
      socket.destroy(err);
    }, ms);
    timer.unref();
    const clear = () => clearTimeout(timer);
    socket.once('connect', clear);
    socket.once('close', clear);
    return socket;
  };
  return agent;
}

/**
 * Every socket the agent opens to a gateway frees each large read once node:http's parser has taken
 * what it needs from it (lib/release-buffer.ts says why that matters). The parser copies a
 * response's body out of the read (the copies are relayed and freed in proxied-request.ts) and keeps
 * nothing of the read itself; release-reads.int.test.ts checks that, so a Node that stopped copying
 * fails it. Node adds the parser's 'data' listener anew for each request on a keep-alive socket, so
 * ours may run before it: the release waits for a microtask, after the whole 'data' emit.
 */
export function withReleasedReads<A extends http.Agent>(agent: A): A {
  const create = agent.createConnection.bind(agent);
  agent.createConnection = (options, callback) => {
    const socket = create(options, callback) as Socket | null | undefined;
    socket?.on('data', releaseAfterParsing);
    return socket;
  };
  return agent;
}

function releaseAfterParsing(read: Buffer): void {
  if (read.byteLength >= RELEASE_MIN_BYTES) queueMicrotask(() => releaseBuffer(read));
}

/** An attempt as the idle sweep sees it. */
interface Watched {
  readonly upstream?: http.ClientRequest | undefined;
  readonly backend: { readonly url: string };
  /** Bytes the upstream socket had moved at the last sweep that saw them change, and when. */
  idleBytes?: number;
  idleSince?: number;
  /** Where the sweep keeps it (-1: not watched). */
  slot?: number;
}

/**
 * The idle timeout of every upstream request in flight (no byte either way for `idleTimeoutMs`):
 * one sweep every quarter of the timeout (at most 1 s, at least 50 ms) compares each socket's byte
 * counters with the last sweep's. A per-request socket timeout (`setTimeout`) would instead arm a
 * timer and two listeners per request and refresh the timer on every read and write. A silence is
 * never cut before `idleTimeoutMs`, and at most two sweeps after it. A connect in progress is not
 * silence: the connect timeout covers it.
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
      const socket = attempt.upstream?.socket;
      const bytes = socket && !socket.connecting ? socket.bytesRead + socket.bytesWritten : -1;
      if (bytes === -1 || bytes !== attempt.idleBytes) {
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

export function createProxyHandler(options: ProxyHandlerOptions): ProxyHandler {
  const agentOptions: http.AgentOptions = {
    keepAlive: true,
    keepAliveMsecs: 1000,
    maxFreeSockets: 256,
    scheduling: 'lifo',
  };
  const agents = {
    http: withConnectTimeout(withReleasedReads(new http.Agent(agentOptions)), options.connectTimeoutMs),
    https: withConnectTimeout(withReleasedReads(new https.Agent(agentOptions)), options.connectTimeoutMs),
  };
  const { idleTimeoutMs } = options;
  const idle = createIdleSweep(idleTimeoutMs, (attempt) =>
    attempt.upstream?.destroy(new UpstreamTimeout(`no byte from ${attempt.backend.url} for ${idleTimeoutMs} ms`)),
  );
  // Parsed once per gateway instead of once per request.
  const targets = new Map<string, Target>();
  const targetOf = (url: string): Target => {
    let target = targets.get(url);
    if (!target) {
      const parsed = new URL(url);
      const secure = parsed.protocol === 'https:';
      const port = Number(parsed.port) || (secure ? 443 : 80);
      // WHATWG URLs keep IPv6 brackets in `hostname`; a socket address has none.
      const hostname = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
      target = {
        request: secure ? https.request : http.request,
        agent: secure ? agents.https : agents.http,
        hostname,
        port,
        host: parsed.host,
      };
      targets.set(url, target);
    }
    return target;
  };

  const relay: Relay = {
    pool: options.pool,
    idleTimeoutMs,
    forward(req, res, upstream, attempt, onError) {
      const target = targetOf(attempt.backend.url);
      const proxyReq = target.request({
        hostname: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        // A head given as a list gets no Host from node:http: the gateway's, as before, when the client sent none.
        headers: upstream.host === undefined ? [...upstream.headers, 'host', target.host] : upstream.headers,
        agent: target.agent,
      });
      attempt.upstream = proxyReq;
      proxyReq.on('error', onError);
      proxyReq.on('response', (proxyRes) => attempt.onResponse(proxyRes));
      idle.watch(attempt);
      // The gateway decides whether the body is wanted (auth, size, admission): the head carries
      // `Expect: 100-continue` and goes out now; the gateway's 100 is relayed, then the body flows.
      if (upstream.expectsContinue) proxyReq.once('continue', () => res.writeContinue());
      if (upstream.hasBody) {
        relayChunks(req, proxyReq);
        req.on('end', () => proxyReq.end());
      } else proxyReq.end();
    },
    settled(attempt) {
      idle.unwatch(attempt);
    },
    noteUnreachable(url, reason) {
      const change = options.pool.markUnreachable(url, reason);
      if (change) options.onPoolChange?.(change);
    },
  };

  return {
    handle(req, res, reqId, log) {
      const { headers, socket } = req;
      const expectsContinue = typeof headers.expect === 'string' && headers.expect.toLowerCase() === '100-continue';
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
      const hasBody = announcesBody(req);
      const host = headers.host;
      // The id goes back with every answer; for a request with a body set now, so that an answer
      // the front door gives (408 for a stalled body) carries it too. Bodiless requests leave `res`
      // untouched: writeHead with a raw list and nothing set before is node:http's fast path.
      if (hasBody) res.setHeader('x-request-id', reqId);
      const upstream: Upstream = { headers: list, host, expectsContinue, hasBody, requestId: reqId };
      return new ProxiedRequest(relay, req, res, upstream, log).run();
    },
    close() {
      idle.close();
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
