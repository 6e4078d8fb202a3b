/**
 * What the front door (proxy/server/front-door.ts) costs per request: the same tiny handler served by a
 * plain node:http server and by one with the front door installed (timeouts, connection tracking,
 * the bound), each in a process of its own, driven by wrk over keep-alive connections. Rounds are
 * interleaved (who goes first alternates) and the medians and their ratio are printed.
 *
 *   node bench/front-door.ts [--runs 5] [--seconds 3] [--connections 16]
 *
 * Needs wrk (Debian: apt-get install wrk).
 */
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { DEFAULT_FRONT_DOOR, installFrontDoor, serverOptions } from '../proxy/server/front-door.ts';
import { median, benchArgs } from './support.ts';
import {
  freeLoopbackPort,
  startProcess,
  STOP_GRACE_MS,
  waitUntil,
  type ManagedProcess,
} from '../test/harness/index.ts';

const args = benchArgs({ runs: '5', seconds: '3', connections: '16' }, ['serve', 'port']);

const BODY = JSON.stringify({ status: 'live' });

function handle(res: http.ServerResponse): void {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) });
  res.end(BODY);
}

if (args.serve) {
  // Child: one server, until killed.
  let server: http.Server;
  if (args.serve === 'plain') {
    server = http.createServer({ requestTimeout: 0, headersTimeout: 30_000, keepAliveTimeout: 5_000 }, (_req, res) =>
      handle(res),
    );
  } else {
    server = http.createServer(serverOptions(DEFAULT_FRONT_DOOR));
    const door = installFrontDoor(server, DEFAULT_FRONT_DOOR, pino({ level: 'silent' }), (req, res) => {
      if (door.admit(req, res)) handle(res);
    });
  }
  server.listen(Number(args.port), '127.0.0.1', () => process.stdout.write('ready\n'));
} else {
  if (spawnSync('wrk', ['--version']).error) throw new Error('this benchmark needs wrk (apt-get install wrk)');
  const start = async (kind: string): Promise<{ server: ManagedProcess; url: string }> => {
    const port = await freeLoopbackPort();
    const server = startProcess(
      process.execPath,
      [fileURLToPath(import.meta.url), '--serve', kind, '--port', String(port)],
      {
        name: `the ${kind} server`,
        env: process.env,
      },
    );
    await waitUntil(() => server.stdout().includes('ready'), { what: server.name, timeoutMs: 10_000, process: server });
    return { server, url: `http://127.0.0.1:${port}/health/live` };
  };
  const servers = { plain: await start('plain'), door: await start('door') };
  const rps = (url: string): number => {
    const out = spawnSync('wrk', ['-t1', `-c${args.connections}`, `-d${args.seconds}s`, url], {
      encoding: 'utf8',
    }).stdout;
    const match = /Requests\/sec:\s+([\d.]+)/.exec(out);
    if (!match) throw new Error(`wrk said:\n${out}`);
    return Number(match[1]);
  };
  const results: Record<'plain' | 'door', number[]> = { plain: [], door: [] };
  for (let run = 0; run < Number(args.runs); run++) {
    const order = run % 2 === 0 ? (['plain', 'door'] as const) : (['door', 'plain'] as const);
    for (const kind of order) results[kind].push(rps(servers[kind].url));
  }
  await Promise.all(Object.values(servers).map((s) => s.server.stop('SIGTERM', STOP_GRACE_MS)));
  const plain = median(results.plain);
  const door = median(results.door);
  console.log(`runs ${args.runs} × ${args.seconds} s, ${args.connections} keep-alive connections, tiny 200 answers`);
  console.log(`plain node:http     ${plain.toFixed(0)} req/s  (${results.plain.map((r) => r.toFixed(0)).join(', ')})`);
  console.log(`with the front door ${door.toFixed(0)} req/s  (${results.door.map((r) => r.toFixed(0)).join(', ')})`);
  console.log(`ratio front door / plain: ${(door / plain).toFixed(3)}`);
}
