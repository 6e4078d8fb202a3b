/**
 * Download benchmark (issue 4): one 1 GiB file and one 4 KiB file served three ways in one run:
 * through the gateway (authenticated, unthrottled), through a minimal Node
 * `fs.createReadStream().pipe(res)` server, and through nginx when it is installed.
 *
 *   node bench/content.ts [--database-url postgres://postgres@127.0.0.1:5432/postgres]
 *                         [--runs 3] [--big-mib 1024] [--small-requests 2000] [--concurrency 16]
 *
 * Large file: MiB/s for 1 stream and for 16 parallel streams (each a whole-file curl to
 * /dev/null), the median of --runs runs, and the ratio gateway/baseline. Small file: requests/s
 * with p50/p99 latency over keep-alive connections. While the gateway serves 16 parallel streams
 * its RSS is sampled every 50 ms; the peak is printed. A temporary database (dropped at the end)
 * and temporary directories are used; nothing is left behind.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import {
  freeLoopbackPort,
  makeTempDir,
  REPO_ROOT,
  startProcess,
  STOP_GRACE_MS,
  waitUntil,
} from '../test/harness/index.ts';
import {
  benchNginxConf,
  BenchRun,
  curl,
  LOCAL_POSTGRES_URL,
  median,
  MiB,
  percentile,
  putFile,
  rssBytes,
  samplePeakRss,
  startNginx,
  writeRandomFile,
  benchArgs,
} from './support.ts';

const args = benchArgs({
  'database-url': LOCAL_POSTGRES_URL,
  runs: '3',
  'big-mib': '1024',
  'small-requests': '2000',
  concurrency: '16',
});
const RUNS = Number(args.runs);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const SMALL_BYTES = 4096;
const SMALL_REQUESTS = Number(args['small-requests']);
const STREAMS = Number(args.concurrency);

interface Target {
  name: string;
  bigUrl: string;
  smallUrl: string;
  headers(run: number, stream: number): Record<string, string>;
  pid?: number;
}

/** MiB/s of `streams` parallel whole-file downloads; also the peak RSS of `pid` meanwhile. */
async function measureBig(
  target: Target,
  streams: number,
  run: number,
): Promise<{ mibPerSec: number; peakRss: number }> {
  const rss = target.pid ? samplePeakRss(target.pid) : undefined;
  const started = process.hrtime.bigint();
  const results = await Promise.all(
    Array.from({ length: streams }, (_, s) => curl(target.bigUrl, target.headers(run, s))),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const peakRss = (await rss?.stop()) ?? 0;
  for (const r of results)
    if (r.status !== 200 || r.bytes !== BIG_BYTES)
      throw new Error(`${target.name}: download got ${r.status} with ${r.bytes} bytes`);
  return { mibPerSec: (streams * BIG_BYTES) / MiB / seconds, peakRss };
}

/** Requests/s and latency percentiles for the 4 KiB file over `STREAMS` keep-alive connections. */
async function measureSmall(
  target: Target,
  run: number,
): Promise<{ rps: number; p50Ms: number; p99Ms: number; errors: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: STREAMS });
  const latencies: number[] = [];
  let errors = 0;
  let next = 0;
  const one = (headers: Record<string, string>) =>
    new Promise<void>((resolve) => {
      const t0 = process.hrtime.bigint();
      http
        .get(target.smallUrl, { agent, headers }, (res) => {
          let n = 0;
          res.on('data', (d: Buffer) => (n += d.length));
          res.on('end', () => {
            if (res.statusCode !== 200 || n !== SMALL_BYTES) errors++;
            latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
            resolve();
          });
        })
        .on('error', () => {
          errors++;
          resolve();
        });
    });
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: STREAMS }, async (_, w) => {
      while (next++ < SMALL_REQUESTS) await one(target.headers(run, w));
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  agent.destroy();
  return { rps: SMALL_REQUESTS / seconds, p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99), errors };
}

async function main(): Promise<void> {
  // nginx workers run as an unprivileged user and must traverse to the files.
  const work = await makeTempDir('arkvory-bench-');
  const files = path.join(work, 'files');
  const dataDir = path.join(work, 'data');
  const bench = new BenchRun(args['database-url']!);
  try {
    // One principal per stream and run: per-principal limits (admission, rate rules) never bind.
    const db = await bench.seededDatabase(RUNS * STREAMS);
    const keys = Array.from({ length: RUNS }, (_, run) => db.keys.slice(run * STREAMS, (run + 1) * STREAMS));

    process.stderr.write(`writing a ${BIG_BYTES / MiB} MiB and a 4 KiB file under ${files}\n`);
    await mkdir(files, { recursive: true });
    await writeRandomFile(path.join(files, 'big.bin'), BIG_BYTES);
    await writeFile(path.join(files, 'small.bin'), randomBytes(SMALL_BYTES));

    // Gateway.
    const gatewayPort = await freeLoopbackPort();
    const gatewayBase = `http://127.0.0.1:${gatewayPort}`;
    const startBenchGateway = () =>
      bench.gateway(
        'gateway',
        { ARKVORY_DATA_DIR: dataDir, ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2) },
        { databaseUrl: db.url, port: gatewayPort },
      );
    let gateway = await startBenchGateway();
    for (const name of ['big.bin', 'small.bin']) {
      const { status } = await putFile(
        `${gatewayBase}/api/v1/repositories/bench/artifacts/${name}`,
        path.join(files, name),
        {
          authorization: `Bearer ${keys[0]![0]}`,
        },
      );
      if (status !== 201) throw new Error(`upload of ${name} answered ${status}`);
    }
    // Restart, so the download figures (RSS above all) carry nothing over from the 1 GiB upload.
    await gateway.stop('SIGTERM', STOP_GRACE_MS);
    gateway = await startBenchGateway();
    await new Promise((r) => setTimeout(r, 1000));
    const idleRss = await rssBytes(gateway.child.pid!);

    // Minimal Node baseline.
    const basePort = await freeLoopbackPort();
    const baseline = startProcess(
      process.execPath,
      [path.join(REPO_ROOT, 'bench/content-node-baseline.ts'), files, String(basePort)],
      {
        name: 'node baseline',
      },
    );
    bench.keep(baseline);
    await waitUntil(() => baseline.logs().includes('ready'), {
      what: 'the node baseline',
      timeoutMs: 60_000,
      process: baseline,
    });

    const targets: Target[] = [
      {
        name: 'gateway',
        bigUrl: `${gatewayBase}/api/v1/repositories/bench/artifacts/big.bin/content`,
        smallUrl: `${gatewayBase}/api/v1/repositories/bench/artifacts/small.bin/content`,
        headers: (run, s) => ({ authorization: `Bearer ${keys[run]![s % STREAMS]}` }),
        pid: gateway.child.pid!,
      },
      {
        name: 'node-baseline',
        bigUrl: `http://127.0.0.1:${basePort}/big.bin`,
        smallUrl: `http://127.0.0.1:${basePort}/small.bin`,
        headers: () => ({}),
        pid: baseline.child.pid!,
      },
    ];

    // nginx, when installed.
    const nginxBin = ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
    if (nginxBin) {
      const nginxPort = await freeLoopbackPort();
      const prefix = path.join(work, 'nginx');
      await mkdir(prefix, { recursive: true });
      const conf = path.join(prefix, 'nginx.conf');
      await writeFile(conf, benchNginxConf({ prefix, port: nginxPort, root: files, bodyTemp: `${prefix}/body` }));
      bench.keep(await startNginx(nginxBin, prefix, `http://127.0.0.1:${nginxPort}/small.bin`));
      targets.push({
        name: 'nginx',
        bigUrl: `http://127.0.0.1:${nginxPort}/big.bin`,
        smallUrl: `http://127.0.0.1:${nginxPort}/small.bin`,
        headers: () => ({}),
      });
    } else {
      process.stderr.write('nginx not installed: skipping the nginx column\n');
    }

    // Warm the page cache so every server reads from memory.
    await curl(targets[1]!.bigUrl, {});

    const results: Record<
      string,
      { one: number[]; many: number[]; rss: number[]; rps: number[]; p50: number[]; p99: number[]; errors: number }
    > = {};
    for (const t of targets) results[t.name] = { one: [], many: [], rss: [], rps: [], p50: [], p99: [], errors: 0 };
    // Interleave servers within each run, so background load hits them alike.
    for (let run = 0; run < RUNS; run++) {
      for (const t of targets) {
        const r = results[t.name]!;
        r.one.push((await measureBig(t, 1, run)).mibPerSec);
        const many = await measureBig(t, STREAMS, run);
        r.many.push(many.mibPerSec);
        r.rss.push(many.peakRss);
        const small = await measureSmall(t, run);
        r.rps.push(small.rps);
        r.p50.push(small.p50Ms);
        r.p99.push(small.p99Ms);
        r.errors += small.errors;
        process.stderr.write(
          `run ${run + 1}/${RUNS} ${t.name}: 1×${r.one.at(-1)!.toFixed(0)} MiB/s, ${STREAMS}×${many.mibPerSec.toFixed(0)} MiB/s, 4 KiB ${small.rps.toFixed(0)} req/s\n`,
        );
      }
    }

    const gw = results.gateway!;
    const base = results['node-baseline']!;
    const row = (name: string) => {
      const r = results[name]!;
      return {
        server: name,
        '1 stream MiB/s': Math.round(median(r.one)),
        [`${STREAMS} streams MiB/s`]: Math.round(median(r.many)),
        '4 KiB req/s': Math.round(median(r.rps)),
        'p50 ms': Number(median(r.p50).toFixed(2)),
        'p99 ms': Number(median(r.p99).toFixed(2)),
        'small errors': r.errors,
      };
    };
    console.log(
      `\nbench/content.ts: ${BIG_BYTES / MiB} MiB and 4 KiB files, medians of ${RUNS} runs, ${os.cpus().length} CPUs, load average ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
    console.table(targets.map((t) => row(t.name)));
    console.log(
      `gateway/baseline: 1 stream ${(median(gw.one) / median(base.one)).toFixed(2)}×, ${STREAMS} streams ${(median(gw.many) / median(base.many)).toFixed(2)}×, 4 KiB req/s ${(median(gw.rps) / median(base.rps)).toFixed(2)}×`,
    );
    if (results.nginx) {
      const n = results.nginx;
      console.log(
        `gateway/nginx:    1 stream ${(median(gw.one) / median(n.one)).toFixed(2)}×, ${STREAMS} streams ${(median(gw.many) / median(n.many)).toFixed(2)}×, 4 KiB req/s ${(median(gw.rps) / median(n.rps)).toFixed(2)}×`,
      );
    }
    console.log(`gateway RSS idle after start: ${(idleRss / MiB).toFixed(1)} MiB`);
    console.log(
      `gateway peak RSS during ${STREAMS} parallel ${BIG_BYTES / MiB} MiB downloads: ${(Math.max(...gw.rss) / MiB).toFixed(1)} MiB (per run: ${gw.rss.map((b) => (b / MiB).toFixed(1)).join(', ')})`,
    );
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
