import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  freeLoopbackPort,
  makeTempDir,
  nginxMainConfig,
  REPO_ROOT,
  startGateway,
  startProcess,
  waitForHttp,
  type ManagedProcess,
} from '../test/harness/index.ts';
import {
  BenchRun,
  cpuSeconds,
  curl,
  median,
  MiB,
  putFile,
  startNginx,
  writeRandomFile,
  wrk,
  benchArgs,
} from './support.ts';

const args = benchArgs({ runs: '3', 'big-mib': '1024', 'small-seconds': '4', concurrency: '16' }, ['database-url']);
const RUNS = Number(args.runs);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const SMALL_BYTES = 4096;
const SMALL_SECONDS = Number(args['small-seconds']);
const CONCURRENCY = Number(args.concurrency);

/** ARKVORY_BENCH_NODE_OPTIONS, for every Node process the bench starts (a profile, say). */
const BENCH_NODE_OPTIONS = process.env.ARKVORY_BENCH_NODE_OPTIONS
  ? { NODE_OPTIONS: process.env.ARKVORY_BENCH_NODE_OPTIONS }
  : {};

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

async function startDeployNginx(
  work: string,
  gatewayAddress: string,
  port: number,
): Promise<ManagedProcess | undefined> {
  const nginx = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
  if (!nginx) return undefined;
  const dir = path.join(work, 'nginx');
  const t = path.join(dir, 'tmp');
  await import('node:fs/promises').then((fs) => fs.mkdir(t, { recursive: true }));
  const example = await readFile(path.join(REPO_ROOT, 'deploy/nginx/arkvory.conf'), 'utf8');
  // The shipped example, one gateway: its address for every server line, the listen port replaced,
  // no access log (as the other proxies measured keep none).
  const site = example
    .replace(/server 10\.0\.0\.1[12]:8080[^\n]*\n/g, '')
    .replaceAll('10.0.0.10:8080', gatewayAddress)
    .replace('listen 80;', `listen 127.0.0.1:${port};`)
    .replace(/access_log \S+ arkvory_access;/, 'access_log off;');
  await writeFile(path.join(dir, 'arkvory.conf'), site);
  await writeFile(
    path.join(dir, 'nginx.conf'),
    nginxMainConfig({
      prefix: dir,
      tempDir: t,
      workerProcesses: 1,
      workerConnections: 256,
      errorLogLevel: 'warn',
      http: `access_log off;\ninclude ${dir}/arkvory.conf;`,
    }),
  );
  return startNginx(nginx, dir, `http://127.0.0.1:${port}/health/live`);
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-bench-router-');
  const bench = await BenchRun.open(work, args['database-url']);
  try {
    const bigFile = path.join(work, 'big.bin');
    await writeRandomFile(bigFile, BIG_BYTES);
    const smallFile = path.join(work, 'small.bin');
    await writeFile(smallFile, randomBytes(SMALL_BYTES));

    // Measure the proxy, not the limiter: one principal would hit the default 12000/min rule.
    await writeFile(
      path.join(work, 'rules.yaml'),
      'rate_limits:\n  gateway_request:\n    - name: bench_skip_all\n      action: skip\n      match: {}\n',
    );
    // Unthrottled, with room for 2 × CONCURRENCY parallel downloads of one principal.
    const gateway = await bench.gateway('api', {
      ARKVORY_DATA_DIR: path.join(work, 'data'),
      ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2),
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(CONCURRENCY * 2),
      ARKVORY_RATE_LIMITS_FILE: path.join(work, 'rules.yaml'),
      // The router, the bare proxy and nginx are on loopback: listed, as the shipped examples list theirs.
      ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
      ...BENCH_NODE_OPTIONS,
    });
    const [key] = gateway.keys as [string];
    const gatewayBase = gateway.url;
    const gatewayChild = gateway.child;
    const routerProcess = bench.keep(
      await startGateway({
        env: {
          ARKVORY_LOG_LEVEL: 'warn',
          ARKVORY_ROLE: 'router',
          ARKVORY_ROUTER_BACKENDS: gatewayBase,
          ...BENCH_NODE_OPTIONS,
        },
        name: 'router',
        timeoutMs: 60_000,
      }),
    );
    const routerBase = routerProcess.url;
    const routerChild = routerProcess.child;

    const barePort = await freeLoopbackPort();
    const bareBase = `http://127.0.0.1:${barePort}`;
    const bareProxy = bench.keep(
      startProcess(process.execPath, ['--input-type=module', '-e', BARE_PROXY, String(barePort), gatewayBase], {
        name: 'the bare node:http proxy',
        env: { ...process.env, ...BENCH_NODE_OPTIONS },
      }),
    );
    await waitForHttp(`${bareBase}/health/live`, { what: bareProxy.name, timeoutMs: 10_000, process: bareProxy });
    const bareChild = bareProxy.child;
    const nginxPort = await freeLoopbackPort();
    const nginxBase = `http://127.0.0.1:${nginxPort}`;
    const nginxChild = await startDeployNginx(work, new URL(gatewayBase).host, nginxPort);
    if (nginxChild) bench.keep(nginxChild);
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
      const { status } = await putFile(`${gatewayBase}/api/v1/repositories/bench/artifacts/${name}`, file, {
        authorization: `Bearer ${key}`,
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
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
