/**
 * Router overhead (issue 9): the same standalone gateway measured directly and through an
 * `ARKVORY_ROLE=router` process (static ARKVORY_ROUTER_BACKENDS) in one run, interleaved per run so
 * background load hits both alike. Prints medians and the ratios router/direct.
 *
 *   node bench/router.ts [--database-url postgres://…]   (default: an embedded PostgreSQL)
 *                        [--runs 3] [--big-mib 1024] [--small-seconds 4] [--concurrency 16]
 *
 * Two references run in the same interleaved loop, so the router's figures can be read against what
 * any proxy costs on this machine: nginx with the shipped deploy/nginx/arkvory.conf (addresses
 * replaced; skipped with a note when nginx is not installed) and a bare node:http proxy (a dozen lines,
 * request.pipe/response.pipe over a keep-alive agent: the floor of proxying in Node).
 *
 * Large file: MiB/s of one whole-file curl to /dev/null. Small file (4 KiB): `wrk -t1 --latency`
 * (Debian: apt-get install wrk) for `--small-seconds` over `--concurrency` keep-alive connections,
 * after a one-second warm-up of every path: requests/s, p50/p99, and the proxy process's CPU seconds
 * per 10k requests (less sensitive to a busy machine than requests/s), and the gateway's (what a
 * proxy's forwarding headers cost the gateway behind it shows there). Targets of issue 9: overhead ≤ 15 % for the 1 GiB
 * stream (ratio ≥ 0.85) and ≤ 35 % for 4 KiB requests (ratio ≥ 0.65). A temporary database and
 * directory are used and removed; every process started here is stopped.
 * `ARKVORY_BENCH_NODE_OPTIONS` (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`) is passed to the gateway,
 * the router and the bare proxy as NODE_OPTIONS, for a profile of exactly this load.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrate } from '../migrations/runner.ts';
import { AdminStore } from '../policy/auth/admin-store.ts';
import { startEmbeddedDatabase } from '../proxy/server/embedded-database.ts';
import { freeLoopbackPort } from '../test/harness/index.ts';
import pino from 'pino';
import { cpuSeconds, curl, median, wrk, writeRandomFile } from './support.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const MiB = 1024 * 1024;
const { values: args } = parseArgs({
  options: {
    'database-url': { type: 'string' },
    runs: { type: 'string', default: '3' },
    'big-mib': { type: 'string', default: '1024' },
    'small-seconds': { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '16' },
  },
});
const RUNS = Number(args.runs);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const SMALL_BYTES = 4096;
const SMALL_SECONDS = Number(args['small-seconds']);
const CONCURRENCY = Number(args.concurrency);

async function startServe(env: Record<string, string>, base: string, children: ChildProcess[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, [path.join(ROOT, 'bin/arkvory.js'), 'serve'], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ARKVORY_LOG_LEVEL: 'warn',
      ...env,
      ...(process.env.ARKVORY_BENCH_NODE_OPTIONS ? { NODE_OPTIONS: process.env.ARKVORY_BENCH_NODE_OPTIONS } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  for (let i = 0; ; i++) {
    const ok = await fetch(`${base}/health/status`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return child;
    if (i > 600 || child.exitCode !== null) throw new Error(`${env.ARKVORY_ROLE ?? 'api'} did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The floor: what proxying costs in Node with nothing else (no routing, health, headers, retries). */
const BARE_PROXY = `
import http from 'node:http';
const [port, target] = process.argv.slice(1);
const t = new URL(target);
const agent = new http.Agent({ keepAlive: true });
http.createServer((req, res) => {
  const up = http.request({ host: t.hostname, port: t.port, path: req.url, method: req.method, headers: req.headers, agent }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    ur.pipe(res);
  });
  up.on('error', () => res.destroy());
  req.pipe(up);
}).listen(Number(port), '127.0.0.1');
process.on('SIGTERM', () => process.exit(0));
`;

async function waitHealthy(base: string, child: ChildProcess, what: string): Promise<void> {
  for (let i = 0; ; i++) {
    const ok = await fetch(`${base}/health/live`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return;
    if (i > 100 || child.exitCode !== null) throw new Error(`${what} did not start`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function startNginx(
  work: string,
  gatewayAddress: string,
  port: number,
  children: ChildProcess[],
): Promise<ChildProcess | undefined> {
  const nginx = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
  if (!nginx) return undefined;
  const dir = path.join(work, 'nginx');
  const t = path.join(dir, 'tmp');
  await import('node:fs/promises').then((fs) => fs.mkdir(t, { recursive: true }));
  const example = await readFile(path.join(ROOT, 'deploy/nginx/arkvory.conf'), 'utf8');
  // The shipped example, one gateway: its address for every server line, the listen port replaced.
  const site = example
    .replace(/server 10\.0\.0\.1[12]:8080[^\n]*\n/g, '')
    .replaceAll('10.0.0.10:8080', gatewayAddress)
    .replace('listen 80;', `listen 127.0.0.1:${port};`);
  await writeFile(path.join(dir, 'arkvory.conf'), site);
  await writeFile(
    path.join(dir, 'nginx.conf'),
    `${process.getuid?.() === 0 ? 'user root;\n' : ''}worker_processes 1;\ndaemon off;\npid ${dir}/nginx.pid;\nerror_log ${dir}/error.log warn;\nevents { worker_connections 256; }\nhttp {\n  access_log off;\n  client_body_temp_path ${t}/body; proxy_temp_path ${t}/proxy; fastcgi_temp_path ${t}/fastcgi; uwsgi_temp_path ${t}/uwsgi; scgi_temp_path ${t}/scgi;\n  include ${dir}/arkvory.conf;\n}\n`,
  );
  const child = spawn(nginx, ['-p', dir, '-c', path.join(dir, 'nginx.conf')], { stdio: 'ignore' });
  children.push(child);
  return child;
}

async function main(): Promise<void> {
  const work = await mkdtemp(path.join(os.tmpdir(), 'arkvory-bench-router-'));
  await chmod(work, 0o755);
  const children: ChildProcess[] = [];
  const dbName = `arkvory_bench_${randomBytes(4).toString('hex')}`;
  let embedded: Awaited<ReturnType<typeof startEmbeddedDatabase>> | undefined;
  const adminUrl =
    args['database-url'] ??
    (embedded = await startEmbeddedDatabase(path.join(work, 'pg'), pino({ level: 'silent' }))).url;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const dbUrl = Object.assign(new URL(adminUrl), { pathname: `/${dbName}` }).toString();
  const pool = new pg.Pool({ connectionString: dbUrl, max: 2 });
  try {
    await migrate(pool);
    const store = new AdminStore(pool);
    await store.createRepository('bench');
    const principal = await store.createPrincipal('bench');
    await store.addGrant(principal.id, 'bench', 'write');
    const key = (await store.createKey(principal.id, { scopes: ['read', 'write'] })).key;

    const bigFile = path.join(work, 'big.bin');
    await writeRandomFile(bigFile, BIG_BYTES);
    const smallFile = path.join(work, 'small.bin');
    await writeFile(smallFile, randomBytes(SMALL_BYTES));

    // Measure the proxy, not the limiter: one principal would hit the default 12000/min rule.
    await writeFile(
      path.join(work, 'rules.yaml'),
      'rate_limits:\n  gateway_request:\n    - name: bench_skip_all\n      action: skip\n      match: {}\n',
    );
    const gatewayPort = await freeLoopbackPort();
    const gatewayBase = `http://127.0.0.1:${gatewayPort}`;
    // Unthrottled, with room for 2 × CONCURRENCY parallel downloads of one principal.
    const gatewayChild = await startServe(
      {
        ARKVORY_DATABASE_URL: dbUrl,
        ARKVORY_DATA_DIR: path.join(work, 'data'),
        ARKVORY_PORT: String(gatewayPort),
        ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2),
        ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(CONCURRENCY * 2),
        ARKVORY_RATE_LIMITS_FILE: path.join(work, 'rules.yaml'),
      },
      gatewayBase,
      children,
    );
    const routerPort = await freeLoopbackPort();
    const routerBase = `http://127.0.0.1:${routerPort}`;
    const routerChild = await startServe(
      { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: gatewayBase, ARKVORY_PORT: String(routerPort) },
      routerBase,
      children,
    );

    const barePort = await freeLoopbackPort();
    const bareBase = `http://127.0.0.1:${barePort}`;
    const bareChild = spawn(
      process.execPath,
      ['--input-type=module', '-e', BARE_PROXY, String(barePort), gatewayBase],
      {
        stdio: 'ignore',
        env: {
          ...process.env,
          ...(process.env.ARKVORY_BENCH_NODE_OPTIONS ? { NODE_OPTIONS: process.env.ARKVORY_BENCH_NODE_OPTIONS } : {}),
        },
      },
    );
    children.push(bareChild);
    await waitHealthy(bareBase, bareChild, 'the bare node:http proxy');
    const nginxPort = await freeLoopbackPort();
    const nginxBase = `http://127.0.0.1:${nginxPort}`;
    const nginxChild = await startNginx(work, `127.0.0.1:${gatewayPort}`, nginxPort, children);
    if (nginxChild) await waitHealthy(nginxBase, nginxChild, 'nginx');
    else process.stderr.write('nginx not installed (apt-get install nginx-light): its reference row is skipped\n');
    // nginx forks a worker; its CPU is the master's children, so nginx rows show throughput only.
    const paths = [
      { name: 'direct', label: 'client → gateway', base: gatewayBase, front: undefined as number | undefined },
      { name: 'router', label: 'client → router → gateway', base: routerBase, front: routerChild.pid },
      { name: 'bare', label: 'client → bare node:http proxy → gateway', base: bareBase, front: bareChild.pid },
      ...(nginxChild
        ? [
            {
              name: 'nginx',
              label: 'client → nginx (deploy example) → gateway',
              base: nginxBase,
              front: undefined as number | undefined,
            },
          ]
        : []),
    ];

    for (const [name, file] of [
      ['big.bin', bigFile],
      ['small.bin', smallFile],
    ] as const) {
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(
          `${gatewayBase}/api/v1/repositories/bench/artifacts/${name}`,
          { method: 'PUT', headers: { authorization: `Bearer ${key}` } },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          },
        );
        req.on('error', reject);
        createReadStream(file).pipe(req);
      });
      if (status !== 201) throw new Error(`upload of ${name} answered ${status}`);
    }
    const url = (base: string, name: string) => `${base}/api/v1/repositories/bench/artifacts/${name}/content`;
    await curl(url(gatewayBase, 'big.bin'), { authorization: `Bearer ${key}` });

    const fresh = () => ({
      big: [] as number[],
      rps: [] as number[],
      p50: [] as number[],
      p99: [] as number[],
      gatewayCpu: [] as number[],
      frontCpu: [] as number[],
      frontCpuSmall: [] as number[],
      gatewayCpuSmall: [] as number[],
      errors: 0,
    });
    const results = new Map(paths.map((p) => [p.name, fresh()]));
    const headers = { authorization: `Bearer ${key}` };
    // Warm every path (JIT, connection pools) before anything is counted.
    for (const p of paths) await wrk(url(p.base, 'small.bin'), { connections: CONCURRENCY, seconds: 1, headers });
    for (let run = 0; run < RUNS; run++) {
      // Rotate which goes first, so none always gets the warmer machine.
      const order = paths.map((_, i) => paths[(i + run) % paths.length]!);
      for (const p of order) {
        const r = results.get(p.name)!;
        const cpuBefore = [await cpuSeconds(gatewayChild.pid!), p.front ? await cpuSeconds(p.front) : 0];
        const b = await curl(url(p.base, 'big.bin'), { authorization: `Bearer ${key}` });
        const cpuAfter = [await cpuSeconds(gatewayChild.pid!), p.front ? await cpuSeconds(p.front) : 0];
        r.gatewayCpu.push(((cpuAfter[0]! - cpuBefore[0]!) * MiB * 1024) / BIG_BYTES);
        r.frontCpu.push(((cpuAfter[1]! - cpuBefore[1]!) * MiB * 1024) / BIG_BYTES);
        if (b.status !== 200 || b.bytes !== BIG_BYTES)
          throw new Error(`${p.name}: big download got ${b.status} with ${b.bytes} bytes`);
        r.big.push(BIG_BYTES / MiB / b.seconds);
        const smallCpuBefore = [await cpuSeconds(gatewayChild.pid!), p.front ? await cpuSeconds(p.front) : 0];
        const s = await wrk(url(p.base, 'small.bin'), { connections: CONCURRENCY, seconds: SMALL_SECONDS, headers });
        const per10k = (seconds: number) => (seconds * 10_000) / Math.max(1, s.requests);
        r.gatewayCpuSmall.push(per10k((await cpuSeconds(gatewayChild.pid!)) - smallCpuBefore[0]!));
        if (p.front) r.frontCpuSmall.push(per10k((await cpuSeconds(p.front)) - smallCpuBefore[1]!));
        r.rps.push(s.rps);
        r.p50.push(s.p50Ms);
        r.p99.push(s.p99Ms);
        r.errors += s.errors;
        process.stderr.write(
          `run ${run + 1}/${RUNS} ${p.name}: ${r.big.at(-1)!.toFixed(0)} MiB/s, 4 KiB ${s.rps.toFixed(0)} req/s\n`,
        );
      }
    }
    const direct = results.get('direct')!;
    const rows = paths.map((p) => {
      const r = results.get(p.name)!;
      return {
        path: p.label,
        [`${BIG_BYTES / MiB} MiB stream MiB/s`]: Math.round(median(r.big)),
        'stream ×direct': Number((median(r.big) / median(direct.big)).toFixed(2)),
        '4 KiB req/s': Math.round(median(r.rps)),
        '4 KiB ×direct': Number((median(r.rps) / median(direct.rps)).toFixed(2)),
        'p50 ms': Number(median(r.p50).toFixed(2)),
        'p99 ms': Number(median(r.p99).toFixed(2)),
        'gateway CPU s/GiB': Number(median(r.gatewayCpu).toFixed(2)),
        'proxy CPU s/GiB': p.front ? Number(median(r.frontCpu).toFixed(2)) : '-',
        'proxy CPU s/10k 4 KiB': p.front ? Number(median(r.frontCpuSmall).toFixed(2)) : '-',
        'gateway CPU s/10k 4 KiB': Number(median(r.gatewayCpuSmall).toFixed(2)),
        errors: r.errors,
      };
    });
    console.log(
      `\nbench/router.ts: ${BIG_BYTES / MiB} MiB stream and 4 KiB requests (wrk, ${CONCURRENCY} keep-alive connections, ${SMALL_SECONDS} s per run), medians of ${RUNS} runs, ${os.cpus().length} CPUs, load average ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
    console.table(rows);
    const router = results.get('router')!;
    const bigRatio = median(router.big) / median(direct.big);
    const smallRatio = median(router.rps) / median(direct.rps);
    console.log(
      `router/direct: stream ${bigRatio.toFixed(2)}× (overhead ${((1 - bigRatio) * 100).toFixed(0)} %, target ≤ 15 %), 4 KiB req/s ${smallRatio.toFixed(2)}× (overhead ${((1 - smallRatio) * 100).toFixed(0)} %, target ≤ 35 %)`,
    );
    const nginx = results.get('nginx');
    // What any extra hop costs on this machine, for reading the line above.
    if (nginx)
      console.log(
        `nginx/direct: stream ${(median(nginx.big) / median(direct.big)).toFixed(2)}×, 4 KiB req/s ${(median(nginx.rps) / median(direct.rps)).toFixed(2)}×`,
      );
    const bare = results.get('bare')!;
    console.log(
      `router/bare node:http proxy: stream ${(median(router.big) / median(bare.big)).toFixed(2)}×, 4 KiB req/s ${(median(router.rps) / median(bare.rps)).toFixed(2)}× (target ≥ 0.95), proxy CPU-s/GiB ${(median(router.frontCpu) / median(bare.frontCpu)).toFixed(2)}× (target ≤ 1.1), proxy CPU-s per 4 KiB request ${(median(router.frontCpuSmall) / median(bare.frontCpuSmall)).toFixed(2)}×`,
    );
  } finally {
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {});
    await admin.end();
    await embedded?.stop();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
