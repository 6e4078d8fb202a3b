/**
 * Gives a chaos test the real toxiproxy server and a toxiproxy-node-client for it:
 * 1. `TOXIPROXY_URL` (an already running server that shares this machine's loopback), else
 * 2. `toxiproxy-server` on PATH, started here on a free loopback port and stopped after.
 * Without either, `startToxiproxy()` throws at once with how to install it (TOXIPROXY_INSTALL_HINT).
 * Proxies made through `proxyTo` get unique names and are deleted by `stop()`, so files can share
 * one external server.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Toxiproxy, type Proxy, type Toxic } from 'toxiproxy-node-client';
import { freeLoopbackPort, startProcess, waitUntil } from '../../test/harness/index.ts';

export type ToxiproxyKind = 'external' | 'spawned';

/** The release `.ci/run` installs; docs/chaos.md gives the same one-liner. */
export const TOXIPROXY_VERSION = '2.12.0';
export const TOXIPROXY_INSTALL_HINT =
  `the chaos suite needs the real toxiproxy server: set TOXIPROXY_URL to a running one, or put toxiproxy-server on PATH, e.g. ` +
  `\`GOBIN=/root/.cache/arkvory-tools/bin go install -ldflags=-X=github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION} github.com/Shopify/toxiproxy/v2/cmd/server@v${TOXIPROXY_VERSION} && mv /root/.cache/arkvory-tools/bin/server /root/.cache/arkvory-tools/bin/toxiproxy-server\` ` +
  `and add /root/.cache/arkvory-tools/bin to PATH (\`bash .ci/run\` does all of it; see docs/chaos.md)`;

export interface ProxiedUpstream {
  /** The proxy, as toxiproxy-node-client returns it (update, addToxic, remove...). */
  readonly proxy: Proxy;
  /** Where clients connect instead of the upstream. */
  readonly host: string;
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's (e.g. a postgres:// URL through it). */
  through(url: string): string;
}

export interface ToxiproxyServer {
  readonly url: string;
  readonly kind: ToxiproxyKind;
  readonly client: Toxiproxy;
  /** Creates a proxy listening on a free loopback port in front of `upstream` ("host:port"). */
  proxyTo(upstream: string, options?: { name?: string }): Promise<ProxiedUpstream>;
  /** `proxyTo` the host and port of `url` (a postgres://, redis:// or http:// URL). */
  proxyToUrl(url: string): Promise<ProxiedUpstream>;
  /** Deletes the proxies made by `proxyTo`, then stops the server if this call started it. */
  stop(): Promise<void>;
}

/**
 * Puts a toxic of `type` on every connection of `link` in one direction (toxicity 1: all of them)
 * until it is removed; `name` must be unique on the proxy.
 */
export function addToxic(
  link: ProxiedUpstream,
  type: 'bandwidth' | 'latency' | 'limit_data' | 'reset_peer' | 'slicer' | 'slow_close' | 'timeout',
  stream: 'upstream' | 'downstream',
  attributes: Record<string, number>,
  name: string = type,
): Promise<Toxic<unknown>> {
  return link.proxy.addToxic({ name, type, stream, toxicity: 1, attributes });
}

/** Delays every byte in one direction of `link` by `latencyMs` (no jitter) until the toxic is removed. */
export function addLatency(
  link: ProxiedUpstream,
  toxic: { name: string; stream: 'upstream' | 'downstream'; latencyMs: number },
): Promise<Toxic<unknown>> {
  return addToxic(link, 'latency', toxic.stream, { latency: toxic.latencyMs, jitter: 0 }, toxic.name);
}

/** `url` with its host and port replaced by the proxy's (e.g. a postgres:// URL through a proxy). */
export function urlThrough(url: string, proxied: ProxiedUpstream): string {
  const u = new URL(url);
  u.hostname = proxied.host;
  u.port = String(proxied.port);
  return u.toString();
}

/** "host:port" of a URL such as postgres://user@127.0.0.1:5432/db (default ports filled in). */
export function hostPortOf(url: string): string {
  const u = new URL(url);
  const defaults: Record<string, string> = {
    'postgres:': '5432',
    'postgresql:': '5432',
    'redis:': '6379',
    'http:': '80',
  };
  const port = u.port || defaults[u.protocol];
  if (!port) throw new Error(`no port in ${url}`);
  return `${u.hostname}:${port}`;
}

function findOnPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

async function startServer(): Promise<{ url: string; kind: ToxiproxyKind; close(): Promise<void> }> {
  const external = process.env.TOXIPROXY_URL;
  if (external) return { url: external.replace(/\/+$/, ''), kind: 'external', close: async () => {} };
  const binary = findOnPath('toxiproxy-server');
  if (binary) {
    const port = await freeLoopbackPort();
    const server = startProcess(binary, ['-host', '127.0.0.1', '-port', String(port)], { name: 'toxiproxy-server' });
    const url = `http://127.0.0.1:${port}`;
    try {
      const answers = async () => {
        const response = await fetch(`${url}/version`);
        await response.body?.cancel();
        return response.ok;
      };
      await waitUntil(answers, {
        what: `toxiproxy-server to answer on ${url}`,
        timeoutMs: 10_000,
        retryOnError: true,
        process: server,
      });
    } catch (err) {
      await server.stop('SIGKILL');
      throw err;
    }
    return { url, kind: 'spawned', close: () => server.stop().then(() => {}) };
  }
  throw new Error(TOXIPROXY_INSTALL_HINT);
}

/**
 * One line naming the server the suite runs against and its version (GET /version of
 * TOXIPROXY_URL, or `toxiproxy-server -version`); throws TOXIPROXY_INSTALL_HINT without either.
 */
export async function describeToxiproxyServer(): Promise<string> {
  const external = process.env.TOXIPROXY_URL;
  if (external) {
    const response = await fetch(`${external.replace(/\/+$/, '')}/version`);
    const text = (await response.text()).trim();
    let version = text;
    try {
      version = (JSON.parse(text) as { version?: string }).version ?? text;
    } catch {
      // toxiproxy before 2.6 answers plain text
    }
    return `toxiproxy ${version} at TOXIPROXY_URL=${external}${pinNote(version)}`;
  }
  const binary = findOnPath('toxiproxy-server');
  if (!binary) throw new Error(TOXIPROXY_INSTALL_HINT);
  const { stdout } = await promisify(execFile)(binary, ['-version']);
  return `${stdout.trim()} (${binary})${pinNote(stdout)}`;
}

function pinNote(version: string): string {
  return version.includes(TOXIPROXY_VERSION)
    ? ''
    : `; note: the suite is pinned to ${TOXIPROXY_VERSION} (.ci/run installs it)`;
}

/** Starts (or connects to) a toxiproxy server; call `stop()` in the file's teardown. */
export async function startToxiproxy(): Promise<ToxiproxyServer> {
  const server = await startServer();
  const client = new Toxiproxy(server.url);
  const created = new Set<string>();
  const toxiproxy: ToxiproxyServer = {
    url: server.url,
    kind: server.kind,
    client,
    async proxyTo(upstream, options = {}) {
      const name = options.name ?? `arkvory-${randomBytes(4).toString('hex')}`;
      const proxy = await client.createProxy({ name, listen: '127.0.0.1:0', upstream });
      created.add(name);
      const colon = proxy.listen.lastIndexOf(':');
      const upstreamLink: ProxiedUpstream = {
        proxy,
        host: proxy.listen.slice(0, colon).replace(/^\[|\]$/g, ''),
        port: Number(proxy.listen.slice(colon + 1)),
        through: (url) => urlThrough(url, upstreamLink),
      };
      return upstreamLink;
    },
    proxyToUrl: (url) => toxiproxy.proxyTo(hostPortOf(url)),
    async stop() {
      for (const name of created) {
        await client
          .get(name)
          .then((proxy) => proxy.remove())
          .catch(() => {});
      }
      created.clear();
      await server.close();
    },
  };
  return toxiproxy;
}
