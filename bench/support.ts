/** What several benchmarks share: order statistics, a curl download, nginx, a big random file, and /proc readings of a process. */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  createDatabase,
  nginxMainConfig,
  runProcess,
  samplePeak,
  seedWriters,
  startGateway,
  startProcess,
  STOP_GRACE_MS,
  waitForHttp,
  writeRateLimitsFile,
  type GatewayProcess,
  type ManagedProcess,
  type ScratchDatabase,
  type StartedWhen,
} from '../test/harness/index.ts';
import { createLogger } from '../proxy/server/logger.ts';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../proxy/server/embedded-database.ts';

export const MiB = 1024 * 1024;

/**
 * A bench's command line: `--name value` options, each with its default (`optional` ones have none);
 * an unknown option fails. Figures come back as strings: read them with Number.
 */
export function benchArgs<const D extends Record<string, string>, const O extends string = never>(
  defaults: D,
  optional: readonly O[] = [],
): { [K in keyof D]: string } & { [K in O]?: string } {
  const options = Object.fromEntries([
    ...Object.entries(defaults).map(([name, value]) => [name, { type: 'string' as const, default: value }]),
    ...optional.map((name) => [name, { type: 'string' as const }]),
  ]);
  return parseArgs({ options }).values as { [K in keyof D]: string } & { [K in O]?: string };
}

/** Where a benchmark creates its scratch databases unless told otherwise: a local PostgreSQL, trust auth. */
export const LOCAL_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

export const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * The indices 0…count−1 in round `round`'s order of interleaved rounds: each round starts one later,
 * so no contender always runs first (warmest) or last (after the others heated the machine).
 */
export function rotatedOrder(count: number, round: number): number[] {
  return Array.from({ length: count }, (_, k) => (k + round) % count);
}
export const percentile = (xs: readonly number[], p: number): number =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/** One whole-body download with curl to /dev/null: the status, the bytes received, curl's total seconds. */
export function curl(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; bytes: number; seconds: number }> {
  return new Promise((resolve, reject) => {
    const argv = ['-s', '-o', '/dev/null', '-w', '%{http_code} %{size_download} %{time_total}'];
    for (const [k, v] of Object.entries(headers)) argv.push('-H', `${k}: ${v}`);
    argv.push(url);
    const child = spawn('curl', argv, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', () => {
      const [status, bytes, seconds] = out.trim().split(' ').map(Number);
      resolve({ status: status ?? 0, bytes: bytes ?? 0, seconds: seconds ?? 0 });
    });
  });
}

/** One curl transfer with the given arguments, body to /dev/null: the status, bytes moved either way, total seconds. */
export function curlWith(argv: readonly string[]): Promise<{ status: number; bytes: number; seconds: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'curl',
      ['-s', '-o', '/dev/null', '-w', '%{http_code} %{size_download} %{size_upload} %{time_total}', ...argv],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', () => {
      const [status, down, up, seconds] = out.trim().split(' ').map(Number);
      resolve({ status: status ?? 0, bytes: Math.max(down ?? 0, up ?? 0), seconds: seconds ?? 0 });
    });
  });
}

/** `curl --aws-sigv4` arguments for a direct request to an S3 server (unsigned payload, as the gateway sends). */
export const sigV4CurlArgs = (server: { region: string; accessKeyId: string; secretAccessKey: string }): string[] => [
  '--aws-sigv4',
  `aws:amz:${server.region}:s3`,
  '--user',
  `${server.accessKeyId}:${server.secretAccessKey}`,
  '-H',
  'x-amz-content-sha256: UNSIGNED-PAYLOAD',
];

/**
 * An nginx configuration serving `root` on 127.0.0.1:`port` with sendfile, every temporary path under
 * `prefix` (the benches' own nginx, run as `nginx -c <conf> -p <prefix>`); `server` adds directives
 * inside the server block (a WebDAV location, say), `http` directives before it (a cache zone, say).
 */
export function benchNginxConf(options: {
  prefix: string;
  port: number;
  root: string;
  bodyTemp: string;
  server?: string;
  http?: string;
  /** As many workers as cores unless given. */
  workerProcesses?: number | 'auto';
  /** Workers as root when the bench runs as root (nginx's default user otherwise, as when left out). */
  workersAsRoot?: boolean;
  /** Serve HTTPS with this PEM chain and key (TLS 1.2 and 1.3, nginx's default ciphers and session tickets). */
  tls?: { certFile: string; keyFile: string };
}) {
  const { prefix, port, root, bodyTemp, tls } = options;
  const server = [
    tls
      ? `ssl_certificate ${tls.certFile}; ssl_certificate_key ${tls.keyFile}; ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:bench:10m;`
      : '',
    options.server ?? '',
  ]
    .filter(Boolean)
    .join(' ');
  return nginxMainConfig({
    prefix,
    tempDir: prefix,
    bodyTempPath: bodyTemp,
    workerProcesses: options.workerProcesses ?? 'auto',
    workerConnections: 1024,
    userRoot: options.workersAsRoot ? undefined : false,
    http: `access_log off; sendfile on; tcp_nopush on;${options.http ? `\n${options.http}` : ''}
server { listen 127.0.0.1:${port}${tls ? ' ssl' : ''}; root ${root};${server ? ` ${server}` : ''} }`,
  });
}

/**
 * Runs `binary` with `<prefix>/nginx.conf` (as `nginx -c <conf> -p <prefix>`) and resolves once
 * `readyUrl` (asked with `ready.headers`) answers as `ready.isReady` wants (200 unless given); a
 * failed start names nginx's error log.
 */
export async function startNginx(
  binary: string,
  prefix: string,
  readyUrl: string,
  ready: { headers?: Record<string, string>; isReady?: (status: number) => boolean } = {},
): Promise<ManagedProcess> {
  const nginx = startProcess(binary, ['-c', path.join(prefix, 'nginx.conf'), '-p', prefix], { name: 'nginx' });
  try {
    await waitForHttp(readyUrl, { what: 'nginx', timeoutMs: 10_000, process: nginx, ...ready });
  } catch (err) {
    await nginx.stop('SIGKILL');
    const errorLog = await readFile(path.join(prefix, 'error.log'), 'utf8').catch(() => '');
    throw new Error(`nginx did not start: ${errorLog}`, { cause: err });
  }
  return nginx;
}

/** One PUT of `file`'s bytes, streamed from disk in 1 MiB reads: the status and the seconds it took. */
export function putFile(
  url: string,
  file: string,
  headers: Record<string, string>,
): Promise<{ status: number; seconds: number }> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = http.request(url, { method: 'PUT', headers }, (res) => {
      res.resume();
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, seconds: Number(process.hrtime.bigint() - started) / 1e9 }),
      );
    });
    req.on('error', reject);
    createReadStream(file, { highWaterMark: 1024 * 1024 }).pipe(req);
  });
}

/** Samples a process's RSS every 50 ms until `stop()`, which resolves with the peak seen. */
export function samplePeakRss(pid: number): { stop(): Promise<number> } {
  return samplePeak(() => rssBytes(pid), 50);
}

/** Resident set size of a process (Linux /proc), 0 once it is gone. */
export async function rssBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
}

/** User + system CPU seconds a process has used so far (Linux /proc). */
export async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11] ?? 0) + Number(fields[12] ?? 0)) / 100;
}

/**
 * Writes `bytes` random bytes to `file` (a 4 MiB random block repeated: random enough that nothing
 * on the path compresses or deduplicates within a transfer) and returns their SHA-256 in base64.
 */
export async function writeRandomFile(file: string, bytes: number): Promise<string> {
  const handle = await open(file, 'w');
  const block = randomBytes(4 * 1024 * 1024);
  const hash = createHash('sha256');
  try {
    for (let written = 0; written < bytes; written += block.length) {
      const part = block.subarray(0, Math.min(block.length, bytes - written));
      hash.update(part);
      await handle.write(part);
    }
  } finally {
    await handle.close();
  }
  return hash.digest('base64');
}

export interface WrkResult {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  /** Non-2xx/3xx answers and socket errors. */
  errors: number;
}

function toMs(value: string, unit: string): number {
  return Number(value) * ({ us: 0.001, ms: 1, s: 1000, m: 60_000 }[unit] ?? Number.NaN);
}

/** Parses `wrk --latency` output. */
function parseWrk(out: string): WrkResult {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]);
  const latency = (p: string) => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(out);
    return m ? toMs(m[1]!, m[2]!) : Number.NaN;
  };
  const requests = Number(/(\d+) requests in/.exec(out)?.[1]);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const errors = non2xx + (socketErrors ? socketErrors.slice(1).reduce((n, v) => n + Number(v), 0) : 0);
  if (errors > 0) process.stderr.write(`  wrk: ${non2xx} non-2xx, ${socketErrors?.[0] ?? 'no socket errors'}\n`);
  if (!Number.isFinite(rps) || !Number.isFinite(requests)) throw new Error(`unexpected wrk output:\n${out}`);
  return { rps, p50Ms: latency('50'), p99Ms: latency('99'), requests, errors };
}

/** One `wrk -t1 --latency` run (Debian: apt-get install wrk) over keep-alive connections. */
export async function wrk(
  url: string,
  options: { connections: number; seconds: number; headers?: Record<string, string> },
): Promise<WrkResult> {
  const argv = ['-t1', `-c${options.connections}`, `-d${options.seconds}s`, '--latency'];
  for (const [k, v] of Object.entries(options.headers ?? {})) argv.push('-H', `${k}: ${v}`);
  argv.push(url);
  const out = await runProcess('wrk', argv).catch((err: NodeJS.ErrnoException) => {
    throw err.code === 'ENOENT' ? new Error('wrk is missing (apt-get install wrk)') : err;
  });
  if (out.code !== 0) throw new Error(`wrk failed (${out.code}): ${out.stderr}`);
  return parseWrk(out.stdout);
}

/**
 * A gateway on its embedded database (no ARKVORY_DATABASE_URL in `options.env`), with the admin key
 * it writes into its data directory at first start; the caller stops it.
 */
export async function startEmbeddedGateway(
  options: Parameters<typeof startGateway>[0] & { env: { ARKVORY_DATA_DIR: string } },
): Promise<GatewayProcess & { readonly adminKey: string }> {
  const gateway = await startGateway(options);
  const adminKey = (await readFile(path.join(options.env.ARKVORY_DATA_DIR, 'admin.key'), 'utf8')).trim();
  return Object.assign(gateway, { adminKey });
}

export type BenchGateway = GatewayProcess & { readonly keys: string[] };

/**
 * What one benchmark run starts: processes and scratch databases on the server of `adminUrl`.
 * `close()` stops every process (SIGTERM, SIGKILL after a bound) and drops every database.
 */
export class BenchRun {
  readonly #adminUrl: string;
  readonly #embedded: EmbeddedDatabase | undefined;
  readonly #processes: ManagedProcess[] = [];
  readonly #databases: ScratchDatabase[] = [];

  constructor(adminUrl: string, embedded?: EmbeddedDatabase) {
    this.#adminUrl = adminUrl;
    this.#embedded = embedded;
  }

  /**
   * A run on the server of `adminUrl` (a benchmark's --database-url), or without one on an
   * embedded PostgreSQL under `work/pg`, which `close()` stops last.
   */
  static async open(work: string, adminUrl: string | undefined): Promise<BenchRun> {
    if (adminUrl) return new BenchRun(adminUrl);
    const embedded = await startEmbeddedDatabase(path.join(work, 'pg'), createLogger('warn'));
    return new BenchRun(embedded.url, embedded);
  }

  /** Stopped by `close()`. */
  keep<T extends ManagedProcess>(process: T): T {
    this.#processes.push(process);
    return process;
  }

  /** A migrated database with repository `bench` and `writers` principals that may write there. */
  async seededDatabase(writers = 1): Promise<{ url: string; keys: string[] }> {
    const db = await createDatabase(this.#adminUrl, { prefix: 'bench', poolSize: 2 });
    this.#databases.push(db);
    return { url: db.url, keys: await seedWriters(db.pool, 'bench', writers) };
  }

  /**
   * A serving gateway (log level warn unless `env` says otherwise) on `databaseUrl`, or on a
   * seeded database of its own when none is given (a database is bound to one store).
   */
  async gateway(
    name: string,
    env: Record<string, string | undefined>,
    options: { writers?: number; databaseUrl?: string; port?: number; waitFor?: StartedWhen; checkout?: string } = {},
  ): Promise<BenchGateway> {
    const db = options.databaseUrl
      ? { url: options.databaseUrl, keys: [] }
      : await this.seededDatabase(options.writers ?? 1);
    const gateway = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_LOG_LEVEL: 'warn', ...env },
      name,
      timeoutMs: 60_000,
      ...(options.port ? { port: options.port } : {}),
      ...(options.waitFor ? { waitFor: options.waitFor } : {}),
      ...(options.checkout ? { checkout: options.checkout } : {}),
    });
    return Object.assign(this.keep(gateway), { keys: db.keys });
  }

  async close(): Promise<void> {
    await Promise.all(this.#processes.map((p) => p.stop('SIGTERM', STOP_GRACE_MS)));
    for (const db of this.#databases) await db.drop().catch(() => {});
    await this.#embedded?.stop();
  }
}

/**
 * A rate-limits file whose gateway_request rule is counted on every request (one Redis or memory
 * count per request, as in production) but never reached: the shipped 12,000 requests a minute per
 * principal would cut a 4 KiB run short. Returns the file's path under `dir`.
 */
export function writeUnreachedRequestRule(dir: string): Promise<string> {
  return writeRateLimitsFile(
    {
      gateway_request: [
        {
          name: 'limit_requests_by_principal',
          description: 'bench: counted in every request, never reached',
          action: 'limit',
          characteristics: ['principal'],
          limit: 1_000_000_000,
          period_s: 60,
          match: { principal: { regex: '^[^<]' } },
        },
      ],
    },
    dir,
  );
}

/** Streams `url` over and over until `stopAt`, counting every received byte into `counter`. */
export async function streamLoop(url: string, key: string, stopAt: number, counter: { bytes: number }): Promise<void> {
  while (performance.now() < stopAt) {
    await new Promise<void>((resolve) => {
      const req = http.get(url, { headers: { authorization: `Bearer ${key}` }, agent: false }, (res) => {
        res.on('data', (c: Buffer) => {
          counter.bytes += c.length;
          if (performance.now() >= stopAt) req.destroy();
        });
        res.on('end', resolve);
        res.on('error', () => resolve());
        res.on('close', resolve);
      });
      req.on('error', () => resolve());
    });
  }
}
