/**
 * The gateway against the setup a user would build instead (issue #37): nginx serving the same
 * 4 KiB file with `auth_request` to a minimal Node key-check service (bench/peer-key-check.ts) over a
 * keep-alive upstream, plus `limit_req` per key. Also measured: nginx alone (no auth), the bare Node
 * file server (bench/content-node-baseline.ts), and the gateway with Redis counters and with memory
 * counters (a Bearer key, the grant, admission, a request rule counted on every request but never
 * reached; ARKVORY_WORKERS passed through when set). `wrk -t1` over keep-alive connections, rounds
 * interleaved (the order rotates), medians of req/s, p99 and CPU seconds per 10,000 requests of
 * each system counting all its processes and threads (/proc utime + stime before and after: nginx
 * master and workers plus the key-check service; the gateway and every process below it, plus
 * redis-server for the Redis one), and the ratios to the peer.
 *
 *   node bench/peer.ts [--rounds 5] [--seconds 8] [--connections 64] [--database-url URL]
 *                      [--only 'gateway (memory counters),peer'] [--profile-dir DIR] [--compare-root DIR]
 *
 * `--only` measures the systems whose names start so (names as in the table, comma-separated);
 * `--profile-dir` runs the gateways with `--cpu-prof` into DIR (bench/cpu-profile-summary.ts);
 * `--compare-root` adds both gateways run from another checkout (the code before a change, say),
 * measured in the same interleaved rounds.
 * Needs wrk, nginx (Debian) and redis-server; PostgreSQL is embedded unless `--database-url` is given.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  benchArgs,
  BenchRun,
  cpuSeconds,
  median,
  putFile,
  startNginx,
  type WrkResult,
  wrk,
  writeUnreachedRequestRule,
} from './support.ts';
import {
  freeLoopbackPort,
  makeTempDir,
  REPO_ROOT,
  startProcess,
  startRedisServer,
  waitUntil,
} from '../test/harness/index.ts';

const args = benchArgs({ rounds: '5', seconds: '8', connections: '64' }, [
  'database-url',
  'only',
  'profile-dir',
  'compare-root',
]);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const CONNECTIONS = Number(args.connections);
const SMALL_BYTES = 4096;
const PEER = 'peer: nginx + auth_request + limit_req';

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

async function measure(system: System): Promise<WrkResult & { cpuPer10k: number }> {
  const before = await systemCpuSeconds(system.roots);
  const result = await wrk(system.url, { connections: CONNECTIONS, seconds: SECONDS, headers: system.headers });
  const cpu = (await systemCpuSeconds(system.roots)) - before;
  return { ...result, cpuPer10k: (cpu / Math.max(1, result.requests)) * 10_000 };
}

function nginxConf(o: { prefix: string; port: number; root: string; keyCheckPort: number }): string {
  // Run as root, the workers read the bench's temporary files without a chmod of its directories.
  const user = process.getuid?.() === 0 ? 'user root;\n' : '';
  return `${user}daemon off; worker_processes auto; pid ${o.prefix}/nginx.pid; error_log ${o.prefix}/error.log;
events { worker_connections 1024; }
http {
  access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path ${o.prefix}/body; proxy_temp_path ${o.prefix}/proxy;
  fastcgi_temp_path ${o.prefix}/fastcgi; uwsgi_temp_path ${o.prefix}/uwsgi; scgi_temp_path ${o.prefix}/scgi;
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
  }
}
`;
}

async function main(): Promise<void> {
  const nginxBin = ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
  if (!nginxBin) throw new Error('nginx is not installed (apt-get install nginx-light)');
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

    const redis = bench.keep(await startRedisServer());
    const rules = await writeUnreachedRequestRule(work);
    const workers = process.env.ARKVORY_WORKERS;
    const gatewayEnv = (name: string, extra: Record<string, string>) => ({
      ARKVORY_DATA_DIR: path.join(work, name),
      ARKVORY_RATE_LIMITS_FILE: rules,
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(CONNECTIONS * 2),
      NODE_OPTIONS: [
        '--max-semi-space-size=4',
        args['profile-dir'] ? `--cpu-prof --cpu-prof-dir=${args['profile-dir']}` : '',
      ].join(' '),
      ...(workers ? { ARKVORY_WORKERS: workers } : {}),
      ...extra,
    });
    const compareRoot = args['compare-root'];
    const gateways = async (suffix: string, checkout: string | undefined) => {
      const options = checkout ? { checkout } : {};
      const redisCounted = await bench.gateway(
        `gateway (Redis counters${suffix})`,
        gatewayEnv(`data-redis${suffix}`, { ARKVORY_REDIS_URL: redis.url }),
        options,
      );
      const memoryCounted = await bench.gateway(
        `gateway (memory counters${suffix})`,
        gatewayEnv(`data-memory${suffix}`, {}),
        options,
      );
      for (const g of [redisCounted, memoryCounted]) {
        const { status } = await putFile(`${g.url}/api/v1/repositories/bench/artifacts/small.bin`, smallFile, {
          authorization: `Bearer ${g.keys[0]}`,
        });
        if (status !== 201) throw new Error(`upload to ${g.name} answered ${status}`);
      }
      return [redisCounted, memoryCounted] as const;
    };
    const [gwRedis, gwMemory] = await gateways('', undefined);
    const compared = compareRoot ? await gateways(', compare', compareRoot) : undefined;

    // The peer's key: the Redis gateway's, so both sides send the same header.
    const key = gwRedis.keys[0]!;
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

    const content = '/api/v1/repositories/bench/artifacts/small.bin/content';
    const all: System[] = [
      {
        name: PEER,
        url: `http://127.0.0.1:${nginxPort}/files/bench/small.bin`,
        headers: { authorization: `Bearer ${key}` },
        roots: [nginx.child.pid!, keyCheck.child.pid!],
        counted: 'nginx master + workers, key-check service',
      },
      {
        name: 'nginx alone',
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
      {
        name: 'gateway (Redis counters)',
        url: `${gwRedis.url}${content}`,
        headers: { authorization: `Bearer ${key}` },
        roots: [gwRedis.child.pid!, redis.child.pid!],
        counted: 'gateway process tree, redis-server',
      },
      {
        name: 'gateway (memory counters)',
        url: `${gwMemory.url}${content}`,
        headers: { authorization: `Bearer ${gwMemory.keys[0]}` },
        roots: [gwMemory.child.pid!],
        counted: 'gateway process tree',
      },
    ];
    if (compared)
      for (const g of compared)
        all.push({
          name: g.name,
          url: `${g.url}${content}`,
          headers: { authorization: `Bearer ${g.keys[0]}` },
          roots: g.name.includes('Redis') ? [g.child.pid!, redis.child.pid!] : [g.child.pid!],
          counted: `as above, from ${compareRoot}`,
        });
    const only = args.only?.split(',').map((s) => s.trim());
    const systems = only ? all.filter((s) => only.some((o) => s.name.startsWith(o))) : all;
    if (systems.length === 0) throw new Error(`--only matched none of: ${all.map((s) => s.name).join('; ')}`);
    // Warm: JIT, keep-alive pools, the page cache.
    for (const s of systems) await wrk(s.url, { connections: CONNECTIONS, seconds: 1, headers: s.headers });

    const figures = new Map<string, Figures>(
      systems.map((s) => [s.name, { rps: [], p99Ms: [], cpuPer10k: [], errors: 0 }]),
    );
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < systems.length; k++) {
        const s = systems[(k + round) % systems.length]!;
        const r = await measure(s);
        const f = figures.get(s.name)!;
        f.rps.push(r.rps);
        f.p99Ms.push(r.p99Ms);
        f.cpuPer10k.push(r.cpuPer10k);
        f.errors += r.errors;
        process.stderr.write(
          `round ${round + 1} ${s.name}: ${r.rps.toFixed(0)} req/s, p99 ${r.p99Ms.toFixed(1)} ms, ${r.cpuPer10k.toFixed(3)} CPU-s/10k\n`,
        );
      }
    }

    const med = (name: string, pick: (f: Figures) => number[]) => median(pick(figures.get(name)!));
    const peer = figures.has(PEER) ? { rps: med(PEER, (f) => f.rps), cpu: med(PEER, (f) => f.cpuPer10k) } : undefined;
    const load = os.loadavg().map((l) => l.toFixed(1));
    console.log(
      `\n4 KiB GET, wrk -t1 -c${CONNECTIONS} × ${SECONDS} s, ${ROUNDS} interleaved rounds, medians; ARKVORY_WORKERS ${workers ?? 'unset'}; load average ${load.join(' ')} (${os.cpus().length} cores)\n`,
    );
    console.log('| system | req/s | × peer | p99 ms | CPU-s per 10k requests | × peer | processes counted | errors |');
    console.log('| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |');
    for (const s of systems) {
      const rps = med(s.name, (f) => f.rps);
      const cpu = med(s.name, (f) => f.cpuPer10k);
      const ratio = (x: number, base: number | undefined) => (base === undefined ? '—' : `${(x / base).toFixed(2)}×`);
      console.log(
        `| ${s.name} | ${rps.toFixed(0)} | ${ratio(rps, peer?.rps)} | ${med(s.name, (f) => f.p99Ms).toFixed(1)} | ${cpu.toFixed(3)} | ${ratio(cpu, peer?.cpu)} | ${s.counted} | ${figures.get(s.name)!.errors} |`,
      );
    }
    console.log('\nCPU × peer: at or below 1.00× is the goal of issue #37 (less CPU per request than the peer).');
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
