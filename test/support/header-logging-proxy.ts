/**
 * A real nginx as a reverse proxy in front of an HTTP server (an S3 server, the rules service), logging
 * each request's method, target, status, `traceparent` header and body bytes sent: it shows what the gateway sent
 * upstream. Host is passed on unchanged (an S3 signature covers it) and bodies stream both ways; a
 * path prefix, when given, is stripped as a proxy publishing a service under a path does.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { onFileEnd } from './file-end.ts';
import { makeTempDir } from './gateway.ts';
import { freeLoopbackPort, writeNginxConf } from '../harness/index.ts';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

export interface LoggedRequest {
  readonly status: number;
  /** `GET /bucket/key?query HTTP/1.1` */
  readonly request: string;
  /** The request's traceparent, or undefined when it had none. */
  readonly traceparent: string | undefined;
  /** The bytes of the answer's body nginx sent (fewer than the whole when the client hung up). */
  readonly bodyBytesSent: number;
}

export interface HeaderLoggingProxy {
  /** `http://127.0.0.1:<port>`: use it in place of the upstream's address. */
  readonly url: string;
  /** Every finished request so far, oldest first. */
  requests(): Promise<LoggedRequest[]>;
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
onFileEnd(async () => {
  await Promise.all([...running].map((child) => stopChild(child)));
});

async function stopChild(child: ChildProcess): Promise<void> {
  running.delete(child);
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

/**
 * Starts nginx proxying everything to `upstream` (`http://host:port`); with `pathPrefix` (`/p/`), only
 * what is under that prefix, which nginx strips (a service published under a path of a shared host).
 * `forwardedPrefix`: nginx also says so in `X-Forwarded-Prefix` (the prefix without its last slash),
 * replacing whatever its client sent there. `locationDirectives`: more nginx directives for that
 * location (a proxy that rewrites the upstream's answers, e.g. its headers).
 */
export async function startHeaderLoggingProxy(
  upstream: string,
  options: { pathPrefix?: string; forwardedPrefix?: boolean; locationDirectives?: string } = {},
): Promise<HeaderLoggingProxy> {
  const prefix = options.pathPrefix;
  if (prefix !== undefined && !/^\/[A-Za-z0-9._~/-]*\/$/.test(prefix))
    throw new Error(`a path prefix starts and ends with a slash: ${prefix}`);
  if (options.forwardedPrefix && prefix === undefined) throw new Error('forwardedPrefix needs a pathPrefix');
  const forwarded = options.forwardedPrefix ? `\n    proxy_set_header X-Forwarded-Prefix ${prefix!.slice(0, -1)};` : '';
  if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
  const dir = await makeTempDir('arkvory-logging-proxy-');
  const port = await freeLoopbackPort();
  const conf = await writeNginxConf(dir, {
    workerConnections: 256,
    http: `log_format headers '$status "$request" "$http_traceparent" $body_bytes_sent';
access_log ${dir}/access.log headers;
server {
  listen 127.0.0.1:${port};
  client_max_body_size 0;
  location ${prefix ?? '/'} {
    proxy_pass ${upstream}${prefix === undefined ? '' : '/'};
    proxy_http_version 1.1;
    proxy_set_header Host $http_host;
    proxy_set_header Connection "";${forwarded}
    proxy_request_buffering off;
    proxy_buffering off;${options.locationDirectives === undefined ? '' : `\n    ${options.locationDirectives}`}
  }
}`,
  });
  const child = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  running.add(child);
  let output = '';
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      const res = await fetch(url);
      await res.body?.cancel();
      break;
    } catch {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`nginx did not start: ${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url,
    async requests() {
      const text = await readFile(path.join(dir, 'access.log'), 'utf8').catch(() => '');
      return text
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => {
          const match = /^(\d{3}) "(.*)" "(.*)" (\d+)$/.exec(line);
          if (!match) throw new Error(`unexpected access log line: ${line}`);
          return {
            status: Number(match[1]),
            request: match[2]!,
            traceparent: match[3] === '-' ? undefined : match[3],
            bodyBytesSent: Number(match[4]),
          };
        });
    },
    stop: () => stopChild(child),
  };
}
