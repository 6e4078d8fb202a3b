/**
 * Sends one client request to a gateway through http-proxy-3 over keep-alive agents and streams
 * the answer back. Guarantees:
 * - bodies stream both ways with backpressure (pipe/pipeline), never buffered, never through fetch;
 * - a client that goes away aborts the upstream request (http-proxy-3 destroys it on `close`, and
 *   the response pipeline destroys the upstream response);
 * - an upstream failure after the response head was sent destroys the client response, so a cut
 *   body never looks complete (the client resumes with Range);
 * - a GET/HEAD without body whose gateway fails before answering (connect error, reset, timeout,
 *   or a 503 from a gateway that stopped serving) is sent once more to another healthy gateway
 *   (proxied-request.ts);
 * - redirects are passed through, never followed.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import { createProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import type { BackendPool, PoolChange } from './backend-pool.ts';
import { buildUpstreamHeaders, type TrustedProxies } from './forwarded.ts';
import { type Attempt, ProxiedRequest, type Relay, type RequestOutcome } from './proxied-request.ts';
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

export function createProxyHandler(options: ProxyHandlerOptions): ProxyHandler {
  const agentOptions: http.AgentOptions = {
    keepAlive: true,
    keepAliveMsecs: 1000,
    maxFreeSockets: 256,
    scheduling: 'lifo',
  };
  const agents = { http: new http.Agent(agentOptions), https: new https.Agent(agentOptions) };
  const proxy = createProxyServer({
    selfHandleResponse: true,
    xfwd: false,
    followRedirects: false,
    connectTimeout: options.connectTimeoutMs,
  });
  const attempts = new WeakMap<IncomingMessage, Attempt>();
  /** Requests whose client sent `Expect: 100-continue` (the header itself is not forwarded as is). */
  const expectsContinue = new WeakSet<IncomingMessage>();
  // Parsed once per gateway instead of once per request.
  const targets = new Map<string, URL>();
  const targetOf = (url: string): URL => {
    let target = targets.get(url);
    if (!target) targets.set(url, (target = new URL(url)));
    return target;
  };

  proxy.on('proxyReq', (proxyReq, req, res) => {
    const attempt = attempts.get(req);
    if (attempt) attempt.upstream = proxyReq;
    // The gateway decides whether the body is wanted (auth, size, admission); relay its 100.
    if (expectsContinue.has(req) && !proxyReq.headersSent) {
      // Expect is hop-by-hop (stripped from the upstream headers): ask the gateway again and relay
      // its 100. No body byte comes before it, so the head goes out now.
      proxyReq.setHeader('expect', '100-continue');
      proxyReq.once('continue', () => (res as ServerResponse).writeContinue());
      proxyReq.flushHeaders();
    }
    proxyReq.setTimeout(options.idleTimeoutMs, () =>
      proxyReq.destroy(
        new UpstreamTimeout(`no byte from ${attempt?.backend.url ?? 'the gateway'} for ${options.idleTimeoutMs} ms`),
      ),
    );
  });
  proxy.on('proxyRes', (proxyRes, req) => {
    attempts.get(req)?.onResponse(proxyRes);
  });

  const relay: Relay = {
    pool: options.pool,
    idleTimeoutMs: options.idleTimeoutMs,
    forward(req, res, attempt, onError) {
      attempts.set(req, attempt);
      const url = attempt.backend.url;
      proxy.web(
        req,
        res,
        { target: targetOf(url), agent: url.startsWith('https:') ? agents.https : agents.http },
        onError,
      );
    },
    noteUnreachable(url, reason) {
      const change = options.pool.markUnreachable(url, reason);
      if (change) options.onPoolChange?.(change);
    },
  };

  return {
    handle(req, res, reqId, log) {
      const request = new ProxiedRequest(relay, req, res, log);
      if (typeof req.headers.expect === 'string' && req.headers.expect.toLowerCase() === '100-continue')
        expectsContinue.add(req);
      req.headers = buildUpstreamHeaders({
        headers: req.headers,
        remoteAddress: req.socket.remoteAddress,
        encrypted: 'encrypted' in req.socket && req.socket.encrypted === true,
        trusted: options.trusted,
        requestId: reqId,
      }) as http.IncomingHttpHeaders;
      return request.run();
    },
    close() {
      proxy.close();
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
