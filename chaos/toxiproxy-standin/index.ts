/**
 * A STAND-IN for Shopify's toxiproxy-server, written in TypeScript for the chaos suite.
 *
 * Why: the real toxiproxy-server (a Go binary) cannot be installed on these machines from npm or
 * Debian, and the suite must still run in `npm test`. When a real server is available
 * (`TOXIPROXY_URL`, or `toxiproxy-server` on PATH) chaos/support/toxiproxy.ts uses it instead, and
 * chaos/toxiproxy-standin.chaos.test.ts pins the behaviours both must share.
 *
 * What it covers: the HTTP API subset the suite drives through toxiproxy-node-client (proxies:
 * create, list, get, update incl. `enabled`, delete; `POST /reset`; toxics on either stream with
 * `toxicity`: latency (+jitter), bandwidth, timeout, reset_peer, slow_close, limit_data) with the
 * real JSON shapes and status codes, over a real TCP proxy that streams both ways with
 * backpressure. Not covered: /populate, /metrics, TLS, slicer, other toxics.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiState, createApiHandler } from './api-server.ts';

export interface ToxiproxyStandin {
  /** Base URL of the HTTP API, e.g. http://127.0.0.1:41234 */
  readonly url: string;
  /** Stops every proxy (dropping their connections) and the API server. */
  close(): Promise<void>;
}

/** Starts the stand-in's API on `host:port` (default 127.0.0.1 and a free port). */
export async function startToxiproxyStandin(options: { host?: string; port?: number } = {}): Promise<ToxiproxyStandin> {
  const host = options.host ?? '127.0.0.1';
  const state = new ApiState();
  const server = http.createServer(createApiHandler(state));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    async close() {
      await state.stopAll();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
