/**
 * Static-HTTP store benchmark (issue 13): the same 1 GiB file through two gateways in one run, one
 * on the filesystem store and one in front of nginx as the static store (deploy/static-store's
 * site, WebDAV writes, sendfile reads); target: gateway→nginx ≥ 0.7× gateway-on-fs.
 *
 *   node bench/static-store.ts [--database-url postgres://postgres@127.0.0.1:5432/postgres]
 *                              [--runs 3] [--big-mib 1024] [--concurrency 4]
 *
 * A third column, a bare undici pass-through (bench/static-store-passthrough.ts) in front of the same
 * nginx, shows the ceiling any gateway→nginx path reaches on this machine.
 *
 * Upload: one PUT of the file to each gateway (MiB/s, one run; it includes hashing and, for the
 * static store, the PUT to tmp/ and the MOVE). Download: MiB/s for 1 stream and for --concurrency
 * parallel streams (whole-file curl to /dev/null), medians of --runs runs, interleaved so
 * background load hits both alike; plus the peak RSS of each gateway while serving. Temporary
 * databases and directories are removed at the end.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  freeLoopbackPort,
  makeTempDir,
  nginxMainConfig,
  REPO_ROOT,
  startProcess,
  waitUntil,
  type ManagedProcess,
} from '../test/harness/index.ts';
import { siteConfig } from '../test/support/static-store-config.ts';
import {
  BenchRun,
  curl,
  LOCAL_POSTGRES_URL,
  median,
  MiB,
  putFile,
  samplePeakRss,
  startNginx,
  writeRandomFile,
  benchArgs,
} from './support.ts';

const args = benchArgs({ 'database-url': LOCAL_POSTGRES_URL, runs: '3', 'big-mib': '1024', concurrency: '4' });
const RUNS = Number(args.runs);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const STREAMS = Number(args.concurrency);

interface Gateway {
  name: string;
  base: string;
  child: ManagedProcess['child'];
  keys: string[];
  /** Download path; default the artifact's content route. */
  path?: string;
}

async function measure(gw: Gateway, streams: number): Promise<{ mibPerSec: number; peakRss: number }> {
  const rss = samplePeakRss(gw.child.pid!);
  const started = process.hrtime.bigint();
  const url = `${gw.base}${gw.path ?? '/api/v1/repositories/bench/artifacts/big.bin/content'}`;
  const results = await Promise.all(
    Array.from({ length: streams }, (_, s) => curl(url, gw.keys[s] ? { authorization: `Bearer ${gw.keys[s]}` } : {})),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const peakRss = await rss.stop();
  for (const r of results)
    if (r.status !== 200 || r.bytes !== BIG_BYTES)
      throw new Error(`${gw.name}: download got ${r.status} with ${r.bytes} bytes`);
  return { mibPerSec: (streams * BIG_BYTES) / MiB / seconds, peakRss };
}

async function main(): Promise<void> {
  const nginxBin = ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
  if (!nginxBin) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
  const work = await makeTempDir('arkvory-bench-static-');
  const bench = new BenchRun(args['database-url']!);
  try {
    const file = path.join(work, 'big.bin');
    process.stderr.write(`writing a ${BIG_BYTES / MiB} MiB file under ${work}\n`);
    await writeRandomFile(file, BIG_BYTES);

    // nginx as the static store, from the shipped site config.
    const nginxPort = await freeLoopbackPort();
    const prefix = path.join(work, 'nginx');
    const storeRoot = path.join(work, 'store');
    await mkdir(prefix, { recursive: true });
    await mkdir(storeRoot, { recursive: true });
    await writeFile(path.join(prefix, 'site.conf'), await siteConfig({ port: nginxPort, root: storeRoot, move: true }));
    await writeFile(
      path.join(prefix, 'nginx.conf'),
      nginxMainConfig({
        prefix,
        tempDir: prefix,
        bodyTempPath: path.join(work, 'body'),
        workerProcesses: 'auto',
        workerConnections: 1024,
        http: `access_log off;\ninclude ${prefix}/site.conf;`,
      }),
    );
    const storeUrl = `http://127.0.0.1:${nginxPort}/arkvory/`;
    bench.keep(await startNginx(nginxBin, prefix, storeUrl));

    // One database per gateway: each is bound to its own store.
    const startBenchGateway = async (name: string, env: Record<string, string>): Promise<Gateway> => {
      const gateway = await bench.gateway(
        name,
        { ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2), ...env },
        { writers: STREAMS },
      );
      return { name, base: gateway.url, child: gateway.child, keys: gateway.keys };
    };
    const gateways = [
      await startBenchGateway('gateway-fs', { ARKVORY_DATA_DIR: path.join(work, 'data-fs') }),
      await startBenchGateway('gateway-nginx', {
        ARKVORY_DATA_DIR: path.join(work, 'data-http'),
        ARKVORY_STORAGE_URL: storeUrl,
        ...(process.env.BENCH_PROFILE
          ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${process.env.BENCH_PROFILE}` }
          : {}),
      }),
    ];

    // The ceiling: a bare undici pass-through in front of the same nginx, reading the stored blob.
    const passPort = await freeLoopbackPort();
    const pass = startProcess(
      process.execPath,
      [path.join(REPO_ROOT, 'bench/static-store-passthrough.ts'), storeUrl, String(passPort)],
      { name: 'passthrough' },
    );
    bench.keep(pass);
    await waitUntil(() => pass.stdout() !== '', { what: 'the passthrough', timeoutMs: 60_000, process: pass });

    const uploads: Record<string, number> = {};
    for (const gw of gateways.slice(0, 2)) {
      const { status, seconds } = await putFile(`${gw.base}/api/v1/repositories/bench/artifacts/big.bin`, file, {
        authorization: `Bearer ${gw.keys[0]}`,
        'content-length': String(BIG_BYTES),
      });
      if (status !== 201) throw new Error(`${gw.name}: upload answered ${status}`);
      uploads[gw.name] = BIG_BYTES / MiB / seconds;
      process.stderr.write(`${gw.name}: upload ${uploads[gw.name]!.toFixed(0)} MiB/s\n`);
    }
    // The pass-through reads the blob the nginx gateway stored, by its content address.
    const blobSha = await readdir(path.join(storeRoot, 'blobs', 'sha256')).then(async (a) => {
      const b = await readdir(path.join(storeRoot, 'blobs', 'sha256', a[0]!));
      return (await readdir(path.join(storeRoot, 'blobs', 'sha256', a[0]!, b[0]!)))[0]!;
    });
    const passthrough: Gateway = {
      name: 'undici-passthrough',
      base: `http://127.0.0.1:${passPort}`,
      child: pass.child,
      keys: [],
      path: `/blobs/sha256/${blobSha.slice(0, 2)}/${blobSha.slice(2, 4)}/${blobSha}`,
    };
    gateways.push(passthrough);
    // Warm the page cache for both copies.
    for (const gw of gateways) await measure(gw, 1);

    const results: Record<string, { one: number[]; many: number[]; rss: number[] }> = {};
    for (const gw of gateways) results[gw.name] = { one: [], many: [], rss: [] };
    for (let run = 0; run < RUNS; run++) {
      for (const gw of gateways) {
        const r = results[gw.name]!;
        r.one.push((await measure(gw, 1)).mibPerSec);
        const many = await measure(gw, STREAMS);
        r.many.push(many.mibPerSec);
        r.rss.push(many.peakRss);
        process.stderr.write(
          `run ${run + 1}/${RUNS} ${gw.name}: 1×${r.one.at(-1)!.toFixed(0)} MiB/s, ${STREAMS}×${many.mibPerSec.toFixed(0)} MiB/s\n`,
        );
      }
    }

    const fs = results['gateway-fs']!;
    const web = results['gateway-nginx']!;
    console.log(
      `\nbench/static-store.ts: ${BIG_BYTES / MiB} MiB file, medians of ${RUNS} runs, ${os.cpus().length} CPUs, load average ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
    console.table(
      gateways.map((gw) => ({
        server: gw.name,
        'upload MiB/s': uploads[gw.name] === undefined ? '-' : Math.round(uploads[gw.name]!),
        '1 stream MiB/s': Math.round(median(results[gw.name]!.one)),
        [`${STREAMS} streams MiB/s`]: Math.round(median(results[gw.name]!.many)),
        'peak RSS MiB': Number((Math.max(...results[gw.name]!.rss) / MiB).toFixed(1)),
      })),
    );
    const ceiling = results['undici-passthrough']!;
    console.log(
      `undici pass-through / gateway on fs (the ceiling of any nginx path here): 1 stream ${(median(ceiling.one) / median(fs.one)).toFixed(2)}×, ${STREAMS} streams ${(median(ceiling.many) / median(fs.many)).toFixed(2)}×`,
    );
    console.log(
      `gateway→nginx / undici pass-through: 1 stream ${(median(web.one) / median(ceiling.one)).toFixed(2)}×, ${STREAMS} streams ${(median(web.many) / median(ceiling.many)).toFixed(2)}×`,
    );
    console.log(
      `gateway→nginx / gateway on fs: 1 stream ${(median(web.one) / median(fs.one)).toFixed(2)}×, ${STREAMS} streams ${(median(web.many) / median(fs.many)).toFixed(2)}×, upload ${(uploads['gateway-nginx']! / uploads['gateway-fs']!).toFixed(2)}× (target for downloads: ≥ 0.7×)`,
    );
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
