/**
 * 4 KiB objects over HTTP/2 with TLS: the gateway (a Bearer key checked, admission, a rate-limit rule
 * counted in Redis on every request) against a bare `node:http2` file server
 * (`stream.respondWithFile`, the same file, same certificate), and against the gateway's own
 * HTTP/1.1 over TLS on the same port. Driven by h2load (nghttp2-client): `-c16 -m16` for HTTP/2,
 * `--h1 -c16` (one request at a time per connection, no pipelining) for HTTP/1.1. Rounds are
 * interleaved (the order rotates); medians of req/s and their ratios are printed.
 *
 * The bare server is started afresh for each of its runs: Node 24's `respondWithFile` crashes the
 * process (SIGSEGV) when h2load closes its connections with streams in flight at the end of a run.
 *
 *   node bench/h2.ts [--rounds 5] [--seconds 5] [--database-url postgres://…]
 *                    [--only 'gateway h2'] [--profile-dir DIR] [--node-options='--heap-prof …']
 *                    [--compare-root DIR] [--workers N]
 *                    [--compare-node-options='…'] [--compare-workers N]
 *
 * `--only` runs the named targets alone (comma-separated); it may also name the floors
 * `node:http2 from memory (compat)` and `node:http2 from memory (stream)`: node:http2 answering the
 * same bytes from memory through its compatibility or stream API, the least any server on it costs
 * per request; and `node:http2 from memory (compat+redis)`: the compatibility API after the three
 * rate-limit calls the gateway makes per request (a peek, a counted check, a peek) through its own
 * Redis counter store, the least a server counting in Redis costs; and `node:http2 from memory
 * (stream+redis)`: the same calls before an answer through the stream API, the least a gateway with
 * a response path of its own on that API could cost (floors run only when named). `--profile-dir` runs the gateway with
 * `--cpu-prof` into DIR (summarise with bench/cpu-profile-summary.ts); `--node-options` adds
 * options to the gateway's NODE_OPTIONS; `--compare-root` adds the gateway of another checkout
 * (the code before a change, say) as `gateway h2 (compare)` and `gateway h1 (TLS) (compare)`, in
 * the same interleaved rounds, and prints this checkout's ratios to it. `--workers` runs the
 * gateways with `ARKVORY_WORKERS` N (CPU time is then the primary's and its workers' together).
 * `--compare-node-options` and `--compare-workers` start the compared gateway (this checkout's, unless
 * `--compare-root` names another) with other node options or another number of workers: an A/B of a
 * runtime setting in the same interleaved rounds.
 *
 * Every server runs with bench/gc-totals.ts preloaded: the table gives its garbage-collection pauses
 * per request beside its CPU time.
 *
 * Needs h2load (Debian: nghttp2-client) and redis-server; PostgreSQL is embedded unless given.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import http2 from 'node:http2';
import path from 'node:path';
import { setTimeout } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createRedisCounterStore } from '../policy/rate-limit/index.ts';
import type { Plan } from '../policy/rate-limit/evaluate.ts';
import type { GcTotals } from './gc-totals.ts';
import { benchArgs, BenchRun, median, writeUnreachedRequestRule } from './support.ts';
import {
  createCertificateAuthority,
  freeLoopbackPort,
  issueServerCertificate,
  makeTempDir,
  processEnv,
  REPO_ROOT,
  runProcess,
  startProcess,
  startRedisServer,
  waitUntil,
} from '../test/harness/index.ts';

const args = benchArgs(
  {
    rounds: '5',
    seconds: '5',
    'node-options': '',
    workers: '1',
  },
  [
    'database-url',
    'serve',
    'from-memory',
    'redis-url',
    'port',
    'cert',
    'key',
    'only',
    'profile-dir',
    'compare-root',
    'compare-node-options',
    'compare-workers',
  ],
);

/** h2load's warm-up, not counted in its figures (nor in the CPU time). */
const WARM_UP_MS = 1000;

if (args.serve) {
  // Child: a bare node:http2 server, until killed: the file server (the peer), or with `--from-memory`
  // one answering the file's bytes from memory through the compatibility API or the stream API.
  const file = args.serve;
  const server = http2.createSecureServer({
    cert: readFileSync(args.cert!),
    key: readFileSync(args.key!),
    allowHTTP1: true,
  });
  const body = readFileSync(file);
  const head = { 'content-type': 'application/octet-stream', 'content-length': body.length };
  if (args['from-memory'] === 'compat')
    server.on('request', (_req, res) => {
      res.writeHead(200, head);
      res.end(body);
    });
  else if (args['from-memory'] === 'compat+redis' || args['from-memory'] === 'stream+redis') {
    // The gateway's three rate-limit calls per request through its own Redis counter store (batched
    // per turn of the event loop, as in the gateway): a peek, a counted check, a peek.
    const store = createRedisCounterStore(new Redis(args['redis-url']!, { enableAutoPipelining: true }));
    const plan = (name: string, windowEndMs: number): Plan => ({
      counting: [
        {
          rule: undefined as never,
          action: 'limit',
          limit: 1e9,
          periodMs: 60_000,
          banMs: 0,
          windowEndMs,
          counterKey: `floor:${name}`,
          banKey: `floor:${name}:ban`,
          distinctValue: undefined,
        },
      ],
      skip: undefined,
    });
    const counted = async () => {
      const nowMs = Date.now();
      const windowEndMs = nowMs - (nowMs % 60_000) + 60_000;
      await store.run(plan('auth-failure', windowEndMs), { nowMs, cost: 1, mode: 'peek' });
      await store.run(plan('request', windowEndMs), { nowMs, cost: 1, mode: 'check' });
      await store.run(plan('transfer', windowEndMs), { nowMs, cost: 4096, mode: 'peek' });
    };
    if (args['from-memory'] === 'compat+redis')
      server.on('request', async (_req, res) => {
        await counted();
        res.writeHead(200, head);
        res.end(body);
      });
    else
      server.on('stream', async (stream) => {
        stream.on('error', () => {});
        await counted();
        if (stream.destroyed) return;
        stream.respond({ ':status': 200, ...head });
        stream.end(body);
      });
  } else
    server.on('stream', (stream) => {
      stream.on('error', () => {});
      if (args['from-memory'] === 'stream') {
        stream.respond({ ':status': 200, ...head });
        stream.end(body);
      } else stream.respondWithFile(file, { 'content-type': 'application/octet-stream' });
    });
  server.listen(Number(args.port), '127.0.0.1', () => process.stdout.write('ready\n'));
} else {
  await main();
}

interface Target {
  name: string;
  url: string;
  h2loadArgs: string[];
  /** The gateway process measured; the bare server's is its run's own. */
  pid?: number;
  /** A bare node:http2 server started for each run: the file server, or one answering from memory. */
  bare?: 'file' | 'compat' | 'compat+redis' | 'stream' | 'stream+redis';
}

/** CPU time (user + system) a process has used so far, in ms (Linux /proc; clock ticks of 10 ms). */
function ownCpuMsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Pids of a process and its children (a gateway's workers); the process alone once it is gone. */
function processTree(pid: number): number[] {
  if (!existsSync(`/proc/${pid}`)) return [pid];
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean);
  return [pid, ...children.map(Number)];
}

/** CPU time of a process and its children (a gateway's workers), in ms. */
function cpuMsOf(pid: number): number {
  return processTree(pid).reduce((sum, each) => sum + ownCpuMsOf(each), 0);
}

/** Garbage-collection pause time so far of a gateway's processes, in ms (bench/gc-totals.ts). */
function gcMsOf(pid: number, gcDir: string): number {
  let ms = 0;
  for (const each of processTree(pid)) {
    const file = path.join(gcDir, `${each}.json`);
    if (!existsSync(file)) continue;
    const totals = JSON.parse(readFileSync(file, 'utf8')) as GcTotals;
    ms += totals.minorMs + totals.majorMs;
  }
  return ms;
}

/** The main thread's time waiting for a core while runnable, in ms (/proc schedstat): the machine's other load. */
function runQueueMsOf(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6;
}

interface RunFigures {
  rps: number;
  /** Share of the run the server's main thread was runnable but waiting for a core (other load on the machine). */
  runQueueShare: number;
  /** The server's CPU time per request, in µs: less disturbed by the machine's other load than req/s. */
  cpuUsPerRequest: number;
  /** The server's garbage-collection pauses per request, in µs. */
  gcUsPerRequest: number;
}

/** One h2load run against the server `pid`: its figures, or a thrown error naming the failures. */
async function h2load(target: Target, seconds: number, pid: number, gcDir: string): Promise<RunFigures> {
  // Bounded: once, on this loaded machine, h2load went on sending past its -D for minutes.
  const running = runProcess('timeout', [
    String(seconds + WARM_UP_MS / 1000 + 60),
    'h2load',
    '-D',
    String(seconds),
    `--warm-up-time=${WARM_UP_MS / 1000}`,
    ...target.h2loadArgs,
    target.url,
  ]);
  // h2load counts requests after its warm-up second: so does the CPU time.
  await setTimeout(WARM_UP_MS);
  const cpuBefore = cpuMsOf(pid);
  const gcBefore = gcMsOf(pid, gcDir);
  const waitBefore = runQueueMsOf(pid);
  const startedMs = performance.now();
  const result = await running;
  const runQueueShare = (runQueueMsOf(pid) - waitBefore) / (performance.now() - startedMs);
  const out = result.stdout;
  const rps = /finished in [\d.]+m?s, ([\d.]+) req\/s/.exec(out);
  const counts = /requests: \d+ total, \d+ started, (\d+) done, \d+ succeeded, (\d+) failed, (\d+) errored/.exec(out);
  const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(out);
  if (!rps || !counts || !codes) throw new Error(`${target.name}: h2load said:\n${out}\n${result.stderr}`);
  if (Number(counts[2]) + Number(counts[3]) > 0 || Number(codes[3]) + Number(codes[4]) > 0)
    throw new Error(`${target.name}: failed requests:\n${out}`);
  const cpuMs = cpuMsOf(pid) - cpuBefore;
  const done = Number(counts[1]);
  // The totals are rewritten every 100 ms: wait for the last of the run. (A bare server may be gone
  // by then, crashed as h2load closed its streams: its file keeps what it last wrote.)
  await setTimeout(200);
  const gcMs = gcMsOf(pid, gcDir) - gcBefore;
  return {
    rps: Number(rps[1]),
    runQueueShare,
    cpuUsPerRequest: (cpuMs * 1000) / done,
    gcUsPerRequest: (gcMs * 1000) / done,
  };
}

async function main(): Promise<void> {
  for (const tool of ['h2load', 'redis-server'])
    if (spawnSync(tool, ['--version']).error)
      throw new Error(
        `${tool} is not installed (Debian: apt-get install ${tool === 'h2load' ? 'nghttp2-client' : tool})`,
      );
  const rounds = Number(args.rounds);
  const seconds = Number(args.seconds);
  const work = await makeTempDir('arkvory-bench-h2-');
  const gcDir = path.join(work, 'gc');
  await mkdir(gcDir);
  const gcTotalsImport = `--import=${path.join(REPO_ROOT, 'bench/gc-totals.ts')}`;
  const bench = await BenchRun.open(work, args['database-url']);
  try {
    const ca = await createCertificateAuthority(work);
    const cert = await issueServerCertificate(ca, work);
    const file = path.join(work, 'small.bin');
    await writeFile(file, randomBytes(4096));
    const redis = bench.keep(await startRedisServer());
    const rules = await writeUnreachedRequestRule(work);
    const curlTls = ['-sS', '--cacert', ca.certFile];
    /** A gateway (from `checkout`, default this one) with its own database and data, the file uploaded. */
    const startGateway = async (suffix: string, checkout: string | undefined, nodeOptions: string, workers: string) => {
      const db = await bench.seededDatabase();
      const [key] = db.keys as [string];
      const gateway = await bench.gateway(
        `arkvory${suffix}`,
        {
          ARKVORY_DATA_DIR: path.join(work, `data${suffix.replace(/\W/g, '-')}`),
          ARKVORY_TLS_CERT_FILE: cert.certFile,
          ARKVORY_TLS_KEY_FILE: cert.keyFile,
          ARKVORY_REDIS_URL: redis.url,
          ARKVORY_RATE_LIMITS_FILE: rules,
          ARKVORY_MAX_DOWNLOADS: '512',
          ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '512',
          ARKVORY_ADMISSION_QUEUE_LENGTH: '1024',
          ARKVORY_WORKERS: workers,
          BENCH_GC_TOTALS_DIR: gcDir,
          NODE_OPTIONS: [
            '--max-semi-space-size=4',
            gcTotalsImport,
            args['profile-dir'] ? `--cpu-prof --cpu-prof-dir=${args['profile-dir']}` : '',
            nodeOptions,
          ].join(' '),
        },
        { databaseUrl: db.url, waitFor: 'none', ...(checkout ? { checkout } : {}) },
      );
      const base = `https://127.0.0.1:${gateway.port}`;
      await waitUntil(
        async () =>
          (await runProcess('curl', [...curlTls, '-o', '/dev/null', '-w', '%{http_code}', `${base}/health/status`]))
            .stdout === '200',
        { timeoutMs: 60_000, what: 'the gateway to serve https' },
      );
      const put = await runProcess('curl', [
        ...curlTls,
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        '-X',
        'PUT',
        '-H',
        `Authorization: Bearer ${key}`,
        '--data-binary',
        `@${file}`,
        `${base}/api/v1/repositories/bench/artifacts/small.bin`,
      ]);
      if (put.stdout !== '201') throw new Error(`upload answered ${put.stdout}: ${put.stderr}`);
      return { gateway, base, key };
    };
    const own = await startGateway('', undefined, args['node-options'], args.workers);
    const compareOptions = args['compare-node-options'];
    const compareWorkers = args['compare-workers'];
    const compared =
      args['compare-root'] || compareOptions !== undefined || compareWorkers !== undefined
        ? await startGateway(
            ' (compare)',
            args['compare-root'],
            compareOptions ?? args['node-options'],
            compareWorkers ?? args.workers,
          )
        : undefined;

    const barePort = await freeLoopbackPort();
    const startBare = async (kind: NonNullable<Target['bare']>) => {
      const bare = startProcess(
        process.execPath,
        [
          gcTotalsImport,
          path.join(REPO_ROOT, 'bench/h2.ts'),
          '--serve',
          file,
          ...(kind === 'file' ? [] : ['--from-memory', kind]),
          ...(kind.endsWith('+redis') ? ['--redis-url', redis.url] : []),
          '--port',
          String(barePort),
          '--cert',
          cert.certFile,
          '--key',
          cert.keyFile,
        ],
        { name: `bare node:http2 (${kind})`, env: processEnv({ BENCH_GC_TOTALS_DIR: gcDir }) },
      );
      await waitUntil(() => bare.stdout().includes('ready'), { timeoutMs: 10_000, what: 'the bare server' });
      return bare;
    };

    const content = '/api/v1/repositories/bench/artifacts/small.bin/content';
    const gatewayTargets = (suffix: string, g: typeof own, pid: number): Target[] => {
      const auth = ['-H', `authorization: Bearer ${g.key}`];
      return [
        { name: `gateway h2${suffix}`, url: `${g.base}${content}`, h2loadArgs: ['-c16', '-m16', ...auth], pid },
        {
          name: `gateway h1 (TLS)${suffix}`,
          url: `${g.base}${content}`,
          h2loadArgs: ['--h1', '-c16', '-m1', ...auth],
          pid,
        },
      ];
    };
    const allTargets: Target[] = [
      ...gatewayTargets('', own, own.gateway.child.pid!),
      {
        name: 'bare node:http2',
        url: `https://127.0.0.1:${barePort}/small.bin`,
        h2loadArgs: ['-c16', '-m16'],
        bare: 'file',
      },
      ...(compared ? gatewayTargets(' (compare)', compared, compared.gateway.child.pid!) : []),
    ];
    // Run only when named: what node:http2 costs per request before a server does anything of its own.
    const floors: Target[] = (['compat', 'compat+redis', 'stream', 'stream+redis'] as const).map((kind) => ({
      name: `node:http2 from memory (${kind})`,
      url: `https://127.0.0.1:${barePort}/small.bin`,
      h2loadArgs: ['-c16', '-m16'],
      bare: kind,
    }));
    const only = args.only?.split(',');
    const targets = only ? [...allTargets, ...floors].filter((t) => only.includes(t.name)) : allTargets;
    const figures = new Map<string, RunFigures[]>(targets.map((t) => [t.name, []]));
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < targets.length; i++) {
        const target = targets[(round + i) % targets.length]!;
        const bare = target.bare ? await startBare(target.bare) : undefined;
        const pid = bare ? bare.child.pid! : target.pid!;
        const run = await h2load(target, seconds, pid, gcDir).finally(() => bare?.stop('SIGKILL'));
        figures.get(target.name)!.push(run);
        process.stderr.write(
          `round ${round + 1} ${target.name}: ${run.rps.toFixed(0)} req/s, ${run.cpuUsPerRequest.toFixed(0)} µs CPU/request (GC pauses ${run.gcUsPerRequest.toFixed(0)} µs), waiting for a core ${(100 * run.runQueueShare).toFixed(0)} % of the time\n`,
        );
      }
    }
    const med = (name: string) => median(figures.get(name)!.map((f) => f.rps));
    const medCpu = (name: string) => median(figures.get(name)!.map((f) => f.cpuUsPerRequest));
    const medGc = (name: string) => median(figures.get(name)!.map((f) => f.gcUsPerRequest));
    console.log(
      `4 KiB GET over TLS, h2load, ${rounds} interleaved rounds of ${seconds} s, medians; gateway workers: ${args.workers}${compared ? `, compared gateway's: ${compareWorkers ?? args.workers}` : ''}`,
    );
    console.log(`| server | req/s | server CPU µs/request | of which GC pauses µs/request |`);
    console.log(`| --- | ---: | ---: | ---: |`);
    for (const t of targets)
      console.log(
        `| ${t.name} (${t.h2loadArgs.filter((a) => a.startsWith('-') && a !== '-H').join(' ')}) | ${med(t.name).toFixed(0)} | ${medCpu(t.name).toFixed(0)} | ${medGc(t.name).toFixed(0)} |`,
      );
    if (figures.has('bare node:http2') && figures.has('gateway h2'))
      console.log(
        `gateway h2 / bare node:http2: ${(med('gateway h2') / med('bare node:http2')).toFixed(2)}× (target ≥ 1.2×)`,
      );
    for (const name of ['gateway h2', 'gateway h1 (TLS)'])
      if (figures.has(name) && figures.has(`${name} (compare)`))
        console.log(
          `${name}: this checkout / compare: req/s ${(med(name) / med(`${name} (compare)`)).toFixed(2)}×, CPU per request ${(medCpu(name) / medCpu(`${name} (compare)`)).toFixed(2)}×`,
        );
    if (figures.has('gateway h1 (TLS)') && figures.has('gateway h2'))
      console.log(`gateway h2 / gateway h1 over TLS: ${(med('gateway h2') / med('gateway h1 (TLS)')).toFixed(2)}×`);
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}
