/**
 * Profiling helper for the S3 store (issue 23): one gateway per phase on one S3 server, started with
 * `--cpu-prof` (with --profile-dir), so a profile holds one kind of transfer only. Phase `put`: direct
 * signed PUTs and gateway PUTs of the same file, both sent by curl -T, interleaved (--node-client adds
 * the gateway PUT from a Node http client); phase `get`: direct signed GETs and gateway GETs,
 * interleaved (--relay adds a bare Node relay, `http.get` piped to the response: the least any Node
 * relay costs; --nginx-relay adds nginx relaying the same signed GET with `proxy_pass`, unbuffered, one
 * worker: what a relay written in C costs on the same cores). For each transfer it prints wall seconds and the CPU seconds the gateway (or relay),
 * the S3 server and the client (curl, from /usr/bin/time) spent, which tells a CPU-bound gateway from
 * one waiting on its upstream link and shows where the CPU of two shared cores goes.
 *
 * Phase `copy` times a server-side CopyObject of the file against its direct PUT (no gateway).
 *
 *   node bench/s3-profile.ts --server minio|seaweedfs [--phase get,put,copy] [--runs 2] [--big-mib 1024]
 *                            [--profile-dir DIR] [--compare-root /other/checkout] [--relay] [--nginx-relay]
 *                            [--node-client]
 *                            [--node-options '--max-semi-space-size=4']
 *
 * Profiles land in DIR/<server>-<phase>/ (summarise with bench/cpu-profile-summary.ts).
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  freeLoopbackPort,
  makeTempDir,
  REPO_ROOT,
  startGateway as startHarnessGateway,
  startProcess,
  STOP_GRACE_MS,
  waitForHttp,
  type ManagedProcess,
} from '../test/harness/index.ts';
import { startS3Server, stopAllS3Servers, type S3ServerKind } from '../test/support/s3-server.ts';
import { copyObject, S3_DEFAULT_LIMITS } from '../storage-adapter/s3/index.ts';
import {
  benchNginxConf,
  BenchRun,
  cpuSeconds,
  curlWith as curl,
  MiB,
  putFile,
  sigV4CurlArgs as signed,
  startNginx,
  writeRandomFile,
} from './support.ts';

const { values: args } = parseArgs({
  options: {
    server: { type: 'string', default: 'minio' },
    phase: { type: 'string', default: 'get,put' },
    runs: { type: 'string', default: '2' },
    'big-mib': { type: 'string', default: '1024' },
    'profile-dir': { type: 'string' },
    'node-options': { type: 'string', default: '--max-semi-space-size=4' },
    // Another checkout (e.g. /work/main) whose gateway is measured in the same rounds, not profiled.
    'compare-root': { type: 'string' },
    // get: also a bare Node relay (http.get piped to the response) in the same rounds, the upper bound of any relay.
    relay: { type: 'boolean', default: false },
    // get: also nginx (proxy_pass, unbuffered, one worker) relaying the same signed GET: what a relay in C costs.
    'nginx-relay': { type: 'boolean', default: false },
    // put: also the gateway PUT from a Node http client (what bench/s3-store.ts used to send), CPU of this process.
    'node-client': { type: 'boolean', default: false },
  },
});
const BIG = Number(args['big-mib']) * MiB;
const RUNS = Number(args.runs);
const kind = args.server as S3ServerKind;

function serverPid(port: number): number {
  const out = execFileSync('ss', ['-ltnpH', `sport = :${port}`]).toString();
  return Number(/pid=(\d+)/.exec(out)?.[1] ?? 0);
}

async function measured<T>(pids: number[], fn: () => Promise<T>): Promise<{ value: T; wall: number; cpu: number[] }> {
  const before = await Promise.all(pids.map(cpuSeconds));
  const t0 = process.hrtime.bigint();
  const value = await fn();
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const after = await Promise.all(pids.map(cpuSeconds));
  return { value, wall, cpu: after.map((a, i) => a - before[i]!) };
}

/** A curl transfer under /usr/bin/time: curl's result and the CPU seconds curl itself spent (user + system). */
async function timedCurl(argv: readonly string[]): Promise<Awaited<ReturnType<typeof curl>> & { clientCpu: number }> {
  const out = path.join(work, `time-${randomBytes(4).toString('hex')}`);
  const child = spawn(
    '/usr/bin/time',
    [
      '-f',
      '%U %S',
      '-o',
      out,
      'curl',
      '-s',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code} %{size_download} %{size_upload} %{time_total}',
      ...argv,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let text = '';
  child.stdout!.on('data', (d: Buffer) => (text += d.toString()));
  await new Promise((r) => child.once('close', r));
  const [status, down, up, seconds] = text.trim().split(' ').map(Number);
  const [user, sys] = (await readFile(out, 'utf8')).trim().split('\n').at(-1)!.split(' ').map(Number);
  await rm(out, { force: true });
  return {
    status: status ?? 0,
    bytes: Math.max(down ?? 0, up ?? 0),
    seconds: seconds ?? 0,
    clientCpu: (user ?? 0) + (sys ?? 0),
  };
}

/**
 * A bare relay, no Arkvory logic: `http.get` of one signed S3 URL piped into the response (what any
 * Node relay costs at least; the upper bound for the gateway). The signed headers come from argv.
 */
const RELAY_SOURCE = `
import http from 'node:http';
const [port, target, headersJson] = process.argv.slice(1);
const t = new URL(target);
const headers = JSON.parse(headersJson);
http.createServer((req, res) => {
  http.get({ host: t.hostname, port: t.port, path: t.pathname, headers }, (up) => {
    res.writeHead(up.statusCode, { 'content-length': up.headers['content-length'] });
    up.pipe(res);
  }).on('error', () => res.destroy());
}).listen(Number(port), '127.0.0.1');
`;

/**
 * nginx in front of the S3 server, relaying one signed GET (the signature's headers set on the
 * upstream request) with `proxy_buffering off`, so every byte passes straight through one worker.
 */
async function startNginxRelay(
  directUrl: string,
  server: Awaited<ReturnType<typeof startS3Server>>,
): Promise<{ master: ManagedProcess; worker: number; url: string }> {
  const binary = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
  if (!binary) throw new Error('--nginx-relay needs nginx (apt-get install nginx-light)');
  const prefix = path.join(work, 'nginx-relay');
  await mkdir(path.join(prefix, 'tmp'), { recursive: true });
  const port = await freeLoopbackPort();
  const target = new URL(directUrl);
  const request = server.client().signedHead({ method: 'GET', key: 'direct/big.bin' });
  // The signed head (Host included), each header once: a second Host line is a 400.
  const head = new Map([['host', target.host]]);
  for (const [name, value] of Object.entries(request.headers)) head.set(name.toLowerCase(), value);
  const headers = [...head].map(([name, value]) => `proxy_set_header ${name} "${value}";`).join(' ');
  const conf = benchNginxConf({
    prefix,
    port,
    root: prefix,
    bodyTemp: path.join(prefix, 'tmp'),
    server: `location / { proxy_pass http://${target.host}${target.pathname}; proxy_http_version 1.1; proxy_buffering off; ${headers} }`,
    workerProcesses: 1,
    workersAsRoot: true,
  });
  await writeFile(path.join(prefix, 'nginx.conf'), conf);
  const url = `http://127.0.0.1:${port}/`;
  // One byte (Range is not among the signed headers): the signature and the path are right.
  const master = bench.keep(
    await startNginx(binary, prefix, url, { headers: { range: 'bytes=0-0' }, isReady: (status) => status === 206 }),
  );
  const worker = Number(
    execFileSync('pgrep', ['-P', String(master.child.pid)])
      .toString()
      .trim()
      .split('\n')[0],
  );
  return { master, worker, url };
}

async function put(url: string, key: string, file: string, size: number, digest: string): Promise<number> {
  const headers = {
    authorization: `Bearer ${key}`,
    'content-length': String(size),
    'content-digest': `sha-256=:${digest}:`,
  };
  return (await putFile(url, file, headers)).status;
}

const work = await makeTempDir('arkvory-s3prof-');
const bench = await BenchRun.open(work, undefined);
try {
  const file = path.join(work, 'big.bin');
  const digest = await writeRandomFile(file, BIG);
  const server = await startS3Server(kind, { bucket: 'arkvory-prof' });
  const s3pid = serverPid(server.port);

  if (args.phase.split(',').includes('copy')) {
    // What the temporary path's commit() costs: a server-side CopyObject of the whole object (no
    // bytes through the gateway), timed against the direct PUT of the same bytes.
    const client = server.client();
    const direct = `${server.endpoint}/${server.bucket}/copy/source.bin`;
    for (let r = 0; r < RUNS; r++) {
      const d = await measured([s3pid], () => curl([...signed(server), '-T', file, direct]));
      console.log(
        `${kind} copy direct PUT: ${(BIG / MiB / d.wall).toFixed(0)} MiB/s, ${d.wall.toFixed(2)} s wall, ${kind} CPU ${d.cpu[0]!.toFixed(2)} s`,
      );
      const c = await measured([s3pid], () =>
        copyObject(client, 'copy/source.bin', `copy/target-${r}.bin`, BIG, S3_DEFAULT_LIMITS, 600_000),
      );
      console.log(
        `${kind} copy ${c.value}: ${(BIG / MiB / c.wall).toFixed(0)} MiB/s, ${c.wall.toFixed(2)} s wall, ${kind} CPU ${c.cpu[0]!.toFixed(2)} s, load ${os.loadavg()[0]!.toFixed(1)}`,
      );
      await client.delete(`copy/target-${r}.bin`);
    }
  }
  for (const phase of args.phase.split(',').filter((p) => p !== 'copy')) {
    const newDatabase = async () => {
      const { url, keys } = await bench.seededDatabase();
      return { url, key: keys[0]! };
    };
    const { url, key } = await newDatabase();
    const profDir = args['profile-dir'] ? path.join(args['profile-dir'], `${kind}-${phase}`) : undefined;
    if (profDir) await mkdir(profDir, { recursive: true });
    let started = 0;
    const startGateway = async (profiled: boolean, root = REPO_ROOT, db = url, prefix = `${phase}/`) => {
      const nodeOptions = [args['node-options'], profiled && profDir ? `--cpu-prof --cpu-prof-dir=${profDir}` : '']
        .filter(Boolean)
        .join(' ');
      const gateway = await startHarnessGateway({
        checkout: root,
        name: `gateway in ${root}`,
        timeoutMs: 60_000,
        env: {
          ARKVORY_DATABASE_URL: db,
          ARKVORY_LOG_LEVEL: 'warn',
          ARKVORY_MAX_UPLOAD_BYTES: String(BIG * 2),
          ARKVORY_DATA_DIR: path.join(work, `data-${phase}-${started++}`),
          ...(nodeOptions ? { NODE_OPTIONS: nodeOptions } : {}),
          ...server.env(prefix),
        },
      });
      return { gateway: bench.keep(gateway), child: gateway.child, base: gateway.url, profiled };
    };
    const stopGateway = async (started: Awaited<ReturnType<typeof startGateway>>) => {
      await started.gateway.stop('SIGTERM', STOP_GRACE_MS);
      // The profiled gateway's stdout (e.g. --trace-gc lines) goes to DIR/<server>-<phase>/stdout.txt.
      if (started.profiled && profDir) await writeFile(path.join(profDir, 'stdout.txt'), started.gateway.stdout());
    };
    const directUrl = `${server.endpoint}/${server.bucket}/direct/big.bin`;
    if (phase === 'get') {
      // The object is uploaded by a gateway that is not profiled, so the profile holds GETs only.
      const seed = await startGateway(false);
      if ((await curl([...signed(server), '-T', file, directUrl])).status !== 200) throw new Error('direct PUT');
      const status = await put(`${seed.base}/api/v1/repositories/bench/artifacts/big.bin`, key, file, BIG, digest);
      if (status !== 201) throw new Error(`gateway PUT ${status}`);
      await stopGateway(seed);
    }
    const main = await startGateway(true);
    const { child, base } = main;
    let other: (Awaited<ReturnType<typeof startGateway>> & { key: string }) | undefined;
    if (args['compare-root']) {
      // Its own database and prefix (for get: the same bytes uploaded through it).
      const db = await newDatabase();
      other = { ...(await startGateway(false, args['compare-root'], db.url, `${phase}-compare/`)), key: db.key };
      if (phase === 'get') {
        const status = await put(
          `${other.base}/api/v1/repositories/bench/artifacts/big.bin`,
          db.key,
          file,
          BIG,
          digest,
        );
        if (status !== 201) throw new Error(`compared gateway PUT ${status}`);
      }
    }
    const pids = [child.pid!, s3pid];
    const line = (what: string, m: { wall: number; cpu: number[] }, clientCpu?: number) =>
      console.log(
        `${kind} ${phase} ${what}: ${(BIG / MiB / m.wall).toFixed(0)} MiB/s, ${m.wall.toFixed(2)} s wall, gateway CPU ${m.cpu[0]!.toFixed(2)} s, ${kind} CPU ${m.cpu[1]!.toFixed(2)} s${clientCpu === undefined ? '' : `, client CPU ${clientCpu.toFixed(2)} s`}, load ${os.loadavg()[0]!.toFixed(1)}`,
      );
    const gwUrl = `${base}/api/v1/repositories/bench/artifacts/big.bin`;
    let relay: ManagedProcess | undefined;
    let relayUrl = '';
    if (phase === 'get' && args.relay) {
      const port = await freeLoopbackPort();
      const request = server.client().signedHead({ method: 'GET', key: 'direct/big.bin' });
      relay = bench.keep(
        startProcess(
          process.execPath,
          ['--input-type=module', '-e', RELAY_SOURCE, String(port), directUrl, JSON.stringify(request.headers)],
          { name: 'the bare relay', env: process.env },
        ),
      );
      relayUrl = `http://127.0.0.1:${port}/`;
      await waitForHttp(relayUrl, { what: 'the bare relay', timeoutMs: 10_000, process: relay });
    }
    /** One whole-file GET by curl through a relay: timed, the relay's and the server's CPU, checked whole. */
    const timedGet = async (what: string, cpuOf: number[], argv: string[]) => {
      const m = await measured(cpuOf, () => timedCurl(argv));
      if (m.value.bytes !== BIG) throw new Error(`${what}: ${m.value.status} with ${m.value.bytes} bytes`);
      line(what, m, m.value.clientCpu);
    };
    let nginx: Awaited<ReturnType<typeof startNginxRelay>> | undefined;
    if (phase === 'get' && args['nginx-relay']) nginx = await startNginxRelay(directUrl, server);
    if (phase === 'put') {
      for (let r = 0; r < RUNS; r++) {
        const d = await measured(pids, () => timedCurl([...signed(server), '-T', file, directUrl]));
        line('direct PUT (curl)', d, d.value.clientCpu);
        // The same client as the direct PUT: curl -T with the gateway's headers.
        const c = await measured(pids, () =>
          timedCurl([
            '-H',
            `authorization: Bearer ${key}`,
            '-H',
            `content-digest: sha-256=:${digest}:`,
            '-T',
            file,
            `${gwUrl}-curl-${r}`,
          ]),
        );
        if (c.value.status !== 201) throw new Error(`gateway PUT (curl) ${c.value.status}`);
        line('gateway PUT (curl)', c, c.value.clientCpu);
        if (other) {
          const o = await measured([other.child.pid!, s3pid], () =>
            timedCurl([
              '-H',
              `authorization: Bearer ${other.key}`,
              '-H',
              `content-digest: sha-256=:${digest}:`,
              '-T',
              file,
              `${other.base}/api/v1/repositories/bench/artifacts/big-${r}.bin`,
            ]),
          );
          if (o.value.status !== 201) throw new Error(`compared gateway PUT (curl) ${o.value.status}`);
          line(`gateway PUT (curl, ${args['compare-root']})`, o, o.value.clientCpu);
        }
        if (args['node-client']) {
          const own = process.cpuUsage();
          const g = await measured(pids, () => put(`${gwUrl}-${r}`, key, file, BIG, digest));
          const ownCpu = process.cpuUsage(own);
          if (g.value !== 201) throw new Error(`gateway PUT ${g.value}`);
          line('gateway PUT (node http client)', g, (ownCpu.user + ownCpu.system) / 1e6);
        }
      }
    } else {
      for (let r = 0; r < RUNS; r++) {
        await timedGet('direct GET', pids, [...signed(server), directUrl]);
        await timedGet('gateway GET', pids, ['-H', `authorization: Bearer ${key}`, `${gwUrl}/content`]);
        if (relay) await timedGet('bare node relay GET (CPU as gateway)', [relay.child.pid!, s3pid], [relayUrl]);
        if (nginx) await timedGet('nginx relay GET (CPU as gateway)', [nginx.worker, s3pid], [nginx.url]);
        if (other)
          await timedGet(
            `gateway GET (${args['compare-root']})`,
            [other.child.pid!, s3pid],
            [
              '-H',
              `authorization: Bearer ${other.key}`,
              `${other.base}/api/v1/repositories/bench/artifacts/big.bin/content`,
            ],
          );
      }
    }
    await relay?.stop('SIGTERM', STOP_GRACE_MS);
    await nginx?.master.stop('SIGTERM', STOP_GRACE_MS);
    await stopGateway(main);
    if (other) await stopGateway(other);
  }
} finally {
  await bench.close();
  await stopAllS3Servers();
  await rm(work, { recursive: true, force: true });
}
