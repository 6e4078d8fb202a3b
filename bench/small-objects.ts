import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { chmod, mkdir, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  BenchRun,
  benchNginxConf,
  cpuSeconds,
  curl,
  curlWith,
  median,
  putFile,
  rssBytes,
  startNginx,
  type WrkResult,
  wrk,
  writeRandomFile,
  writeUnreachedRequestRule,
} from './support.ts';
import {
  freeLoopbackPort,
  makeTempDir,
  REPO_ROOT,
  runProcess,
  startProcess,
  startRedisServer,
  STOP_GRACE_MS,
  waitForHttp,
  type ProcessResult,
} from '../test/harness/index.ts';

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
    result = await putFile(url, file, { ...headers, 'content-length': String(BIG_BYTES) });
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
async function startStaticNginx(
  work: string,
  files: string,
  bench: BenchRun,
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
  const nginx = bench.keep(await startNginx(nginxBin, prefix, `http://127.0.0.1:${port}/${fileName(SIZES_KIB[0]!)}`));
  return { port, pid: nginx.child.pid! };
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
  const work = await makeTempDir('arkvory-small-');
  const files = path.join(work, 'files');
  const bench = await BenchRun.open(work, args['database-url']);
  try {
    await mkdir(files, { recursive: true });
    for (const kib of SIZES_KIB) await writeFile(path.join(files, fileName(kib)), randomBytes(kib * KiB));
    process.stderr.write(`writing a ${BIG_BYTES / MiB} MiB file under ${files}\n`);
    const bigFile = path.join(files, 'big.bin');
    const bigDigest = `sha-256=:${await writeRandomFile(bigFile, BIG_BYTES)}:`;

    const redis = bench.keep(await startRedisServer());

    const rules = await writeUnreachedRequestRule(work);

    // Two gateways, each with its own database and storage root (one writer per root).
    const gateways: Gateway[] = [];
    const gatewayKinds = [
      ['arkvory-redis', redis.url],
      ['arkvory-memory', undefined],
    ] as const;
    for (const [name, redisUrl] of UPLOAD_ONLY ? gatewayKinds.slice(0, 1) : gatewayKinds) {
      const db = await bench.seededDatabase();
      const [key] = db.keys as [string];
      const port = await freeLoopbackPort();
      const base = `http://127.0.0.1:${port}`;
      const startBenchGateway = () =>
        bench.gateway(
          name,
          {
            ARKVORY_DATA_DIR: path.join(work, name),
            ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2),
            ARKVORY_MAX_DOWNLOADS: '256',
            ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '128',
            ARKVORY_ADMISSION_QUEUE_LENGTH: '1024',
            ARKVORY_RATE_LIMITS_FILE: rules,
            ...(redisUrl ? { ARKVORY_REDIS_URL: redisUrl } : {}),
            // As shipped (npm start, the units), then the caller's additions (a later flag wins).
            NODE_OPTIONS: ['--max-semi-space-size=4', process.env.ARKVORY_BENCH_NODE_OPTIONS ?? ''].join(' ').trim(),
          },
          { databaseUrl: db.url, port },
        );
      let gateway = await startBenchGateway();
      for (const file of UPLOAD_ONLY ? [] : [...SIZES_KIB.map(fileName), 'big.bin']) {
        const { status } = await putFile(
          `${base}/api/v1/repositories/bench/artifacts/${file}`,
          path.join(files, file),
          {
            authorization: `Bearer ${key}`,
          },
        );
        if (status !== 201) throw new Error(`${name}: upload of ${file} answered ${status}`);
      }
      if (!UPLOAD_ONLY) {
        // Restarted, so the figures (RSS above all) carry nothing over from the uploads.
        await gateway.stop('SIGTERM', STOP_GRACE_MS);
        gateway = await startBenchGateway();
      }
      const { child } = gateway;
      gateways.push({
        base,
        key,
        target: {
          name,
          url: (file) => `${base}/api/v1/repositories/bench/artifacts/${file}/content`,
          headers: { authorization: `Bearer ${key}` },
          pids: async () => [child.pid!],
        },
      });
    }

    if (UPLOAD_ONLY) {
      const nginx = await startStaticNginx(work, files, bench);
      if (!nginx) throw new Error('--upload-only needs nginx (Debian: apt-get install nginx-light)');
      await uploadOnly(gateways[0]!, nginx, work, { file: bigFile, digest: bigDigest });
      return;
    }

    const basePort = await freeLoopbackPort();
    const baseline = bench.keep(
      startProcess(
        process.execPath,
        [path.join(REPO_ROOT, 'bench/content-node-baseline.ts'), files, String(basePort)],
        {
          name: 'node baseline',
        },
      ),
    );
    await waitForHttp(`http://127.0.0.1:${basePort}/${fileName(SIZES_KIB[0]!)}`, {
      what: 'the node baseline',
      timeoutMs: 60_000,
      process: baseline,
    });
    const targets: Target[] = [
      ...gateways.map((g) => g.target),
      {
        name: 'node-baseline',
        url: (file) => `http://127.0.0.1:${basePort}/${file}`,
        headers: {},
        pids: async () => [baseline.child.pid!],
      },
    ];

    const nginx = await startStaticNginx(work, files, bench);
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
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

/** One short request, to warm a server (not measured). */
async function measureOnce(target: Target, file: string): Promise<void> {
  const res = await curl(target.url(file), target.headers);
  if (res.status !== 200) throw new Error(`${target.name}: ${file} answered ${res.status}`);
}

await main();
