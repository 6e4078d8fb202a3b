/**
 * Fault: the database link is a blackhole (toxiproxy `timeout` 0 upstream: what the gateway sends
 * vanishes, its connections stay open; a `latency` ahead of it holds a connection's close too, as a
 * network that drops packets does) when SIGTERM comes, with a request waiting on a statement.
 * Expected, for a single-process writer and for an instance of two workers: exit 0 within
 * ARKVORY_SHUTDOWN_TIMEOUT_SECONDS plus the close steps' deadline and the CLI's linger (for the
 * instance: its workers', then its coordinating process's own), and no process of it left running
 * (docs/chaos.md, "SIGTERM while the database link is a blackhole").
 */
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CLOSE_STEPS_MS } from '../proxy/server/close-steps.ts';
import { bearer, createServiceAccount } from '../test/support/auth.ts';
import type { TestDatabase } from '../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../test/support/gateway.ts';
import { waitForWorkers } from '../test/support/worker-instance.ts';
import { chaosDatabase, useToxiproxyAndDatabase } from './support/chaos-database.ts';
import { addLatency, addToxic, type ProxiedUpstream } from './support/toxiproxy.ts';
import { isAlive } from '../lib/process-alive.ts';

const SHUTDOWN_S = 1;
/** How long the CLI lets lingering handles (a connection whose close was left) keep a stopped process (proxy/commands/cli.ts). */
const LINGER_MS = 2000;
/** What a loaded machine adds. */
const SLACK_MS = 3000;
/** The drain, then the process's close steps (all of them together), then the linger. */
const PROCESS_BOUND_MS = SHUTDOWN_S * 1000 + CLOSE_STEPS_MS + LINGER_MS;
/** Its workers stop as a process does; then the coordinating process closes its own lease connection. */
const INSTANCE_BOUND_MS = PROCESS_BOUND_MS + CLOSE_STEPS_MS + LINGER_MS;

const chaos = useToxiproxyAndDatabase();
/** The instance's own database: one writer per database, and the two cases run side by side. */
let second: Awaited<ReturnType<typeof chaosDatabase>>;

beforeAll(async () => {
  second = await chaosDatabase();
});
afterAll(async () => {
  await second?.db.drop();
});

/** Every process under `pid` (children, their children…), from /proc. */
async function descendants(pid: number): Promise<number[]> {
  const text = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
  const children = text.split(' ').filter(Boolean).map(Number);
  return [...children, ...(await Promise.all(children.map(descendants))).flat()];
}

async function gatewayBehindLink(
  db: TestDatabase,
  env: Record<string, string>,
): Promise<{ gw: GatewayProcess; link: ProxiedUpstream; key: string }> {
  const link = await chaos.toxiproxy.proxyToUrl(inject('adminDatabaseUrl'));
  // A key no gateway has seen: its lookup is a statement that goes into the hole.
  const { key } = await createServiceAccount(db.pool, { grants: { chaos: 'read' } });
  const gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: link.through(db.url),
      ARKVORY_SHUTDOWN_TIMEOUT_SECONDS: String(SHUTDOWN_S),
      ...env,
    },
  });
  return { gw, link, key };
}

/**
 * A request whose key lookup goes into the hole, once it is written to the gateway's socket: it
 * settles when the gateway answers or its stop cuts the connection.
 */
function requestWritten(url: string, key: string): Promise<{ settled: Promise<unknown> }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: bearer(key), agent: false });
    const settled = new Promise<void>((done) => {
      req.on('response', (res) => res.resume().on('close', done));
      req.on('close', done);
    });
    req.on('error', () => {});
    req.once('finish', () => resolve({ settled }));
    req.once('error', reject);
  });
}

/**
 * Blackholes the link (its closes held too), SIGTERMs the gateway while a request waits on a
 * statement: the exit code, how long it took, and which of its processes still run.
 */
async function stopInBlackhole(
  started: { gw: GatewayProcess; link: ProxiedUpstream; key: string },
  boundMs: number,
): Promise<{ code: number | string; ms: number; left: number[] }> {
  const { gw, link, key } = started;
  const family = await descendants(gw.child.pid!);
  // toxiproxy's `timeout` toxic closes a connection as soon as the gateway ends its side, which a
  // network that drops packets never does: the latency ahead of it holds the goodbye (and all else).
  await addLatency(link, { name: 'held', stream: 'upstream', latencyMs: 120_000 });
  await addToxic(link, 'timeout', 'upstream', { timeout: 0 }, 'blackhole');
  const waiting = await requestWritten(`${gw.url}/api/v1/repositories/chaos/artifacts/a.bin`, key);
  const startedMs = performance.now();
  // SIGKILL past twice the bound: a stop that hangs fails the assertion, not the test's timeout.
  const code = await gw.stop('SIGTERM', 2 * boundMs);
  const ms = performance.now() - startedMs;
  await waiting.settled;
  return { code, ms: Math.round(ms), left: family.filter(isAlive) };
}

describe('SIGTERM while the database link is a blackhole', () => {
  it.concurrent(`a single-process writer exits 0 within ${PROCESS_BOUND_MS} ms`, async () => {
    const started = await gatewayBehindLink(chaos.db, {});
    const { code, ms, left } = await stopInBlackhole(started, PROCESS_BOUND_MS + SLACK_MS);
    expect({ code, ms, withinBound: ms < PROCESS_BOUND_MS + SLACK_MS, left }).toEqual({
      code: 0,
      ms,
      withinBound: true,
      left: [],
    });
    expect(started.gw.logs()).not.toMatch(/unhandled|uncaught/i);
  }, 60_000);

  it.concurrent(`an instance of two workers exits 0 within ${INSTANCE_BOUND_MS} ms, its workers gone`, async () => {
    const started = await gatewayBehindLink(second.db, { ARKVORY_WORKERS: '2' });
    await waitForWorkers(started.gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    expect(await descendants(started.gw.child.pid!)).toHaveLength(2);
    const { code, ms, left } = await stopInBlackhole(started, INSTANCE_BOUND_MS + SLACK_MS);
    expect({ code, ms, withinBound: ms < INSTANCE_BOUND_MS + SLACK_MS, left }).toEqual({
      code: 0,
      ms,
      withinBound: true,
      left: [],
    });
    expect(started.gw.logs()).not.toMatch(/unhandled|uncaught/i);
  }, 60_000);
});
