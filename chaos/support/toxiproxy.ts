/**
 * Gives a chaos test a toxiproxy server and a toxiproxy-node-client for it. In order of preference:
 * 1. `TOXIPROXY_URL` (an already running real server that shares this machine's loopback);
 * 2. `toxiproxy-server` on PATH, started here on a free loopback port and stopped after;
 * 3. the in-repo stand-in (chaos/toxiproxy-standin), started in this process.
 * Proxies made through `proxyTo` get unique names and are deleted by `stop()`, so files can share
 * one external server; a test that calls `/reset` affects every proxy on that server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Toxiproxy, type Proxy } from 'toxiproxy-node-client';
import { freeLoopbackPort } from '../../proxy/embedded-database.ts';
import { startToxiproxyStandin } from '../toxiproxy-standin/index.ts';

export type ToxiproxyKind = 'external' | 'spawned' | 'standin';

export interface ProxiedUpstream {
  /** The proxy, as toxiproxy-node-client returns it (update, addToxic, remove...). */
  readonly proxy: Proxy;
  /** Where clients connect instead of the upstream. */
  readonly host: string;
  readonly port: number;
}

export interface ToxiproxyServer {
  readonly url: string;
  readonly kind: ToxiproxyKind;
  readonly client: Toxiproxy;
  /** Creates a proxy listening on a free loopback port in front of `upstream` ("host:port"). */
  proxyTo(upstream: string, options?: { name?: string }): Promise<ProxiedUpstream>;
  /** Deletes the proxies made by `proxyTo`, then stops the server if this call started it. */
  stop(): Promise<void>;
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
  const defaults: Record<string, string> = { 'postgres:': '5432', 'postgresql:': '5432', 'redis:': '6379', 'http:': '80' };
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

async function waitForApi(url: string, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 10_000;
  let exited = false;
  child.once('exit', () => (exited = true));
  while (Date.now() < deadline && !exited) {
    try {
      const response = await fetch(`${url}/version`);
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  child.kill('SIGKILL');
  throw new Error(`toxiproxy-server did not answer on ${url} within 10 s${exited ? ' (it exited)' : ''}`);
}

async function startServer(): Promise<{ url: string; kind: ToxiproxyKind; close(): Promise<void> }> {
  const external = process.env.TOXIPROXY_URL;
  if (external) return { url: external.replace(/\/+$/, ''), kind: 'external', close: async () => {} };
  const binary = findOnPath('toxiproxy-server');
  if (binary) {
    const port = await freeLoopbackPort();
    const child = spawn(binary, ['-host', '127.0.0.1', '-port', String(port)], { stdio: 'ignore' });
    const url = `http://127.0.0.1:${port}`;
    await waitForApi(url, child);
    return {
      url,
      kind: 'spawned',
      async close() {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      },
    };
  }
  const standin = await startToxiproxyStandin();
  return { url: standin.url, kind: 'standin', close: () => standin.close() };
}

/** Starts (or connects to) a toxiproxy server; call `stop()` in the file's teardown. */
export async function startToxiproxy(): Promise<ToxiproxyServer> {
  const server = await startServer();
  const client = new Toxiproxy(server.url);
  const created = new Set<string>();
  return {
    url: server.url,
    kind: server.kind,
    client,
    async proxyTo(upstream, options = {}) {
      const name = options.name ?? `arkvory-${randomBytes(4).toString('hex')}`;
      const proxy = await client.createProxy({ name, listen: '127.0.0.1:0', upstream });
      created.add(name);
      const colon = proxy.listen.lastIndexOf(':');
      return { proxy, host: proxy.listen.slice(0, colon).replace(/^\[|\]$/g, ''), port: Number(proxy.listen.slice(colon + 1)) };
    },
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
}
