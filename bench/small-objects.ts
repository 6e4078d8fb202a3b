/**
 * Small objects (issue 20): 1 KiB, 4 KiB, 64 KiB and 1 MiB artifacts served by four servers in one
 * run, in interleaved rounds so background load hits them alike, with `wrk` (Debian) as the load
 * generator:
 *   - arkvory-redis:  a gateway with auth, ACL, rate-limit counters in Redis,
 *   - arkvory-memory: the same with counters in process memory,
 *   - node-baseline:  `fs.createReadStream().pipe(res)` (bench/content-node-baseline.ts), no auth,
 *   - nginx:          static files with sendfile (skipped with a note when nginx is not installed).
 * Both gateways run one principal, `ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL=128` and a rule file that
 * raises the default per-principal rule (`limit_requests_by_principal`) so it counts every request
 * (the Redis cost stays in the figures) but never blocks the benchmark.
 *
 *   node bench/small-objects.ts [--database-url postgres://…]   (default: an embedded PostgreSQL)
 *                               [--rounds 5] [--seconds 8] [--connections 64] [--big-mib 1024]
 *                               [--sizes 1,4,64,1024] [--upload] [--servers arkvory-memory,node-baseline]
 *   node bench/small-objects.ts --upload-only [--rounds 5] [--big-mib 1024] [--client curl|node]
 *
 * Per size and server: req/s, p50, p99 (wrk --latency), CPU seconds per 10k requests (/proc, the
 * server process; nginx: master and workers) and peak RSS (sampled every 100 ms), medians of the
 * rounds, and the ratios to the bare Node server. Then one 1 GiB single-stream download per server
 * and round (curl to /dev/null). With --upload, a 1 GiB `PUT` through the gateway (Content-Digest
 * checked, fsync before publish) against an nginx WebDAV `PUT` of the same file, interleaved too.
 * `--upload-only` runs just that comparison: one gateway (Redis counters), nginx WebDAV (required),
 * no wrk rounds and no downloads; per round one gateway `PUT` and one nginx `PUT`, which goes first
 * alternating, then the medians, the ratio, the gateway's CPU seconds per GiB and the load average.
 * Upload client: `curl --upload-file` (what operators use; the same client for both servers) by
 * default; `--client node` is the node:http client this bench used before, which spends 1.1–1.3
 * CPU-s per GiB on the same two cores as the servers (curl: about 0.3) and held nginx to about 460
 * MiB/s, so that nginx's figure was the client's more than its own. Per server the upload table shows
 * the server's and the client's CPU seconds per GiB; the gateway's are split into its main thread
 * (receiving, hashing, JavaScript) and its other threads (libuv writes and fdatasync, V8), user and
 * kernel. Every round uploads new bytes (the file's first 16 bytes change, its digest is recomputed
 * before the round): the gateway stores blobs by content, and a repeated body would measure
 * deduplication (the new copy discarded inside the request, about 0.3 s per GiB freeing it).
 * Everything started here is stopped and every temporary file and database removed.
 * The gateways run with the shipped `NODE_OPTIONS=--max-semi-space-size=4` (docs/deploy.md);
 * `ARKVORY_BENCH_NODE_OPTIONS` (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`) is appended to it, for a
 * profile of exactly this load (or `--max-semi-space-size=16` to measure V8's default instead).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import pino from 'pino';
import { migrate } from '../migrations/runner.ts';
import { AdminStore } from '../policy/auth/admin-store.ts';
import { startEmbeddedDatabase } from '../proxy/server/embedded-database.ts';
import {
  benchNginxConf,
  cpuSeconds,
  curl,
  curlWith,
  median,
  rssBytes,
  type WrkResult,
  wrk,
  writeRandomFile,
} from './support.ts';
import { freeLoopbackPort, runProcess, type ProcessResult } from '../test/harness/index.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const KiB = 1024;
const MiB = 1024 * KiB;
const { values: args } = parseArgs({
  options: {
    'database-url': { type: 'string' },
    rounds: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '8' },
    connections: { type: 'string', default: '64' },
    'big-mib': { type: 'string', default: '1024' },
    sizes: { type: 'string', default: '1,4,64,1024' },
    upload: { type: 'boolean', default: false },
    /** Only the 1 GiB upload comparison (gateway vs nginx WebDAV): no wrk rounds, no downloads. */
    'upload-only': { type: 'boolean', default: false },
    /** Measure only these servers (e.g. for a CPU profile of one gateway); all by default. */
    servers: { type: 'string' },
    /** The uploading client, the same for the gateway and nginx: `curl` (`--upload-file`) or `node` (node:http). */
    client: { type: 'string', default: 'curl' },
  },
});
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const CONNECTIONS = Number(args.connections);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const SIZES_KIB = args.sizes!.split(',').map(Number);
const UPLOAD_ONLY = args['upload-only']!;
const CLIENT = args.client!;
if (CLIENT !== 'curl' && CLIENT !== 'node') throw new Error(`--client must be curl or node, got ${CLIENT}`);
const fileName = (kib: number) => `s${kib}k.bin`;

interface Target {
  readonly name: string;
  url(file: string): string;
  readonly headers: Record<string, string>;
  /** Processes whose CPU and RSS count (nginx: master and workers). */
  pids(): Promise<number[]>;
}

function run(cmd: string, argv: string[]): Promise<ProcessResult> {
  return runProcess(cmd, argv);
}

async function childPids(pid: number): Promise<number[]> {
  const text = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
  return [pid, ...text.trim().split(/\s+/).filter(Boolean).map(Number)];
}

async function sumOver(pids: number[], read: (pid: number) => Promise<number>): Promise<number> {
  let total = 0;
  for (const pid of pids) total += await read(pid);
  return total;
}

/** One wrk run against one URL; CPU seconds and peak RSS of the target's processes meanwhile. */
async function measure(target: Target, file: string): Promise<WrkResult & { cpuPer10k: number; peakRss: number }> {
  const pids = await target.pids();
  const cpuBefore = await sumOver(pids, cpuSeconds);
  let peakRss = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peakRss = Math.max(peakRss, await sumOver(pids, rssBytes));
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const result = await wrk(target.url(file), { connections: CONNECTIONS, seconds: SECONDS, headers: target.headers });
  sampling = false;
  await sampler;
  const cpu = (await sumOver(pids, cpuSeconds)) - cpuBefore;
  return { ...result, cpuPer10k: (cpu / Math.max(1, result.requests)) * 10_000, peakRss };
}

async function waitForHttp(url: string, what: string, child: ChildProcess): Promise<void> {
  for (let i = 0; ; i++) {
    const ok = await fetch(url).then(
      (r) => r.status < 500,
      () => false,
    );
    if (ok) return;
    if (i > 600 || child.exitCode !== null) throw new Error(`${what} did not start`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function put(url: string, file: string, headers: Record<string, string>): Promise<{ status: number; seconds: number }> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = http.request(url, { method: 'PUT', headers }, (res) => {
      res.resume();
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, seconds: Number(process.hrtime.bigint() - t0) / 1e9 }),
      );
    });
    req.on('error', reject);
    createReadStream(file, { highWaterMark: MiB }).pipe(req);
  });
}

/** CPU seconds of this process's waited-for children (curl) plus its own (the node:http client). */
async function clientCpuSeconds(): Promise<number> {
  const stat = await readFile('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const children = (Number(fields[13]) + Number(fields[14])) / 100;
  const own = process.cpuUsage();
  return children + (own.user + own.system) / 1e6;
}

/** One upload `PUT` of `file` with the chosen client; its status, seconds and the client's CPU seconds. */
async function uploadPut(
  url: string,
  file: string,
  headers: Record<string, string>,
): Promise<{ status: number; seconds: number; clientCpu: number }> {
  const before = await clientCpuSeconds();
  let result: { status: number; seconds: number };
  if (CLIENT === 'node') {
    result = await put(url, file, { ...headers, 'content-length': String(BIG_BYTES) });
  } else {
    const argv = ['--upload-file', file];
    for (const [k, v] of Object.entries(headers)) argv.push('-H', `${k}: ${v}`);
    result = await curlWith([...argv, url]);
  }
  return { ...result, clientCpu: (await clientCpuSeconds()) - before };
}

interface Gateway {
  readonly target: Target;
  readonly base: string;
  readonly key: string;
}

interface BigFile {
  readonly file: string;
  /** Its Content-Digest (sha-256), so the gateway checks it before publishing. */
  digest: string;
}

/**
 * Makes the big file's bytes new (its first 16 bytes name the upload) and its digest match: the
 * gateway stores blobs by content, so a second `PUT` of the same bytes would measure deduplication
 * (the new copy discarded, 1 GiB of page cache and extents freed inside the request) instead of an
 * upload.
 */
async function freshContent(big: BigFile, tag: string): Promise<void> {
  const handle = await open(big.file, 'r+');
  try {
    await handle.write(createHash('sha256').update(tag).digest().subarray(0, 16), 0, 16, 0);
  } finally {
    await handle.close();
  }
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(big.file, { highWaterMark: 4 * MiB })) hash.update(chunk as Buffer);
  big.digest = `sha-256=:${hash.digest('base64')}:`;
}

/** nginx serving `files` statically and taking WebDAV `PUT`s under /dav/; undefined when not installed. */
async function startNginx(
  work: string,
  files: string,
  children: ChildProcess[],
): Promise<{ port: number; pid: number } | undefined> {
  const nginxBin = ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
  if (!nginxBin) return undefined;
  const port = await freeLoopbackPort();
  const prefix = path.join(work, 'nginx');
  await mkdir(path.join(prefix, 'dav'), { recursive: true });
  await chmod(prefix, 0o777);
  await chmod(path.join(prefix, 'dav'), 0o777);
  const conf = path.join(prefix, 'nginx.conf');
  await writeFile(
    conf,
    benchNginxConf({
      prefix,
      port,
      root: files,
      bodyTemp: `${prefix}/dav`,
      server: `location /dav/ { root ${prefix}; dav_methods PUT DELETE; create_full_put_path on; client_max_body_size 0; }`,
    }),
  );
  const nginx = spawn(nginxBin, ['-c', conf, '-p', prefix], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(nginx);
  await waitForHttp(`http://127.0.0.1:${port}/${fileName(SIZES_KIB[0]!)}`, 'nginx', nginx);
  return { port, pid: nginx.pid! };
}

/** CPU seconds of one process split by thread kind (main = the event loop) and user/kernel mode. */
interface CpuSplit {
  mainUser: number;
  mainSys: number;
  otherUser: number;
  otherSys: number;
}

/** Sums /proc/<pid>/task/<tid>/stat: the main thread's tid is the pid; the rest are libuv and V8 threads. */
async function cpuSplit(pid: number): Promise<CpuSplit> {
  const split: CpuSplit = { mainUser: 0, mainSys: 0, otherUser: 0, otherSys: 0 };
  const tids = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
  for (const tid of tids) {
    const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => '');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const user = Number(fields[11] ?? 0) / 100;
    const sys = Number(fields[12] ?? 0) / 100;
    if (Number(tid) === pid) {
      split.mainUser += user;
      split.mainSys += sys;
    } else {
      split.otherUser += user;
      split.otherSys += sys;
    }
  }
  return split;
}

const splitMinus = (a: CpuSplit, b: CpuSplit): CpuSplit => ({
  mainUser: a.mainUser - b.mainUser,
  mainSys: a.mainSys - b.mainSys,
  otherUser: a.otherUser - b.otherUser,
  otherSys: a.otherSys - b.otherSys,
});

/** One `PUT` of the big file through the gateway (a new key per round); MiB/s and the gateway's CPU seconds. */
async function gatewayPut(
  g: Gateway,
  name: string,
  big: BigFile,
): Promise<{ mibPerSec: number; cpuSeconds: number; split: CpuSplit; clientCpu: number }> {
  const [pid] = await g.target.pids();
  const before = await cpuSplit(pid!);
  const cpuBefore = await cpuSeconds(pid!);
  const up = await uploadPut(`${g.base}/api/v1/repositories/bench/artifacts/${name}`, big.file, {
    authorization: `Bearer ${g.key}`,
    'content-digest': big.digest,
  });
  if (up.status !== 201) throw new Error(`gateway upload answered ${up.status}`);
  return {
    mibPerSec: BIG_BYTES / MiB / up.seconds,
    clientCpu: up.clientCpu,
    cpuSeconds: (await cpuSeconds(pid!)) - cpuBefore,
    split: splitMinus(await cpuSplit(pid!), before),
  };
}

/** One WebDAV `PUT` of the big file to nginx (removed afterwards); MiB/s, nginx's and the client's CPU seconds. */
async function nginxPut(
  nginx: { port: number; pid: number },
  work: string,
  name: string,
  file: string,
): Promise<{ mibPerSec: number; cpuSeconds: number; clientCpu: number }> {
  const pids = await childPids(nginx.pid);
  const cpuBefore = await sumOver(pids, cpuSeconds);
  const dav = await uploadPut(`http://127.0.0.1:${nginx.port}/dav/${name}`, file, {});
  if (dav.status !== 201 && dav.status !== 204) throw new Error(`nginx WebDAV PUT answered ${dav.status}`);
  const cpu = (await sumOver(pids, cpuSeconds)) - cpuBefore;
  await rm(path.join(work, 'nginx', 'dav', name), { force: true });
  return { mibPerSec: BIG_BYTES / MiB / dav.seconds, cpuSeconds: cpu, clientCpu: dav.clientCpu };
}

const splitText = (s: CpuSplit): string =>
  `main thread ${s.mainUser.toFixed(2)} user + ${s.mainSys.toFixed(2)} sys, other threads ${s.otherUser.toFixed(2)} user + ${s.otherSys.toFixed(2)} sys`;

/** `--upload-only`: the upload comparison alone, interleaved, the first of the pair alternating. */
async function uploadOnly(
  g: Gateway,
  nginxServer: { port: number; pid: number },
  work: string,
  big: BigFile,
): Promise<void> {
  const GiB = BIG_BYTES / (1024 * MiB);
  // Warm-up (not counted): the page cache holds the source file, both servers have run a PUT.
  await freshContent(big, 'warm-up');
  await gatewayPut(g, 'upload-warm-up.bin', big);
  await nginxPut(nginxServer, work, 'upload-warm-up.bin', big.file);
  const gateway: number[] = [];
  const cpu: number[] = [];
  const splits: CpuSplit[] = [];
  const gatewayClient: number[] = [];
  const nginx: number[] = [];
  const nginxCpu: number[] = [];
  const nginxClient: number[] = [];
  const loads: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // New bytes for both servers alike (see freshContent); hashed here, before either is timed.
    await freshContent(big, `round ${round}`);
    const runGateway = async () => {
      const r = await gatewayPut(g, `upload-${round}.bin`, big);
      gateway.push(r.mibPerSec);
      cpu.push(r.cpuSeconds / GiB);
      splits.push(r.split);
      gatewayClient.push(r.clientCpu / GiB);
    };
    const runNginx = async () => {
      const r = await nginxPut(nginxServer, work, `upload-${round}.bin`, big.file);
      nginx.push(r.mibPerSec);
      nginxCpu.push(r.cpuSeconds / GiB);
      nginxClient.push(r.clientCpu / GiB);
    };
    if (round % 2 === 0) {
      await runGateway();
      await runNginx();
    } else {
      await runNginx();
      await runGateway();
    }
    loads.push(os.loadavg()[0]!);
    process.stderr.write(
      `round ${round + 1}/${ROUNDS}: gateway ${gateway.at(-1)!.toFixed(0)} MiB/s (${cpu.at(-1)!.toFixed(2)} CPU-s/GiB: ${splitText(splits.at(-1)!)}), nginx WebDAV ${nginx.at(-1)!.toFixed(0)} MiB/s (${nginxCpu.at(-1)!.toFixed(2)} CPU-s/GiB), load ${loads.at(-1)!.toFixed(2)}\n`,
    );
  }
  const gw = median(gateway);
  const dav = median(nginx);
  console.log(
    `\nbench/small-objects.ts --upload-only --client ${CLIENT}: ${BIG_BYTES / MiB} MiB PUT of new bytes each round, medians of ${ROUNDS} interleaved rounds, ${os.cpus().length} CPUs, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} (1-min after each round: ${loads.map((l) => l.toFixed(2)).join(' ')})`,
  );
  console.table([
    {
      server: 'gateway (digest checked, fsync before publish)',
      'MiB/s': Math.round(gw),
      'CPU-s/GiB': Number(median(cpu).toFixed(2)),
      'client CPU-s/GiB': Number(median(gatewayClient).toFixed(2)),
      rounds: gateway.map((x) => Math.round(x)).join(' '),
    },
    {
      server: 'nginx WebDAV',
      'MiB/s': Math.round(dav),
      'CPU-s/GiB': Number(median(nginxCpu).toFixed(2)),
      'client CPU-s/GiB': Number(median(nginxClient).toFixed(2)),
      rounds: nginx.map((x) => Math.round(x)).join(' '),
    },
  ]);
  const perGiB = (pick: (s: CpuSplit) => number) => median(splits.map(pick)) / GiB;
  console.log(
    `gateway CPU-s/GiB by thread (medians): ${splitText({
      mainUser: perGiB((s) => s.mainUser),
      mainSys: perGiB((s) => s.mainSys),
      otherUser: perGiB((s) => s.otherUser),
      otherSys: perGiB((s) => s.otherSys),
    })}`,
  );
  // Each round's pair ran back to back, so its ratio is the steadier figure on a shared machine.
  const pairRatios = gateway.map((g, i) => g / nginx[i]!);
  console.log(
    `gateway / nginx WebDAV: ${(gw / dav).toFixed(2)}× (ratio of the medians), ${median(pairRatios).toFixed(2)}× (median of the rounds' ratios: ${pairRatios.map((r) => r.toFixed(2)).join(' ')})`,
  );
}

async function main(): Promise<void> {
  for (const tool of UPLOAD_ONLY ? ['redis-server'] : ['wrk', 'curl', 'redis-server']) {
    if ((await run('sh', ['-c', `command -v ${tool}`])).code !== 0)
      throw new Error(
        `${tool} is not installed (Debian: apt-get install ${tool === 'redis-server' ? 'redis-server' : tool})`,
      );
  }
  const work = await mkdtemp(path.join(os.tmpdir(), 'arkvory-small-'));
  await chmod(work, 0o755);
  const files = path.join(work, 'files');
  const children: ChildProcess[] = [];
  const log = pino({ level: 'silent' });
  let embedded: Awaited<ReturnType<typeof startEmbeddedDatabase>> | undefined;
  const adminUrl = args['database-url'] ?? (embedded = await startEmbeddedDatabase(path.join(work, 'pg'), log)).url;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const databases: string[] = [];
  try {
    await mkdir(files, { recursive: true });
    for (const kib of SIZES_KIB) await writeFile(path.join(files, fileName(kib)), randomBytes(kib * KiB));
    process.stderr.write(`writing a ${BIG_BYTES / MiB} MiB file under ${files}\n`);
    const bigFile = path.join(files, 'big.bin');
    const bigDigest = `sha-256=:${await writeRandomFile(bigFile, BIG_BYTES)}:`;

    const redisPort = await freeLoopbackPort();
    const redis = spawn(
      'redis-server',
      ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(redis);
    redis.stdout!.resume();
    redis.stderr!.resume();

    const rules = path.join(work, 'rate_limits.yaml');
    await writeFile(
      rules,
      `rate_limits:
  gateway_request:
    - name: limit_requests_by_principal
      description: "bench: counted in every request, never reached"
      action: limit
      characteristics: [principal]
      limit: 1000000000
      period_s: 60
      match:
        principal:
          regex: "^[^<]"
`,
    );

    // Two gateways, each with its own database and storage root (one writer per root).
    const gateways: Gateway[] = [];
    const gatewayKinds = [
      ['arkvory-redis', `redis://127.0.0.1:${redisPort}`],
      ['arkvory-memory', undefined],
    ] as const;
    for (const [name, redisUrl] of UPLOAD_ONLY ? gatewayKinds.slice(0, 1) : gatewayKinds) {
      const db = `arkvory_small_${randomBytes(4).toString('hex')}`;
      await admin.query(`CREATE DATABASE ${db}`);
      databases.push(db);
      const dbUrl = Object.assign(new URL(adminUrl), { pathname: `/${db}` }).toString();
      const pool = new pg.Pool({ connectionString: dbUrl, max: 2 });
      let key: string;
      try {
        await migrate(pool);
        const store = new AdminStore(pool);
        await store.createRepository('bench');
        const principal = await store.createPrincipal('bench');
        await store.addGrant(principal.id, 'bench', 'write');
        key = (await store.createKey(principal.id, { scopes: ['read', 'write'] })).key;
      } finally {
        await pool.end();
      }
      const port = await freeLoopbackPort();
      const base = `http://127.0.0.1:${port}`;
      const spawnGateway = async (): Promise<ChildProcess> => {
        const child = spawn(process.execPath, [path.join(ROOT, 'bin/arkvory.js'), 'serve'], {
          cwd: ROOT,
          env: {
            PATH: process.env.PATH,
            HOME: process.env.HOME,
            ARKVORY_DATABASE_URL: dbUrl,
            ARKVORY_DATA_DIR: path.join(work, name),
            ARKVORY_PORT: String(port),
            ARKVORY_LOG_LEVEL: 'warn',
            ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2),
            ARKVORY_MAX_DOWNLOADS: '256',
            ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '128',
            ARKVORY_ADMISSION_QUEUE_LENGTH: '1024',
            ARKVORY_RATE_LIMITS_FILE: rules,
            ...(redisUrl ? { ARKVORY_REDIS_URL: redisUrl } : {}),
            // As shipped (npm start, the units), then the caller's additions (a later flag wins).
            NODE_OPTIONS: ['--max-semi-space-size=4', process.env.ARKVORY_BENCH_NODE_OPTIONS ?? ''].join(' ').trim(),
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        children.push(child);
        child.stdout!.resume();
        child.stderr!.on('data', (d: Buffer) => process.stderr.write(`[${name}] ${d.toString()}`));
        await waitForHttp(`${base}/health/status`, name, child);
        return child;
      };
      let child = await spawnGateway();
      for (const file of UPLOAD_ONLY ? [] : [...SIZES_KIB.map(fileName), 'big.bin']) {
        const { status } = await put(`${base}/api/v1/repositories/bench/artifacts/${file}`, path.join(files, file), {
          authorization: `Bearer ${key}`,
        });
        if (status !== 201) throw new Error(`${name}: upload of ${file} answered ${status}`);
      }
      if (!UPLOAD_ONLY) {
        // Restarted, so the figures (RSS above all) carry nothing over from the uploads.
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
        child = await spawnGateway();
      }
      const running = child;
      gateways.push({
        base,
        key,
        target: {
          name,
          url: (file) => `${base}/api/v1/repositories/bench/artifacts/${file}/content`,
          headers: { authorization: `Bearer ${key}` },
          pids: async () => [running.pid!],
        },
      });
    }

    if (UPLOAD_ONLY) {
      const nginx = await startNginx(work, files, children);
      if (!nginx) throw new Error('--upload-only needs nginx (Debian: apt-get install nginx-light)');
      await uploadOnly(gateways[0]!, nginx, work, { file: bigFile, digest: bigDigest });
      return;
    }

    const basePort = await freeLoopbackPort();
    const baseline = spawn(
      process.execPath,
      [path.join(ROOT, 'bench/content-node-baseline.ts'), files, String(basePort)],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(baseline);
    await waitForHttp(`http://127.0.0.1:${basePort}/${fileName(SIZES_KIB[0]!)}`, 'node baseline', baseline);
    const targets: Target[] = [
      ...gateways.map((g) => g.target),
      {
        name: 'node-baseline',
        url: (file) => `http://127.0.0.1:${basePort}/${file}`,
        headers: {},
        pids: async () => [baseline.pid!],
      },
    ];

    const nginx = await startNginx(work, files, children);
    if (nginx) {
      targets.push({
        name: 'nginx',
        url: (file) => `http://127.0.0.1:${nginx.port}/${file}`,
        headers: {},
        pids: () => childPids(nginx.pid),
      });
    } else {
      process.stderr.write('nginx not installed (Debian: apt-get install nginx-light): skipping the nginx column\n');
    }

    if (args.servers)
      targets.splice(0, targets.length, ...targets.filter((t) => args.servers!.split(',').includes(t.name)));
    if (!targets.some((t) => t.name === 'node-baseline'))
      throw new Error('--servers must include node-baseline (the ratios are against it)');
    // Warm the page cache and every server's caches.
    for (const t of targets) for (const kib of SIZES_KIB) await measureOnce(t, fileName(kib));
    await curl(targets.at(-1)!.url('big.bin'), {});

    type Row = { rps: number[]; p50: number[]; p99: number[]; cpu: number[]; rss: number[]; errors: number };
    const results = new Map<string, Row>();
    const rowOf = (t: string, kib: number) => {
      const id = `${t}|${kib}`;
      if (!results.has(id)) results.set(id, { rps: [], p50: [], p99: [], cpu: [], rss: [], errors: 0 });
      return results.get(id)!;
    };
    const bigRates = new Map<string, number[]>(targets.map((t) => [t.name, []]));
    const uploads = new Map<string, number[]>([
      ['arkvory', []],
      ['nginx-webdav', []],
    ]);
    for (let round = 0; round < ROUNDS; round++) {
      for (const kib of SIZES_KIB) {
        for (const t of targets) {
          const r = await measure(t, fileName(kib));
          const row = rowOf(t.name, kib);
          row.rps.push(r.rps);
          row.p50.push(r.p50Ms);
          row.p99.push(r.p99Ms);
          row.cpu.push(r.cpuPer10k);
          row.rss.push(r.peakRss);
          row.errors += r.errors;
          process.stderr.write(
            `round ${round + 1}/${ROUNDS} ${kib} KiB ${t.name}: ${r.rps.toFixed(0)} req/s p50 ${r.p50Ms.toFixed(2)} ms p99 ${r.p99Ms.toFixed(2)} ms, ${r.cpuPer10k.toFixed(2)} CPU-s/10k${r.errors ? `, ${r.errors} errors` : ''}\n`,
          );
        }
      }
      for (const t of targets) {
        const res = await curl(t.url('big.bin'), t.headers);
        if (res.status !== 200 || res.bytes !== BIG_BYTES)
          throw new Error(`${t.name}: 1 GiB download got ${res.status} with ${res.bytes} bytes`);
        bigRates.get(t.name)!.push(BIG_BYTES / MiB / res.seconds);
      }
      if (args.upload) {
        const big = { file: bigFile, digest: bigDigest };
        await freshContent(big, `round ${round}`);
        uploads.get('arkvory')!.push((await gatewayPut(gateways[0]!, `upload-${round}.bin`, big)).mibPerSec);
        if (nginx)
          uploads.get('nginx-webdav')!.push((await nginxPut(nginx, work, `upload-${round}.bin`, bigFile)).mibPerSec);
      }
    }

    console.log(
      `\nbench/small-objects.ts: wrk -t1 -c${CONNECTIONS} -d${SECONDS}s, medians of ${ROUNDS} interleaved rounds, ${os.cpus().length} CPUs, load average ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
    for (const kib of SIZES_KIB) {
      const base = rowOf('node-baseline', kib);
      console.log(`\n${kib} KiB`);
      console.table(
        targets.map((t) => {
          const r = rowOf(t.name, kib);
          return {
            server: t.name,
            'req/s': Math.round(median(r.rps)),
            'p50 ms': Number(median(r.p50).toFixed(2)),
            'p99 ms': Number(median(r.p99).toFixed(2)),
            'CPU-s/10k': Number(median(r.cpu).toFixed(2)),
            'peak RSS MiB': Number((Math.max(...r.rss) / MiB).toFixed(1)),
            '× baseline req/s': Number((median(r.rps) / median(base.rps)).toFixed(2)),
            errors: r.errors,
          };
        }),
      );
    }
    const baseBig = median(bigRates.get('node-baseline')!);
    console.log(`\n${BIG_BYTES / MiB} MiB, one stream (curl)`);
    console.table(
      targets.map((t) => ({
        server: t.name,
        'MiB/s': Math.round(median(bigRates.get(t.name)!)),
        '× baseline': Number((median(bigRates.get(t.name)!) / baseBig).toFixed(2)),
      })),
    );
    if (args.upload) {
      const gw = median(uploads.get('arkvory')!);
      const dav = uploads.get('nginx-webdav')!.length > 0 ? median(uploads.get('nginx-webdav')!) : Number.NaN;
      console.log(
        `\n${BIG_BYTES / MiB} MiB PUT: gateway ${gw.toFixed(0)} MiB/s (digest checked, fsync before publish), nginx WebDAV ${dav.toFixed(0)} MiB/s, ratio ${(gw / dav).toFixed(2)}×`,
      );
    }
  } finally {
    for (const child of children) child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    for (const db of databases) await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => {});
    await admin.end();
    await embedded?.stop();
    await rm(work, { recursive: true, force: true });
  }
}

/** One short request, to warm a server (not measured). */
async function measureOnce(target: Target, file: string): Promise<void> {
  const res = await curl(target.url(file), target.headers);
  if (res.status !== 200) throw new Error(`${target.name}: ${file} answered ${res.status}`);
}

await main();
