/**
 * Slice cache benchmark (issue 39), on one S3 server (SeaweedFS unless --server minio), in one run:
 * - warm 1 GiB GET from the S3 store's slice cache vs the same GET from the directory store
 *   (target ≥ 0.9×);
 * - warm 4 KiB req/s (wrk, keep-alive) from the slice cache vs the directory store (target ≥ 0.9×);
 * - cold 1 GiB GET with the cache (purged before each round) vs today's uncached relay of the same
 *   store (target ≥ 1.0×);
 * - --crowd (64) concurrent cold readers of one --crowd-mib (64) MiB object: time to first byte
 *   p50/p99 and the bytes pulled from the origin, beside nginx `proxy_cache` + `slice` +
 *   `proxy_cache_lock` relaying the same S3 object (signed like the gateway's requests, Range
 *   unsigned) with a cold cache each round; the crowd is driven twice (--crowd-clients): by one curl
 *   process with all readers (`--parallel`), and by one curl process per reader, which puts the
 *   client processes on the two cores beside the servers;
 * each for every slice size of --slices (MiB, default 4,8,16), so the default
 * (ARKVORY_CACHE_SLICE_BYTES) is chosen on figures. Every measurement is the median of --runs
 * interleaved rounds (the cached gateways in a rotated order each round). The small-blob cache is off in every gateway (ARKVORY_BLOB_CACHE_BYTES=0), so
 * a 4 KiB GET reaches the slice cache (or the directory store's open-file cache), not memory.
 *
 *   node bench/slice-cache.ts [--server seaweedfs|minio] [--runs 3] [--big-mib 1024] [--slices 4,8,16]
 *                             [--crowd 64] [--crowd-mib 64] [--small-seconds 5] [--database-url …]
 *                             [--phases cold,warm,small,crowd] [--crowd-clients parallel,processes]
 *                             [--profile-dir DIR] [--compare-root /other/checkout]
 *
 * --compare-root adds, per slice size, a cached gateway run from another checkout (say the commit
 * before a change), measured in the same interleaved rounds: before and after from one run.
 * --phases runs only some measurements (a profile of one kind of transfer); --profile-dir starts the
 * cached gateways with `--cpu-prof`, their profiles in DIR/<slice MiB>[b]/ (b: --compare-root's;
 * summarise with bench/cpu-profile-summary.ts).
 *
 * Origin bytes: the gateway's `arkvory_slice_cache_origin_bytes_total` (body bytes of its ranged
 * GETs), nginx's `$upstream_bytes_received` summed over its access log with subrequests logged
 * (headers included, which counts slightly against nginx). Needs curl, wrk, nginx (nginx-light has
 * the slice module) and weed/minio as the tests do. Without --database-url an embedded PostgreSQL
 * is started in a temporary directory. Everything is removed at the end.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createServiceAccount, freeLoopbackPort, makeTempDir, openPool, STOP_GRACE_MS } from '../test/harness/index.ts';
import { startS3Server, stopAllS3Servers, type S3ServerKind } from '../test/support/s3-server.ts';
import {
  benchArgs,
  type BenchGateway,
  BenchRun,
  benchNginxConf,
  curlWith,
  median,
  MiB,
  percentile,
  startNginx,
  wrk,
  writeRandomFile,
  writeUnreachedRequestRule,
} from './support.ts';

const args = benchArgs(
  {
    server: 'seaweedfs',
    runs: '3',
    'big-mib': '1024',
    slices: '4,8,16',
    crowd: '64',
    'crowd-mib': '64',
    'small-seconds': '5',
    'node-options': '--max-semi-space-size=4',
    phases: 'cold,warm,small,crowd',
    'crowd-clients': 'parallel,processes',
  },
  ['database-url', 'profile-dir', 'compare-root'],
);
/** Which measurements run: `cold` and `warm` (1 GiB), `small` (4 KiB), `crowd`; fewer for profiling. */
const PHASES = new Set(args.phases.split(','));
const RUNS = Number(args.runs);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const CROWD = Number(args.crowd);
const CROWD_BYTES = Number(args['crowd-mib']) * MiB;
/**
 * How the crowd is driven: `parallel`, one curl process with all readers (`--parallel`); `processes`,
 * one curl process per reader, all of them on the cores the servers use.
 */
const CROWD_CLIENTS = args['crowd-clients'].split(',') as CrowdClient[];
type CrowdClient = 'parallel' | 'processes';
const CROWD_CLIENT_LABEL: Record<CrowdClient, string> = {
  parallel: 'one curl --parallel',
  processes: `${args.crowd} curl processes`,
};
for (const c of CROWD_CLIENTS)
  if (!(c in CROWD_CLIENT_LABEL)) throw new Error(`--crowd-clients takes parallel and processes, not ${c}`);
const SLICES_MIB = args.slices.split(',').map(Number);
const SMALL_SECONDS = Number(args['small-seconds']);
const SERVER = args.server as S3ServerKind;
/** nginx's slice size: the gateway's default, so both fetch the same pieces. */
const NGINX_SLICE_MIB = 8;

interface Target {
  name: string;
  gw: BenchGateway;
  key: string;
  /** Purges the cache (cached gateways only). */
  cached: boolean;
}

const auth = (t: Target) => ({ authorization: `Bearer ${t.key}` });
const contentUrl = (t: Target, id: string) => `${t.gw.url}/api/v1/repositories/bench/artifacts/${id}/content`;

async function getMiBs(t: Target): Promise<number> {
  const r = await curlWith(['-H', `authorization: Bearer ${t.key}`, contentUrl(t, 'big.bin')]);
  if (r.status !== 200 || r.bytes !== BIG_BYTES)
    throw new Error(`${t.name}: GET got ${r.status} with ${r.bytes} bytes`);
  return BIG_BYTES / MiB / r.seconds;
}

async function purge(t: Target, sha256: string): Promise<void> {
  const res = await fetch(`${t.gw.url}/api/v1/admin/cache/purge`, {
    method: 'POST',
    headers: { ...auth(t), 'content-type': 'application/json' },
    body: JSON.stringify({ sha256 }),
  });
  if (res.status !== 200) throw new Error(`${t.name}: purge answered ${res.status} ${await res.text()}`);
  // The purge also reaches this gateway's own sweep through the catalog epoch (NOTIFY, else the
  // 500 ms poll); a sweep that ran after the next fill would remove that fill too. Past the bound:
  await new Promise((r) => setTimeout(r, 2500));
}

/**
 * Untimed GETs until one pulls nothing from the store: a cold GET keeps only the slices the disk
 * took in step with the origin (the rest are relayed, not kept), so a warm GET needs a few passes.
 */
async function fillUntilWarm(t: Target): Promise<void> {
  for (let pass = 0; pass < 10; pass++) {
    const before = await originBytes(t);
    await getMiBs(t);
    if ((await originBytes(t)) === before) return;
  }
  throw new Error(`${t.name}: ten GETs of the big blob still pulled bytes from the store`);
}

async function originBytes(t: Target): Promise<number> {
  const text = await (await fetch(`${t.gw.url}/metrics`)).text();
  return Number(/^arkvory_slice_cache_origin_bytes_total (\d+)/m.exec(text)?.[1] ?? Number.NaN);
}

/** One GET with curl: status, bytes, seconds to the first byte and in total. */
function timedGet(url: string, headers: Record<string, string>) {
  return new Promise<{ status: number; bytes: number; ttfb: number; total: number }>((resolve, reject) => {
    const argv = ['-s', '-o', '/dev/null', '-w', '%{http_code} %{size_download} %{time_starttransfer} %{time_total}'];
    for (const [k, v] of Object.entries(headers)) argv.push('-H', `${k}: ${v}`);
    const child = spawn('curl', [...argv, url], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', () => {
      const [status, bytes, ttfb, total] = out.trim().split(' ').map(Number);
      resolve({ status: status ?? 0, bytes: bytes ?? 0, ttfb: ttfb ?? 0, total: total ?? 0 });
    });
  });
}

/** `count` GETs of `url` from one curl process, all at once; per transfer as timedGet. */
function timedParallelGets(url: string, headers: Record<string, string>, count: number) {
  return new Promise<{ status: number; bytes: number; ttfb: number; total: number }[]>((resolve, reject) => {
    // --no-progress-meter: `-s` alone leaves curl 7.88's --parallel meter on stderr.
    const argv = ['--no-progress-meter', '--parallel', '--parallel-immediate', '--parallel-max', String(count)];
    argv.push('-w', '%{http_code} %{size_download} %{time_starttransfer} %{time_total}\\n');
    for (const [k, v] of Object.entries(headers)) argv.push('-H', `${k}: ${v}`);
    for (let i = 0; i < count; i++) argv.push('-o', '/dev/null', url);
    const child = spawn('curl', argv, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', () => {
      const lines = out.trim().split('\n');
      resolve(
        lines.map((line) => {
          const [status, bytes, ttfb, total] = line.split(' ').map(Number);
          return { status: status ?? 0, bytes: bytes ?? 0, ttfb: ttfb ?? 0, total: total ?? 0 };
        }),
      );
    });
  });
}

/** The crowd's figures are kept per server and per way of driving it. */
const crowdKey = (name: string, client: CrowdClient) => `${name} · ${CROWD_CLIENT_LABEL[client]}`;
const NGINX_CROWD = `nginx slice ${NGINX_SLICE_MIB}m + proxy_cache_lock`;

interface CrowdResult {
  ttfbP50Ms: number;
  ttfbP99Ms: number;
  seconds: number;
  originBytes: number;
}

/** CROWD concurrent GETs of one cold object; `origin()` reads the origin bytes counter. */
async function crowd(
  name: string,
  client: CrowdClient,
  url: string,
  headers: Record<string, string>,
  origin: () => Promise<number>,
): Promise<CrowdResult> {
  const before = await origin();
  const started = process.hrtime.bigint();
  const results =
    client === 'parallel'
      ? await timedParallelGets(url, headers, CROWD)
      : await Promise.all(Array.from({ length: CROWD }, () => timedGet(url, headers)));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (results.length !== CROWD) throw new Error(`${name}: crowd got ${results.length} answers of ${CROWD}`);
  for (const r of results)
    if (r.status !== 200 || r.bytes !== CROWD_BYTES)
      throw new Error(`${name}: crowd GET got ${r.status} with ${r.bytes} bytes`);
  const ttfbs = results.map((r) => r.ttfb * 1000);
  return {
    ttfbP50Ms: median(ttfbs),
    ttfbP99Ms: percentile(ttfbs, 99),
    seconds,
    originBytes: (await origin()) - before,
  };
}

/** NODE_OPTIONS of a gateway: --node-options, plus --cpu-prof into DIR/`profileAs` under --profile-dir. */
function nodeOptions(profileAs: string | undefined): { NODE_OPTIONS?: string } {
  const dir = args['profile-dir'];
  const profile = dir && profileAs ? `--cpu-prof --cpu-prof-dir=${path.join(dir, profileAs)}` : '';
  const options = [args['node-options'] ?? '', profile].filter((o) => o !== '').join(' ');
  return options ? { NODE_OPTIONS: options } : {};
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-bench-slice-cache-');
  const nginxBinary = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
  if (!nginxBinary)
    throw new Error('bench/slice-cache.ts needs nginx with the slice module (apt-get install nginx-light)');
  const bench = await BenchRun.open(work, args['database-url']);
  const server = await startS3Server(SERVER, { bucket: 'arkvory-bench' });
  try {
    const big = path.join(work, 'big.bin');
    process.stderr.write(`writing a ${BIG_BYTES / MiB} MiB file and a ${CROWD_BYTES / MiB} MiB file under ${work}\n`);
    const bigDigest = await writeRandomFile(big, BIG_BYTES);
    const crowdFile = path.join(work, 'crowd.bin');
    const crowdDigest = await writeRandomFile(crowdFile, CROWD_BYTES);
    const small = path.join(work, 'small.bin');
    await writeFile(small, randomBytes(4096));
    const hex = (b64: string) => Buffer.from(b64, 'base64').toString('hex');
    // The shipped 12,000 requests a minute per principal would cut the 4 KiB runs short.
    const rules = await writeUnreachedRequestRule(work);

    /** A gateway on a seeded database of its own, with an admin key that may also read `bench`. */
    const start = async (
      name: string,
      env: Record<string, string>,
      checkout?: string,
      profileAs?: string,
    ): Promise<Target> => {
      const db = await bench.seededDatabase(1);
      const gw = await bench.gateway(
        name,
        {
          ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2),
          ARKVORY_MAX_DOWNLOADS: String(CROWD * 2),
          ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(CROWD * 2),
          ARKVORY_BLOB_CACHE_BYTES: '0',
          ARKVORY_RATE_LIMITS_FILE: rules,
          ...nodeOptions(profileAs),
          ...env,
        },
        { databaseUrl: db.url, ...(checkout ? { checkout } : {}) },
      );
      const pool = openPool(db.url, 1);
      const { key } = await createServiceAccount(pool, {
        scopes: ['admin', 'read', 'write'],
        grants: { bench: 'write' },
      });
      await pool.end();
      const target: Target = { name, gw, key, cached: env.ARKVORY_CACHE_DIR !== undefined };
      for (const [id, file, digest] of [
        ['big.bin', big, bigDigest],
        ['crowd.bin', crowdFile, crowdDigest],
        ['small.bin', small, undefined],
      ] as const) {
        const r = await curlWith([
          '-H',
          `authorization: Bearer ${key}`,
          ...(digest ? ['-H', `content-digest: sha-256=:${digest}:`] : []),
          '-T',
          file,
          `${gw.url}/api/v1/repositories/bench/artifacts/${id}`,
        ]);
        if (r.status !== 201) throw new Error(`${name}: upload of ${id} answered ${r.status}`);
      }
      process.stderr.write(`${name} ready\n`);
      return target;
    };

    const fsTarget = await start('directory', { ARKVORY_DATA_DIR: path.join(work, 'data-fs') });
    const uncached = await start('s3 uncached', {
      ARKVORY_DATA_DIR: path.join(work, 'data-u'),
      ...server.env('uncached/'),
    });
    const cachedTargets: Array<Target & { sliceMiB: number; label: string }> = [];
    const checkouts: Array<[string, string | undefined]> = [['', undefined]];
    if (args['compare-root']) checkouts.push([' (compare)', args['compare-root']]);
    for (const sliceMiB of SLICES_MIB)
      for (const [suffix, checkout] of checkouts) {
        const id = `${sliceMiB}${suffix ? 'b' : ''}`;
        const t = await start(
          `s3 cache ${sliceMiB} MiB${suffix}`,
          {
            ARKVORY_DATA_DIR: path.join(work, `data-c${id}`),
            ...server.env(`c${id}/`),
            ARKVORY_CACHE_DIR: path.join(work, `cache-${id}`),
            ARKVORY_CACHE_MAX_BYTES: String(BIG_BYTES + 4 * CROWD_BYTES),
            ARKVORY_CACHE_MIN_FREE_BYTES: '0',
            ARKVORY_CACHE_SLICE_BYTES: String(sliceMiB * MiB),
          },
          checkout,
          id,
        );
        cachedTargets.push({ ...t, sliceMiB, label: `${sliceMiB} MiB${suffix}` });
      }
    // nginx relays the object the gateway with nginx's slice size stored (the first cached one otherwise).
    const crowdSource = cachedTargets.find((t) => t.sliceMiB === NGINX_SLICE_MIB) ?? cachedTargets[0];
    const crowdHex = hex(crowdDigest);
    const crowdObjectKey = `${crowdSource ? `c${crowdSource.sliceMiB}/` : 'uncached/'}blobs/sha256/${crowdHex.slice(0, 2)}/${crowdHex.slice(2, 4)}/${crowdHex}`;

    // Warm-up of the uncached and directory paths (page caches of the store and the file).
    if (PHASES.has('warm')) await getMiBs(fsTarget);
    if (PHASES.has('cold')) await getMiBs(uncached);

    const figures = {
      warm: new Map<string, number[]>(),
      cold: new Map<string, number[]>(),
      small: new Map<string, number[]>(),
      crowd: new Map<string, CrowdResult[]>(),
    };
    const push = <T>(m: Map<string, T[]>, k: string, v: T) => m.set(k, [...(m.get(k) ?? []), v]);

    for (let run = 0; run < RUNS; run++) {
      // The cached gateways in a new order each round, so none always runs first after the
      // directory store and the relay (or right after the other's disk writes).
      const rotated = cachedTargets.map((_, i) => cachedTargets[(i + run) % cachedTargets.length]!);
      // 1 GiB: the directory store, the uncached relay, and each cache cold (purged) then warm.
      if (PHASES.has('warm')) push(figures.warm, fsTarget.name, await getMiBs(fsTarget));
      if (PHASES.has('cold')) push(figures.cold, uncached.name, await getMiBs(uncached));
      for (const t of rotated) {
        if (PHASES.has('cold')) {
          await purge(t, hex(bigDigest));
          push(figures.cold, t.name, await getMiBs(t));
        }
        if (PHASES.has('warm')) {
          await fillUntilWarm(t);
          const before = await originBytes(t);
          push(figures.warm, t.name, await getMiBs(t));
          const pulled = (await originBytes(t)) - before;
          if (pulled !== 0) throw new Error(`${t.name}: the warm GET pulled ${pulled} bytes from the store`);
        }
      }
      // 4 KiB: wrk over keep-alive connections, the directory store and each (warm) cache.
      if (PHASES.has('small'))
        for (const t of [fsTarget, ...rotated]) {
          const r = await wrk(contentUrl(t, 'small.bin'), {
            connections: 16,
            seconds: SMALL_SECONDS,
            headers: auth(t),
          });
          if (r.errors > 0) throw new Error(`${t.name}: ${r.errors} failed 4 KiB requests`);
          push(figures.small, t.name, r.rps);
        }
      // The crowd: each cache purged, and nginx started with an empty cache.
      if (PHASES.has('crowd')) {
        for (const client of CROWD_CLIENTS) {
          for (const t of rotated) {
            await purge(t, hex(crowdDigest));
            const url = contentUrl(t, 'crowd.bin');
            push(
              figures.crowd,
              crowdKey(t.name, client),
              await crowd(t.name, client, url, auth(t), () => originBytes(t)),
            );
          }
          const prefix = path.join(work, `nginx-${run}-${client}`);
          const nginx = await startNginxSliceCache(nginxBinary, prefix, server, crowdObjectKey);
          push(
            figures.crowd,
            crowdKey(NGINX_CROWD, client),
            await crowd('nginx', client, nginx.url, {}, nginx.originBytes),
          );
          await nginx.process.stop('SIGTERM', STOP_GRACE_MS);
          await rm(prefix, { recursive: true, force: true });
        }
      }
      process.stderr.write(`round ${run + 1}/${RUNS} done\n`);
      for (const [what, m] of Object.entries(figures))
        if (what !== 'crowd')
          process.stderr.write(
            `  ${what}: ${[...(m as Map<string, number[]>)].map(([k, v]) => `${k} ${v.at(-1)!.toFixed(0)}`).join(', ')}\n`,
          );
      process.stderr.write(
        `  crowd: ${[...figures.crowd].map(([k, v]) => `${k} p99 ${v.at(-1)!.ttfbP99Ms.toFixed(0)} ms ${(v.at(-1)!.originBytes / MiB).toFixed(1)} MiB`).join(', ')}\n`,
      );
    }

    const med = (m: Map<string, number[]>, k: string) => median(m.get(k) ?? [Number.NaN]);
    const crowdMed = (k: string) => {
      const rs = figures.crowd.get(k) ?? [];
      // NaN when the crowd did not run (--phases).
      const of = (pick: (r: CrowdResult) => number) => (rs.length > 0 ? median(rs.map(pick)) : Number.NaN);
      return {
        p50: of((r) => r.ttfbP50Ms),
        p99: of((r) => r.ttfbP99Ms),
        seconds: of((r) => r.seconds),
        origin: of((r) => r.originBytes),
      };
    };
    const fsWarm = med(figures.warm, fsTarget.name);
    const fsSmall = med(figures.small, fsTarget.name);
    const uncachedCold = med(figures.cold, uncached.name);
    const lines = [
      `bench/slice-cache.ts: ${SERVER}, ${BIG_BYTES / MiB} MiB and 4 KiB, crowd of ${CROWD} × ${CROWD_BYTES / MiB} MiB, medians of ${RUNS} interleaved rounds, ${os.cpus().length} CPUs, load average ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
      `  directory store: 1 GiB warm ${fsWarm.toFixed(0)} MiB/s, 4 KiB ${fsSmall.toFixed(0)} req/s; S3 uncached relay: 1 GiB ${uncachedCold.toFixed(0)} MiB/s`,
      '',
      '| slice | warm 1 GiB MiB/s (× directory) | warm 4 KiB req/s (× directory) | cold 1 GiB MiB/s (× uncached) |',
      '| --- | --- | --- | --- |',
    ];
    for (const t of cachedTargets) {
      const w = med(figures.warm, t.name);
      const s = med(figures.small, t.name);
      const c = med(figures.cold, t.name);
      lines.push(
        `| ${t.label} | ${w.toFixed(0)} (${(w / fsWarm).toFixed(2)}×) | ${s.toFixed(0)} (${(s / fsSmall).toFixed(2)}×) | ${c.toFixed(0)} (${(c / uncachedCold).toFixed(2)}×) |`,
      );
    }
    lines.push(
      '',
      `| crowd of ${CROWD} cold readers | client | TTFB p50 / p99 ms (p99 × nginx) | crowd s | origin MiB (× object) |`,
      '| --- | --- | --- | --- | --- |',
    );
    for (const client of CROWD_CLIENTS) {
      const nginxP99 = crowdMed(crowdKey(NGINX_CROWD, client)).p99;
      for (const name of [...cachedTargets.map((t) => t.name), NGINX_CROWD]) {
        const k = crowdMed(crowdKey(name, client));
        lines.push(
          `| ${name} | ${CROWD_CLIENT_LABEL[client]} | ${k.p50.toFixed(0)} / ${k.p99.toFixed(0)} (${(k.p99 / nginxP99).toFixed(2)}×) | ${k.seconds.toFixed(1)} | ${(k.origin / MiB).toFixed(1)} (${(k.origin / CROWD_BYTES).toFixed(2)}×) |`,
        );
      }
    }
    lines.push(
      '',
      'targets: warm 1 GiB ≥ 0.9× directory, warm 4 KiB ≥ 0.9× directory, cold 1 GiB ≥ 1.0× uncached; crowd: origin bytes and TTFB p99 against nginx',
    );
    console.log(lines.join('\n'));
  } finally {
    await bench.close();
    await server.destroy().catch(() => {});
    await stopAllS3Servers();
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * nginx with `slice`, `proxy_cache` and `proxy_cache_lock` in front of one S3 object: each slice a
 * ranged GET signed like the gateway's (Range is not a signed header), every subrequest logged with
 * `$upstream_bytes_received` so the origin bytes can be summed.
 */
async function startNginxSliceCache(
  binary: string,
  prefix: string,
  server: Awaited<ReturnType<typeof startS3Server>>,
  key: string,
): Promise<{ process: Awaited<ReturnType<typeof startNginx>>; url: string; originBytes: () => Promise<number> }> {
  await mkdir(path.join(prefix, 'tmp'), { recursive: true });
  const port = await freeLoopbackPort();
  const endpoint = new URL(server.endpoint);
  const signed = server.client().signedHead({ method: 'GET', key });
  const head = new Map([['host', endpoint.host]]);
  for (const [name, value] of Object.entries(signed.headers)) head.set(name.toLowerCase(), value);
  const headers = [...head].map(([name, value]) => `proxy_set_header ${name} "${value}";`).join(' ');
  const log = path.join(prefix, 'access.log');
  const location = [
    'location = /ready { return 200; }',
    'location = /crowd.bin {',
    `slice ${NGINX_SLICE_MIB}m;`,
    'proxy_cache slices; proxy_cache_key $uri$slice_range; proxy_cache_valid 200 206 1h;',
    'proxy_cache_lock on; proxy_cache_lock_timeout 300s; proxy_cache_lock_age 300s;',
    'proxy_set_header Range $slice_range;',
    `proxy_http_version 1.1; proxy_pass http://${endpoint.host}${signed.path};`,
    headers,
    `log_subrequest on; access_log ${log} upstream;`,
    '}',
  ].join(' ');
  const conf = benchNginxConf({
    prefix,
    port,
    root: prefix,
    bodyTemp: path.join(prefix, 'tmp'),
    http: `log_format upstream '$upstream_bytes_received'; proxy_cache_path ${prefix}/cache levels=1:2 keys_zone=slices:16m max_size=16g inactive=1h use_temp_path=off;`,
    server: location,
    workersAsRoot: true,
  });
  await writeFile(path.join(prefix, 'nginx.conf'), conf);
  const url = `http://127.0.0.1:${port}/crowd.bin`;
  // Ready on a path of its own (not the object's), so the cache is still cold.
  const started = await startNginx(binary, prefix, `http://127.0.0.1:${port}/ready`);
  return {
    process: started,
    url,
    originBytes: async () => {
      const text = await readFile(log, 'utf8').catch(() => '');
      let sum = 0;
      for (const line of text.split('\n'))
        for (const v of line.split(/[,:]\s*/)) if (/^\d+$/.test(v.trim())) sum += Number(v.trim());
      return sum;
    },
  };
}

await main();
