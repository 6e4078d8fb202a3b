/**
 * The gateway against the setup a user would build instead (issue #37): nginx serving the same
 * 4 KiB file with `auth_request` to a minimal Node key-check service (bench/peer-key-check.ts) over a
 * keep-alive upstream, plus `limit_req` per key. Also measured: nginx alone (no auth), the bare Node
 * file server (bench/content-node-baseline.ts), and the gateway with Redis counters and with memory
 * counters (a Bearer key, the grant, admission, a request rule counted on every request but never
 * reached), each with 1 worker and with `--workers` (ARKVORY_WORKERS). `wrk -t1` over keep-alive
 * connections, rounds interleaved (the order rotates), medians of req/s, p99 and CPU seconds per
 * 10,000 requests of each system counting all its processes and threads (/proc utime + stime
 * before and after: nginx master and workers plus the key-check service; the gateway's
 * coordinating process and every worker below it, plus redis-server for the Redis one), and the
 * ratios to the peer.
 *
 * Then `--streams` parallel whole-file downloads of a `--big-mib` file (curl to /dev/null): nginx
 * alone against the gateway (memory counters) with 1 worker and with `--workers`, aggregate MiB/s
 * in interleaved rounds, medians, ratios to nginx (`--big-mib 0` leaves this out). Last, the
 * resident memory of each gateway (RSS and PSS summed over all its processes) after the warm-up
 * and at the end, and the ratio of `--workers` workers to one.
 *
 *   node bench/peer.ts [--rounds 5] [--seconds 8] [--connections 64] [--workers 2] [--big-mib 1024]
 *                      [--streams 16] [--database-url URL] [--only 'gateway (memory counters) with 2,peer']
 *                      [--profile-dir DIR] [--compare-root DIR]
 *
 * `--only` measures the systems whose names start so (names as in the table, comma-separated; the
 * gateways not named are not started); `--profile-dir` runs the gateways with `--cpu-prof` into DIR
 * (bench/cpu-profile-summary.ts); `--compare-root` adds both gateways run from another checkout
 * (the code before a change, say; one process, ARKVORY_WORKERS unset), measured in the same
 * interleaved rounds.
 * Needs wrk, curl, nginx (Debian) and redis-server; PostgreSQL is embedded unless `--database-url`
 * is given (the gateways always get a database URL, so they may run workers).
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  benchArgs,
  BenchRun,
  type BenchGateway,
  cpuSeconds,
  curl,
  MiB,
  median,
  putFile,
  rssBytes,
  startNginx,
  type WrkResult,
  wrk,
  writeRandomFile,
  writeUnreachedRequestRule,
  rotatedOrder,
} from './support.ts';
import {
  freeLoopbackPort,
  makeTempDir,
  nginxMainConfig,
  REPO_ROOT,
  startProcess,
  startRedisServer,
  waitUntil,
} from '../test/harness/index.ts';

const args = benchArgs(
  { rounds: '5', seconds: '8', connections: '64', workers: '2', 'big-mib': '1024', streams: '16' },
  ['database-url', 'only', 'profile-dir', 'compare-root'],
);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const CONNECTIONS = Number(args.connections);
const WORKERS = Number(args.workers);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const STREAMS = Number(args.streams);
const SMALL_BYTES = 4096;
const PEER = 'peer: nginx + auth_request + limit_req';
const NGINX = 'nginx alone';
if (!Number.isInteger(WORKERS) || WORKERS < 2) throw new Error(`--workers must be 2 or more; got ${args.workers}`);

const workerLabel = (n: number) => `${n} worker${n === 1 ? '' : 's'}`;
const gatewayName = (counters: 'Redis' | 'memory', workers: number) =>
  `gateway (${counters} counters) with ${workerLabel(workers)}`;

interface System {
  readonly name: string;
  readonly url: string;
  readonly headers: Record<string, string>;
  /** The roots of its process trees: every descendant counts too (nginx workers, gateway workers). */
  readonly roots: readonly number[];
  readonly counted: string;
}

interface Figures {
  rps: number[];
  p99Ms: number[];
  cpuPer10k: number[];
  /** The first root's own CPU (the coordinating process of a gateway with workers). */
  rootCpuPer10k: number[];
  errors: number;
}

/** `pid` and every process below it (Linux /proc: the children of each of its threads). */
async function processTree(pid: number): Promise<number[]> {
  const tids = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
  const children = new Set<number>();
  for (const tid of tids) {
    const text = await readFile(`/proc/${pid}/task/${tid}/children`, 'utf8').catch(() => '');
    for (const child of text.trim().split(/\s+/).filter(Boolean)) children.add(Number(child));
  }
  const below = await Promise.all([...children].map(processTree));
  return [pid, ...below.flat()];
}

/** CPU seconds (all threads, user + system) of every process in the trees of `roots`. */
async function systemCpuSeconds(roots: readonly number[]): Promise<number> {
  const pids = (await Promise.all(roots.map(processTree))).flat();
  const each = await Promise.all(pids.map(cpuSeconds));
  return each.reduce((a, b) => a + b, 0);
}

/** Proportional set size of a process (Linux /proc smaps_rollup: shared pages split among their users), 0 once gone. */
async function pssBytes(pid: number): Promise<number> {
  const rollup = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  return Number(/^Pss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? 0) * 1024;
}

/** RSS and PSS summed over the process tree of `root`, the RSS of `root` alone, and how many processes it holds. */
async function treeMemory(root: number): Promise<{ rss: number; pss: number; rootRss: number; processes: number }> {
  const pids = await processTree(root);
  const [rss, pss] = await Promise.all([Promise.all(pids.map(rssBytes)), Promise.all(pids.map(pssBytes))]);
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  return { rss: sum(rss), pss: sum(pss), rootRss: rss[0] ?? 0, processes: pids.length };
}

async function measure(system: System): Promise<WrkResult & { cpuPer10k: number; rootCpuPer10k: number }> {
  const root = system.roots[0]!;
  const [before, rootBefore] = await Promise.all([systemCpuSeconds(system.roots), cpuSeconds(root)]);
  const result = await wrk(system.url, { connections: CONNECTIONS, seconds: SECONDS, headers: system.headers });
  const [after, rootAfter] = await Promise.all([systemCpuSeconds(system.roots), cpuSeconds(root)]);
  const per10k = (cpu: number) => (cpu / Math.max(1, result.requests)) * 10_000;
  return { ...result, cpuPer10k: per10k(after - before), rootCpuPer10k: per10k(rootAfter - rootBefore) };
}

/** Aggregate MiB/s of `STREAMS` parallel whole-file downloads of `url`; every answer must be 200 with every byte. */
async function parallelDownloads(name: string, url: string, headers: Record<string, string>): Promise<number> {
  const started = process.hrtime.bigint();
  const results = await Promise.all(Array.from({ length: STREAMS }, () => curl(url, headers)));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  for (const r of results)
    if (r.status !== 200 || r.bytes !== BIG_BYTES)
      throw new Error(`${name}: a download got ${r.status} with ${r.bytes} bytes`);
  return (STREAMS * BIG_BYTES) / MiB / seconds;
}
function nginxConf(o: { prefix: string; port: number; root: string; keyCheckPort: number }): string {
  // Workers as root (the default when running as root) read the bench's temporary files without a chmod of its directories.
  return nginxMainConfig({
    prefix: o.prefix,
    tempDir: o.prefix,
    workerProcesses: 'auto',
    workerConnections: 1024,
    http: `access_log off; sendfile on; tcp_nopush on;
upstream key_check { server 127.0.0.1:${o.keyCheckPort}; keepalive 32; }
# Counted on every request per key, never reached (as the gateway's rule in this bench).
limit_req_zone $http_authorization zone=per_key:10m rate=1000000r/s;
server {
  listen 127.0.0.1:${o.port}; root ${o.root};
  location /files/ { auth_request /_key_check; limit_req zone=per_key burst=1000000 nodelay; }
  location /plain/ { }
  location = /_key_check {
    internal;
    proxy_pass http://key_check;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_pass_request_body off;
    proxy_set_header Content-Length "";
    proxy_set_header X-Original-URI $request_uri;
  }
}`,
  });
}

async function main(): Promise<void> {
  const nginxBin = ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
  if (!nginxBin) throw new Error('nginx is not installed (apt-get install nginx-light)');
  const only = args.only?.split(',').map((s) => s.trim());
  const wanted = (name: string) => !only || only.some((o) => name.startsWith(o));
  const work = await makeTempDir('arkvory-bench-peer-');
  const bench = await BenchRun.open(work, args['database-url']);
  try {
    const www = path.join(work, 'www');
    const body = randomBytes(SMALL_BYTES);
    for (const dir of ['files/bench', 'plain']) {
      await mkdir(path.join(www, dir), { recursive: true });
      await writeFile(path.join(www, dir, 'small.bin'), body);
    }
    const smallFile = path.join(www, 'plain', 'small.bin');
    const bigFile = path.join(www, 'plain', 'big.bin');
    const bigGateways = [gatewayName('memory', 1), gatewayName('memory', WORKERS)].filter(wanted);
    const bigRun = BIG_BYTES > 0 && (wanted(NGINX) || bigGateways.length > 0);
    if (bigRun) {
      process.stderr.write(`writing a ${BIG_BYTES / MiB} MiB file for the parallel downloads\n`);
      await writeRandomFile(bigFile, BIG_BYTES);
    }

    const redis = bench.keep(await startRedisServer());
    const rules = await writeUnreachedRequestRule(work);
    const gatewayEnv = (dataDir: string, extra: Record<string, string>) => ({
      ARKVORY_DATA_DIR: path.join(work, dataDir),
      ARKVORY_RATE_LIMITS_FILE: rules,
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(Math.max(CONNECTIONS, STREAMS) * 2),
      ARKVORY_MAX_UPLOAD_BYTES: String(Math.max(BIG_BYTES, SMALL_BYTES) * 2),
      NODE_OPTIONS: [
        '--max-semi-space-size=4',
        args['profile-dir'] ? `--cpu-prof --cpu-prof-dir=${args['profile-dir']}` : '',
      ].join(' '),
      ...extra,
    });
    const upload = async (g: BenchGateway, name: string, file: string) => {
      const { status } = await putFile(`${g.url}/api/v1/repositories/bench/artifacts/${name}`, file, {
        authorization: `Bearer ${g.keys[0]}`,
      });
      if (status !== 201) throw new Error(`upload of ${name} to ${g.name} answered ${status}`);
    };
    /** The gateways named in `--only` (all without it), each on a seeded database of its own, with the 4 KiB file. */
    const started: BenchGateway[] = [];
    const compareRoot = args['compare-root'];
    const variants = [
      ...[1, WORKERS].flatMap((workers) =>
        (['Redis', 'memory'] as const).map((counters) => ({
          name: gatewayName(counters, workers),
          counters,
          env: { ARKVORY_WORKERS: String(workers) },
          checkout: undefined as string | undefined,
        })),
      ),
      ...(compareRoot
        ? (['Redis', 'memory'] as const).map((counters) => ({
            name: `gateway (${counters} counters) from --compare-root`,
            counters,
            env: {},
            checkout: compareRoot as string | undefined,
          }))
        : []),
    ];
    for (const v of variants) {
      if (!wanted(v.name)) continue;
      const dataDir = `data-${v.name.replace(/[^a-z0-9]+/gi, '-')}`;
      const g = await bench.gateway(
        v.name,
        gatewayEnv(dataDir, { ...v.env, ...(v.counters === 'Redis' ? { ARKVORY_REDIS_URL: redis.url } : {}) }),
        v.checkout ? { checkout: v.checkout } : {},
      );
      await upload(g, 'small.bin', smallFile);
      if (bigRun && bigGateways.includes(v.name)) await upload(g, 'big.bin', bigFile);
      started.push(g);
    }

    // The peer's key has the gateways' form, so both sides send a header of the same size.
    const key = started[0]?.keys[0] ?? (await bench.seededDatabase()).keys[0]!;
    const keysFile = path.join(work, 'keys.txt');
    await writeFile(keysFile, `${createHash('sha256').update(key).digest('hex')} bench\n`);
    const keyCheckPort = await freeLoopbackPort();
    const keyCheck = bench.keep(
      startProcess(
        process.execPath,
        [path.join(REPO_ROOT, 'bench/peer-key-check.ts'), keysFile, String(keyCheckPort)],
        {
          name: 'key-check service',
        },
      ),
    );
    await waitUntil(() => keyCheck.stdout().includes('ready'), { timeoutMs: 10_000, what: 'the key-check service' });
    const nginxPort = await freeLoopbackPort();
    const prefix = path.join(work, 'nginx');
    await mkdir(prefix, { recursive: true });
    await writeFile(path.join(prefix, 'nginx.conf'), nginxConf({ prefix, port: nginxPort, root: www, keyCheckPort }));
    const nginx = bench.keep(
      await startNginx(nginxBin, prefix, `http://127.0.0.1:${nginxPort}/files/bench/small.bin`, {
        headers: { authorization: `Bearer ${key}` },
      }),
    );
    const barePort = await freeLoopbackPort();
    const bare = bench.keep(
      startProcess(
        process.execPath,
        [path.join(REPO_ROOT, 'bench/content-node-baseline.ts'), path.join(www, 'plain'), String(barePort)],
        { name: 'bare node' },
      ),
    );
    await waitUntil(() => bare.stdout().includes('ready'), { timeoutMs: 10_000, what: 'the bare Node server' });

    const content = (name: string) => `/api/v1/repositories/bench/artifacts/${name}/content`;
    const all: System[] = [
      {
        name: PEER,
        url: `http://127.0.0.1:${nginxPort}/files/bench/small.bin`,
        headers: { authorization: `Bearer ${key}` },
        roots: [nginx.child.pid!, keyCheck.child.pid!],
        counted: 'nginx master + workers, key-check service',
      },
      {
        name: NGINX,
        url: `http://127.0.0.1:${nginxPort}/plain/small.bin`,
        headers: {},
        roots: [nginx.child.pid!],
        counted: 'nginx master + workers',
      },
      {
        name: 'bare node',
        url: `http://127.0.0.1:${barePort}/small.bin`,
        headers: {},
        roots: [bare.child.pid!],
        counted: 'one node process',
      },
      ...started.map((g) => {
        const withRedis = g.name.includes('Redis');
        const tree = g.name.includes('compare') ? `one gateway process from ${compareRoot}` : 'gateway process tree';
        return {
          name: g.name,
          url: `${g.url}${content('small.bin')}`,
          headers: { authorization: `Bearer ${g.keys[0]}` },
          roots: withRedis ? [g.child.pid!, redis.child.pid!] : [g.child.pid!],
          counted: withRedis ? `${tree}, redis-server` : tree,
        };
      }),
    ];
    const systems = all.filter((s) => wanted(s.name));
    if (systems.length === 0) throw new Error(`--only matched none of: ${all.map((s) => s.name).join('; ')}`);
    // Warm: JIT, keep-alive pools, the page cache.
    for (const s of systems) await wrk(s.url, { connections: CONNECTIONS, seconds: 1, headers: s.headers });
    const memoryAfterWarmUp = new Map(
      await Promise.all(started.map(async (g) => [g.name, await treeMemory(g.child.pid!)] as const)),
    );

    const figures = new Map<string, Figures>(
      systems.map((s) => [s.name, { rps: [], p99Ms: [], cpuPer10k: [], rootCpuPer10k: [], errors: 0 }]),
    );
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of rotatedOrder(systems.length, round)) {
        const s = systems[k]!;
        const r = await measure(s);
        const f = figures.get(s.name)!;
        f.rps.push(r.rps);
        f.p99Ms.push(r.p99Ms);
        f.cpuPer10k.push(r.cpuPer10k);
        f.rootCpuPer10k.push(r.rootCpuPer10k);
        f.errors += r.errors;
        process.stderr.write(
          `round ${round + 1} ${s.name}: ${r.rps.toFixed(0)} req/s, p99 ${r.p99Ms.toFixed(1)} ms, ${r.cpuPer10k.toFixed(3)} CPU-s/10k\n`,
        );
      }
    }

    // The parallel downloads: nginx alone and the memory-counted gateways, interleaved rounds.
    const bigSystems = !bigRun
      ? []
      : [
          ...(wanted(NGINX)
            ? [{ name: NGINX, url: `http://127.0.0.1:${nginxPort}/plain/big.bin`, key: undefined }]
            : []),
          ...started
            .filter((g) => bigGateways.includes(g.name))
            .map((g) => ({ name: g.name, url: `${g.url}${content('big.bin')}`, key: g.keys[0] })),
        ];
    const mibPerSec = new Map<string, number[]>(bigSystems.map((s) => [s.name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of rotatedOrder(bigSystems.length, round)) {
        const s = bigSystems[k]!;
        const rate = await parallelDownloads(s.name, s.url, s.key ? { authorization: `Bearer ${s.key}` } : {});
        mibPerSec.get(s.name)!.push(rate);
        process.stderr.write(
          `round ${round + 1} ${s.name}: ${STREAMS} × ${BIG_BYTES / MiB} MiB, ${rate.toFixed(0)} MiB/s\n`,
        );
      }
    }
    const memoryAtEnd = new Map(
      await Promise.all(started.map(async (g) => [g.name, await treeMemory(g.child.pid!)] as const)),
    );

    const med = (name: string, pick: (f: Figures) => number[]) => median(pick(figures.get(name)!));
    const peer = figures.has(PEER) ? { rps: med(PEER, (f) => f.rps), cpu: med(PEER, (f) => f.cpuPer10k) } : undefined;
    const ratio = (x: number, base: number | undefined) => (base === undefined ? '—' : `${(x / base).toFixed(2)}×`);
    const load = os.loadavg().map((l) => l.toFixed(1));
    console.log(
      `\n4 KiB GET, wrk -t1 -c${CONNECTIONS} × ${SECONDS} s, ${ROUNDS} interleaved rounds, medians; gateways with 1 and ${WORKERS} workers; load average ${load.join(' ')} (${os.cpus().length} cores)\n`,
    );
    console.log('| system | req/s | × peer | p99 ms | CPU-s per 10k requests | × peer | processes counted | errors |');
    console.log('| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |');
    for (const s of systems) {
      const rps = med(s.name, (f) => f.rps);
      const cpu = med(s.name, (f) => f.cpuPer10k);
      console.log(
        `| ${s.name} | ${rps.toFixed(0)} | ${ratio(rps, peer?.rps)} | ${med(s.name, (f) => f.p99Ms).toFixed(1)} | ${cpu.toFixed(3)} | ${ratio(cpu, peer?.cpu)} | ${s.counted} | ${figures.get(s.name)!.errors} |`,
      );
    }
    console.log('\nCPU × peer: at or below 1.00× is the goal of issue #37 (less CPU per request than the peer).');
    const withWorkers = systems.filter((s) => s.name.endsWith(` with ${workerLabel(WORKERS)}`));
    if (withWorkers.length > 0) {
      console.log('\nWhere the CPU of the gateways with workers goes (medians, CPU-s per 10k requests)\n');
      console.log('| system | all processes | coordinating process | workers (and redis-server) |');
      console.log('| --- | ---: | ---: | ---: |');
      for (const s of withWorkers) {
        const f = figures.get(s.name)!;
        const workersOnly = f.cpuPer10k.map((c, i) => c - f.rootCpuPer10k[i]!);
        console.log(
          `| ${s.name} | ${median(f.cpuPer10k).toFixed(3)} | ${median(f.rootCpuPer10k).toFixed(3)} | ${median(workersOnly).toFixed(3)} |`,
        );
      }
    }

    if (bigSystems.length > 0) {
      const nginxRate = mibPerSec.has(NGINX) ? median(mibPerSec.get(NGINX)!) : undefined;
      console.log(
        `\n${STREAMS} parallel downloads of ${BIG_BYTES / MiB} MiB (curl to /dev/null), ${ROUNDS} interleaved rounds, medians\n`,
      );
      console.log('| system | MiB/s (all streams) | × nginx |');
      console.log('| --- | ---: | ---: |');
      for (const s of bigSystems) {
        const rate = median(mibPerSec.get(s.name)!);
        console.log(`| ${s.name} | ${rate.toFixed(0)} | ${ratio(rate, nginxRate)} |`);
      }
      console.log('\nGoal of issue #37: at or above 0.80× nginx with workers.');
    }

    if (started.length > 0) {
      console.log(
        '\nResident memory of each gateway, summed over all its processes (RSS counts shared pages once per process; PSS splits them)\n',
      );
      console.log(
        '| gateway | processes | RSS MiB after warm-up | × 1 worker | PSS MiB after warm-up | RSS MiB at the end | × 1 worker | PSS MiB at the end | RSS MiB of the coordinating (or only) process at the end |',
      );
      console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
      const oneWorker = (name: string) => name.replace(/ with \d+ workers$/, ' with 1 worker');
      const mib = (bytes: number) => (bytes / MiB).toFixed(1);
      for (const g of started) {
        const [warm, end] = [memoryAfterWarmUp.get(g.name)!, memoryAtEnd.get(g.name)!];
        const base = (m: Map<string, { rss: number }>) => m.get(oneWorker(g.name))?.rss;
        const compared = g.name.includes('compare');
        console.log(
          `| ${g.name} | ${end.processes} | ${mib(warm.rss)} | ${compared ? '—' : ratio(warm.rss, base(memoryAfterWarmUp))} | ${mib(warm.pss)} | ${mib(end.rss)} | ${compared ? '—' : ratio(end.rss, base(memoryAtEnd))} | ${mib(end.pss)} | ${mib(end.rootRss)} |`,
        );
      }
      console.log(
        `\nGoal of issue #37: the instance with ${WORKERS} workers at or below 1.5× one worker's RSS (for 2 workers).`,
      );
    }
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
