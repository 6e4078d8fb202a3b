/**
 * Threads or processes for a gateway's workers (issue #37, docs/architecture.md "Workers"): the
 * same bare 4 KiB HTTP server served from one event loop, from N worker threads, and from N
 * cluster processes, each worker listening on the port with SO_REUSEPORT. Interleaved rounds of
 * `wrk -t1`; prints the medians of req/s, p99, CPU-s per 10k requests and the resident memory of
 * all the variant's processes. It measures the mechanism, not the gateway (whose per-request cost
 * is bench/content.ts's).
 *
 *   node_modules/.bin/node bench/worker-model.ts [--workers 2] [--rounds 5] [--seconds 3] [--connections 64]
 */
import { spawn } from 'node:child_process';
import cluster from 'node:cluster';
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { isMainThread, Worker } from 'node:worker_threads';
import { freeLoopbackPort } from '../lib/free-port.ts';
import { waitForHttp } from '../test/harness/index.ts';
import { benchArgs, cpuSeconds, median, rssBytes, wrk } from './support.ts';

const BODY = Buffer.alloc(4096, 'x');
const variant = process.env.WORKER_MODEL_VARIANT;

function listen(port: number): void {
  http
    .createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BODY.length });
      res.end(BODY);
    })
    .listen({ port, host: '127.0.0.1', reusePort: true, exclusive: true });
}

/** The child side: one variant's server on WORKER_MODEL_PORT. */
function serveVariant(): void {
  const port = Number(process.env.WORKER_MODEL_PORT);
  const workers = Number(process.env.WORKER_MODEL_WORKERS);
  if (variant === 'single') listen(port);
  else if (variant === 'threads') {
    if (!isMainThread) listen(port);
    else for (let i = 0; i < workers; i++) new Worker(new URL(import.meta.url));
  } else if (cluster.isPrimary) for (let i = 0; i < workers; i++) cluster.fork();
  else listen(port);
}

/** The process and its children (cluster workers), from /proc. */
async function processTree(pid: number): Promise<number[]> {
  const children = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
  const ids = children.split(' ').filter(Boolean).map(Number);
  return [pid, ...(await Promise.all(ids.map(processTree))).flat()];
}

async function main(): Promise<void> {
  const args = benchArgs({ workers: '2', rounds: '5', seconds: '3', connections: '64' });
  const variants = ['single', 'threads', 'processes'] as const;
  const results = new Map<string, { rps: number[]; p99: number[]; cpu: number[]; rss: number[] }>();
  for (const name of variants) results.set(name, { rps: [], p99: [], cpu: [], rss: [] });
  for (let round = 0; round < Number(args.rounds); round++) {
    for (const name of variants) {
      const port = await freeLoopbackPort();
      const child = spawn(process.execPath, [new URL(import.meta.url).pathname], {
        env: {
          ...process.env,
          WORKER_MODEL_VARIANT: name,
          WORKER_MODEL_PORT: String(port),
          WORKER_MODEL_WORKERS: args.workers,
        },
        stdio: 'inherit',
      });
      const url = `http://127.0.0.1:${port}/`;
      await waitForHttp(url, { what: `${name} server`, timeoutMs: 10_000 });
      await sleep(300); // every worker listening
      const pids = await processTree(child.pid!);
      const cpu0 = (await Promise.all(pids.map(cpuSeconds))).reduce((a, b) => a + b, 0);
      const run = await wrk(url, { connections: Number(args.connections), seconds: Number(args.seconds) });
      const cpu1 = (await Promise.all(pids.map(cpuSeconds))).reduce((a, b) => a + b, 0);
      const rss = (await Promise.all(pids.map(rssBytes))).reduce((a, b) => a + b, 0);
      const r = results.get(name)!;
      r.rps.push(run.rps);
      r.p99.push(run.p99Ms);
      r.cpu.push(((cpu1 - cpu0) / run.requests) * 10_000);
      r.rss.push(rss / 1024 / 1024);
      for (const pid of pids.reverse()) process.kill(pid, 'SIGKILL');
      await new Promise((resolve) => child.once('exit', resolve));
    }
  }
  process.stdout.write(`variant     req/s    p99 ms  CPU-s/10k  RSS MiB (all processes), ${args.workers} workers\n`);
  for (const [name, r] of results)
    process.stdout.write(
      `${name.padEnd(10)} ${median(r.rps).toFixed(0).padStart(7)} ${median(r.p99).toFixed(2).padStart(9)} ${median(r.cpu).toFixed(3).padStart(10)} ${median(r.rss).toFixed(1).padStart(8)}\n`,
    );
}

if (variant) serveVariant();
else await main();
