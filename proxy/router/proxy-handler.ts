/**
 * Sends one client request to a gateway through http-proxy-3 over keep-alive agents and streams
 * the answer back. Guarantees:
 * - bodies stream both ways with backpressure (pipe/pipeline), never buffered, never through fetch;
 * - a client that goes away aborts the upstream request (http-proxy-3 destroys it on `close`, and
 *   the response pipeline destroys the upstream response);
 * - an upstream failure after the response head was sent destroys the client response, so a cut
 *   body never looks complete (the client resumes with Range);
 * - a GET/HEAD without body whose gateway fails before answering (connect error, reset, timeout,
 *   or a 503 from a gateway that stopped serving) is sent once more to another healthy gateway;
 * - redirects are passed through, never followed.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import { createProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import { GatewayError } from '../server/errors.ts';
import { sendError } from '../server/http-errors.ts';
import type { BackendPool, BackendView, PoolChange } from './backend-pool.ts';
import { buildUpstreamHeaders, type TrustedProxies } from './forwarded.ts';
import { classifyRequest, isRetryable, type RequestClass } from './route-class.ts';

/** Hop-by-hop response headers; the router's own connection decides these. */
const HOP_BY_HOP_RESPONSE = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'trailer',
  'te',
]);

const CONNECT_FAILURES = new Set([
  'ECONNREFUSED',
  'ECONNECT_TIMEOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

class UpstreamTimeout extends Error {
  readonly code = 'ROUTER_UPSTREAM_IDLE';
}

export function responseHeadersFrom(headers: http.IncomingHttpHeaders): Record<string, string | string[]> {
  const named = new Set(
    String(headers.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter(Boolean),
  );
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP_RESPONSE.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

interface Attempt {
  readonly backend: BackendView;
  readonly number: number;
  responded: boolean;
  done: boolean;
  /** The request to the gateway, once it has a socket. */
  upstream?: http.ClientRequest;
  release(): void;
  onResponse(proxyRes: IncomingMessage): void;
}

export interface ProxyHandlerOptions {
  pool: BackendPool;
  trusted: TrustedProxies;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
  onPoolChange?: (change: PoolChange) => void;
}

export interface RequestOutcome {
  kind: RequestClass;
  backend: string | undefined;
  attempts: number;
}

export interface ProxyHandler {
  handle(req: IncomingMessage, res: ServerResponse, reqId: string, log: Logger): RequestOutcome;
  close(): void;
}

export function createProxyHandler(options: ProxyHandlerOptions): ProxyHandler {
  const { pool } = options;
  const agents = {
    http: new http.Agent({ keepAlive: true, keepAliveMsecs: 1000, maxFreeSockets: 256, scheduling: 'lifo' }),
    https: new https.Agent({ keepAlive: true, keepAliveMsecs: 1000, maxFreeSockets: 256, scheduling: 'lifo' }),
  };
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

  const noteUnreachable = (url: string, reason: string) => {
    const change = pool.markUnreachable(url, reason);
    if (change) options.onPoolChange?.(change);
  };

  function handle(req: IncomingMessage, res: ServerResponse, reqId: string, log: Logger): RequestOutcome {
    const kind = classifyRequest(req.method ?? 'GET', req.url ?? '/');
    const outcome: RequestOutcome = { kind, backend: undefined, attempts: 0 };
    const retryable = isRetryable(req.method ?? 'GET', {
      'content-length': req.headers['content-length'],
      'transfer-encoding': req.headers['transfer-encoding'],
    });
    let clientGone = false;
    let current: Attempt | undefined;
    // One listener for every attempt: http-proxy-3 and pipeline add their own per attempt.
    res.once('close', () => {
      if (!res.writableFinished) clientGone = true;
      current?.release();
    });
    // The client's body ended early (it went away, or stalled and was answered 408 here): the
    // gateway must not keep waiting for the rest.
    req.once('close', () => {
      if (!req.complete && current && !current.done) current.upstream?.destroy();
    });
    if (typeof req.headers.expect === 'string' && req.headers.expect.toLowerCase() === '100-continue')
      expectsContinue.add(req);
    req.headers = buildUpstreamHeaders({
      headers: req.headers,
      remoteAddress: req.socket.remoteAddress,
      encrypted: 'encrypted' in req.socket && req.socket.encrypted === true,
      trusted: options.trusted,
      requestId: reqId,
    }) as http.IncomingHttpHeaders;

    const fail = (err: GatewayError) => {
      if (clientGone) return;
      sendError(res, err, log);
    };

    const start = (excluded: Set<string>, previousError: GatewayError | undefined) => {
      const backend = pool.pick(kind, excluded);
      if (!backend) {
        if (previousError) return fail(previousError);
        return fail(
          new GatewayError(
            'unavailable',
            kind === 'content-read'
              ? 'No gateway is healthy; try again shortly.'
              : 'The writer is not available; reads keep working, writes must wait until it is back.',
            { headers: { 'retry-after': '2' } },
          ),
        );
      }
      outcome.backend = backend.url;
      outcome.attempts++;
      const releaseCount = pool.acquire(backend.url);
      const attempt: Attempt = {
        backend,
        number: outcome.attempts,
        responded: false,
        done: false,
        release: releaseCount,
        onResponse(proxyRes) {
          // Done, or the client was already answered here (a 408 for its stalled body).
          if (attempt.done || res.headersSent) {
            proxyRes.destroy();
            return;
          }
          attempt.responded = true;
          const status = proxyRes.statusCode ?? 502;
          // A gateway that stopped serving (draining, fenced) answers 503 before any payload.
          if (status === 503 && retryable && attempt.number === 1 && !clientGone) {
            const other = pool.pick(kind, new Set([...excluded, backend.url]));
            if (other) {
              attempt.done = true;
              proxyRes.resume();
              attempt.release();
              noteUnreachable(backend.url, 'answered 503 to a proxied request');
              log.info(
                { backend: backend.url, next: other.url },
                'gateway answered 503 before the body; retrying once elsewhere',
              );
              start(new Set([...excluded, backend.url]), undefined);
              return;
            }
          }
          res.writeHead(status, responseHeadersFrom(proxyRes.headers));
          // pipe() plus explicit ends rather than stream.pipeline(): pipeline creates and aborts an
          // AbortController per call (a DOMException with a stack per response, about 5 % of the
          // router's CPU on small answers), and stacked enough close listeners on the response to
          // trip the leak warning (an Error and a stderr write per response).
          const end = (err?: Error) => {
            if (attempt.done) return;
            attempt.done = true;
            attempt.release();
            if (err && !clientGone) {
              log.warn(
                { backend: backend.url, err: err.message },
                'upstream failed in the middle of the body; client response destroyed',
              );
              res.destroy();
            }
          };
          proxyRes.on('error', end);
          // A body cut short (reset, gateway killed) closes without `complete`: never end the client's cleanly.
          proxyRes.once('close', () => {
            if (!proxyRes.complete) end(new Error('the gateway closed the connection before the end of the body'));
          });
          res.once('finish', () => end());
          proxyRes.pipe(res);
        },
      };
      attempts.set(req, attempt);
      current = attempt;
      proxy.web(
        req,
        res,
        { target: targetOf(backend.url), agent: backend.url.startsWith('https:') ? agents.https : agents.http },
        (err) => {
          if (attempt.done) return;
          if (attempt.responded) {
            // Headers are out: never end it cleanly. The pipeline callback logs.
            attempt.done = true;
            attempt.release();
            res.destroy();
            return;
          }
          attempt.done = true;
          attempt.release();
          // The client is gone, or was already answered here (a 408 for a stalled body): nothing to report.
          if (clientGone || res.writableEnded) return;
          const timedOut = err instanceof UpstreamTimeout;
          const mapped = timedOut
            ? new GatewayError(
                'upstream_timeout',
                `The gateway did not answer within ${Math.round(options.idleTimeoutMs / 1000)} s.`,
                { cause: err },
              )
            : new GatewayError('upstream_unreachable', 'The gateway could not be reached.', { cause: err });
          // Only a failed connect says the gateway is down; a reset or a silence may be one request's.
          if (CONNECT_FAILURES.has((err as NodeJS.ErrnoException).code ?? ''))
            noteUnreachable(backend.url, `cannot connect: ${err.message}`);
          if (retryable && attempt.number === 1) {
            log.info(
              { backend: backend.url, err: err.message },
              'gateway failed before answering; retrying once elsewhere',
            );
            start(new Set([...excluded, backend.url]), mapped);
            return;
          }
          log.warn({ backend: backend.url, err: err.message, code: mapped.code }, 'gateway failed before answering');
          fail(mapped);
        },
      );
    };
    start(new Set(), undefined);
    return outcome;
  }

  return {
    handle,
    close() {
      proxy.close();
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
