/**
 * `/metrics`: on the main port as a public route behind an optional bearer token
 * (`ARKVORY_METRICS_TOKEN`), or on a server of its own bound to 127.0.0.1 (`ARKVORY_METRICS_PORT`),
 * in which case the main port has no `/metrics` route at all.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import http from '../../lib/node-http.ts';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { PolicyError } from '../../policy/errors.ts';
import { GatewayError } from '../server/errors.ts';
import { sendError } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import type { GatewayMetrics } from './gateway-metrics.ts';
import { FreshRuns } from './fresh-runs.ts';
import type { Clock } from '../../policy/clock.ts';
import type { Timers } from '../../policy/timers.ts';

/** What serving needs: the exposition text (a gateway's or the router's metrics). */
type Rendered = Pick<GatewayMetrics, 'render'>;

export const METRICS_PATH = '/metrics';
/**
 * Renders of the exposition begin at least this far apart (docs/metrics.md): a flood of scrapes,
 * which on the main port may be anonymous, costs at most four renders a second. In an instance of
 * workers this also keeps the coordinating process answering their policy calls in time.
 */
export const SCRAPE_SPACING_MS = 250;
const UNAUTHORIZED_HEADERS = { 'www-authenticate': 'Bearer realm="arkvory-metrics"' };

/** `metrics` rendered in shared runs begun at least SCRAPE_SPACING_MS apart, each after its callers arrived. */
export function spacedRenders(metrics: Rendered, clock: Clock, timers: Timers): Rendered {
  const runs = new FreshRuns(() => metrics.render(), clock, timers, SCRAPE_SPACING_MS);
  return { render: () => runs.get() };
}

/** Constant-time comparison of `Authorization: Bearer <token>` with the configured token. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const match = /^Bearer +(\S+) *$/i.exec(header ?? '');
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(match?.[1] ?? ''), digest(token)) && match !== null;
}

async function writeMetrics(res: ServerResponse, metrics: Rendered): Promise<void> {
  const { contentType, body } = await metrics.render();
  res.writeHead(200, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
  });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

/**
 * The main-port route; with a token, a request without it gets 401 like any bad key. `token` may be
 * a function, read per request (the token file rotates without a restart).
 */
export function metricsRoute(metrics: Rendered, token: string | undefined | (() => string | undefined)): Route {
  return {
    methods: ['GET', 'HEAD'],
    template: METRICS_PATH,
    access: 'public',
    async handle({ req, res }) {
      const now = typeof token === 'function' ? token() : token;
      if (now !== undefined && !bearerMatches(req.headers.authorization, now))
        throw new PolicyError('unauthorized', undefined, { headers: UNAUTHORIZED_HEADERS });
      await writeMetrics(res, metrics);
    },
  };
}

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

/** A loopback-only server answering `GET|HEAD /metrics` and nothing else (404 / 405 JSON errors). */
export async function startMetricsServer(metrics: Rendered, port: number, log: Logger): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    if (path !== METRICS_PATH) return sendError(res, new GatewayError('not_found', 'No such route.'), log);
    if (req.method !== 'GET' && req.method !== 'HEAD')
      return sendError(
        res,
        new GatewayError('method_not_allowed', undefined, { headers: { allow: 'GET, HEAD' } }),
        log,
      );
    writeMetrics(res, metrics).catch((err: unknown) => sendError(res, err, log));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  log.info({ url: `http://127.0.0.1:${address.port}${METRICS_PATH}` }, 'metrics listening on loopback');
  return {
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
