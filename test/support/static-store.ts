/**
 * A real nginx (Debian nginx-light) as the dumb static-HTTP store: generated config, a free
 * loopback port, a temp root served for reads and written through WebDAV PUT/DELETE/MOVE. The
 * root is a plain directory with the filesystem store's layout, so tests can inspect it the same
 * way for both stores. `stop()`/`start()` take the store away and bring it back on the same port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import https from 'node:https';
import path from 'node:path';
import { onFileEnd } from './file-end.ts';
import { request } from './content.ts';
import { makeTempDir } from './gateway.ts';
import { siteConfig } from './static-store-config.ts';
import { freeLoopbackPort, startProcess, waitForHttp, writeNginxConf } from '../harness/index.ts';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

export interface StaticStore {
  /** Base URL of the store root (ARKVORY_STORAGE_URL). */
  readonly url: string;
  /** The directory nginx serves. */
  readonly root: string;
  readonly port: number;
  /** nginx's access log: one line per finished request (`status bytes_sent "request" "traceparent"`, `"-"` for none). */
  accessLog(): Promise<string>;
  isRunning(): boolean;
  /** SIGSTOP / SIGCONT to nginx and its workers: a store that hangs with its sockets open. */
  freeze(): Promise<void>;
  thaw(): Promise<void>;
  stop(): Promise<void>;
  start(): Promise<void>;
}

const running = new Set<ChildProcess>();
onFileEnd(async () => {
  await Promise.all([...running].map((child) => stopChild(child)));
});

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  // SIGTERM is nginx's fast shutdown: open connections are closed at once (a store that goes away).
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
  running.delete(child);
}

export interface StaticStoreOptions {
  /** false leaves MOVE out of dav_methods, as on a store without it (the PUT fallback). */
  readonly move?: boolean;
  /** Serve HTTPS with this certificate (its `certPem` chain ends with the CA the readiness probe trusts). */
  readonly tls?: { readonly certFile: string; readonly keyFile: string; readonly caPem: string };
}

export async function startStaticStore(options: StaticStoreOptions = {}): Promise<StaticStore> {
  if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
  const dir = await makeTempDir('arkvory-static-store-');
  const root = path.join(dir, 'root');
  await mkdir(root, { recursive: true });
  const port = await freeLoopbackPort();
  const site = path.join(dir, 'arkvory-store.conf');
  const tls = options.tls;
  await writeFile(
    site,
    await siteConfig({
      port,
      root,
      move: options.move !== false,
      ...(tls ? { tls: { certFile: tls.certFile, keyFile: tls.keyFile } } : {}),
    }),
  );
  const conf = await writeNginxConf(dir, {
    http: `log_format store '$status $body_bytes_sent "$request" "$http_traceparent"';
access_log ${dir}/access.log store;
include ${site};`,
  });
  let child: ChildProcess | undefined;
  let output = '';
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}/arkvory/`;
  const probe = (): Promise<unknown> =>
    tls
      ? new Promise((resolve, reject) => {
          const req = https.get(url, { ca: tls.caPem, agent: false }, (res) => res.resume().on('end', resolve));
          req.on('error', reject);
        })
      : request(url);

  /** nginx's master (our child) and its workers (its children, found in /proc). */
  async function signalAll(signal: NodeJS.Signals): Promise<void> {
    const master = child?.pid;
    if (master === undefined) return;
    const pids = [master];
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
      // Field 4 (after the parenthesised name) is the parent pid.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === master) pids.push(Number(entry));
    }
    for (const pid of pids) process.kill(pid, signal);
  }

  const store: StaticStore = {
    url,
    root,
    port,
    accessLog: () => readFile(path.join(dir, 'access.log'), 'utf8').catch(() => ''),
    isRunning: () => child !== undefined && child.exitCode === null && child.signalCode === null,
    freeze: () => signalAll('SIGSTOP'),
    thaw: () => signalAll('SIGCONT'),
    async stop() {
      if (child) await stopChild(child);
      child = undefined;
    },
    async start() {
      child = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
      running.add(child);
      child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          await probe();
          return;
        } catch {
          if (Date.now() > deadline || child.exitCode !== null) throw new Error(`nginx did not start: ${output}`);
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    },
  };
  await store.start();
  return store;
}

/** A proxy in front of a static store that rewrites what it answers (`startRewritingFront`). */
export interface RewritingFront {
  /** Base URL of the store root through the proxy. */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * A second nginx in front of `store` that rewrites the bodies it answers under `under` (sub_filter,
 * chunked with a clean end, as a rewriting proxy would): each `[from, to]` pair, every occurrence.
 * Everything else passes through unchanged. Resolves once it answers.
 */
export async function startRewritingFront(
  store: Pick<StaticStore, 'port'>,
  under: 'blobs/' | 'tmp/',
  rewrites: readonly (readonly [from: string, to: string])[],
): Promise<RewritingFront> {
  if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
  const dir = await makeTempDir('arkvory-rewriting-front-');
  const port = await freeLoopbackPort();
  const upstream = `http://127.0.0.1:${store.port}`;
  const filters = rewrites.map(([from, to]) => `    sub_filter '${from}' '${to}';`).join('\n');
  const conf = await writeNginxConf(dir, {
    http: `server {
  listen 127.0.0.1:${port};
  location /arkvory/${under} {
    proxy_pass ${upstream};
    sub_filter_types *;
    sub_filter_once off;
${filters}
  }
  location / { proxy_pass ${upstream}; }
}`,
  });
  const front = startProcess(NGINX, ['-p', dir, '-c', conf], { name: 'nginx (rewriting front)' });
  const url = `http://127.0.0.1:${port}/arkvory/`;
  const stop = async (): Promise<void> => {
    await front.stop();
  };
  try {
    await waitForHttp(url, { process: front, isReady: (status) => status < 500 });
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, stop };
}
