/**
 * Tests of an instance served by several worker processes (ARKVORY_WORKERS above 1; a gateway or a
 * router): connections placed on a known worker, requests that ride out a killed worker's reset
 * connections, the workers' states from `/health/status`, a worker's pid.
 */
import { execFileSync } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'undici';
import { expect } from 'vitest';
import { type RawResponse, request } from './content.ts';
import type { GatewayProcess } from './gateway.ts';

/** What `/health/status` of a worker says of its instance. */
export interface WorkersStatus {
  workerIndex: number;
  workers: Array<{ index: number; state: string; restarts: number }>;
}

export async function statusOver(client: Client): Promise<WorkersStatus> {
  const res = await client.request({ path: '/health/status', method: 'GET' });
  return (await res.body.json()) as WorkersStatus;
}

/**
 * `perWorker` connections on each of two workers (each client's worker from /health/status), in
 * worker order; every client made is pushed to `clients`, for the caller to destroy.
 */
export async function connectionsOnBothWorkers(
  url: string,
  clients: Client[],
  perWorker = 2,
): Promise<Array<{ client: Client; worker: number }>> {
  const byWorker = new Map<number, Client[]>([
    [0, []],
    [1, []],
  ]);
  for (let i = 0; i < 64 && [...byWorker.values()].some((list) => list.length < perWorker); i++) {
    const client = new Client(url, { pipelining: 1 });
    clients.push(client);
    const { workerIndex } = await statusOver(client);
    byWorker.get(workerIndex)!.push(client);
  }
  const picked = [...byWorker].flatMap(([worker, list]) =>
    list.slice(0, perWorker).map((client) => ({ client, worker })),
  );
  expect(picked.map((p) => p.worker)).toEqual([...Array(perWorker).fill(0), ...Array(perWorker).fill(1)]);
  return picked;
}

/** The longest a `requestRetried` call met refused or reset connections before one was answered. */
export const refusals = { longestMs: 0 };
/** A worker's death must not leave the port refusing for longer than this. */
const REFUSAL_BOUND_MS = 5000;

/**
 * A request on a new connection, tried again when the connection is reset or refused: one the
 * kernel had queued on the listening socket of a worker that was just killed is reset with it
 * (SO_REUSEPORT), as a client of any such server sees; the next one goes to a live worker.
 */
export async function requestRetried(
  gw: GatewayProcess,
  url: string,
  init: Parameters<typeof request>[1] = {},
): Promise<RawResponse> {
  const startedAt = performance.now();
  for (let attempt = 1; ; attempt++) {
    try {
      const res = await request(url, init);
      if (attempt > 1) refusals.longestMs = Math.max(refusals.longestMs, performance.now() - startedAt);
      return res;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ECONNRESET' && code !== 'ECONNREFUSED') throw err;
      const spentMs = Math.round(performance.now() - startedAt);
      if (spentMs > REFUSAL_BOUND_MS) {
        // No worker took a connection for this long: say who listens and what the instance logged last.
        const port = new URL(url).port;
        const lines = gw
          .logLines()
          .slice(-15)
          .map((l) => JSON.stringify(l));
        const listening = execFileSync('ss', ['-ltnpH', `sport = :${port}`], { encoding: 'utf8' });
        const instance =
          gw.child.exitCode === null && gw.child.signalCode === null
            ? 'running'
            : `exited (${gw.child.exitCode ?? gw.child.signalCode})`;
        throw new Error(
          `${(err as Error).message} on each of ${attempt} tries over ${spentMs} ms; the instance ${instance}; listening on ${port}:\n${listening}its stderr:\n${gw.stderr().slice(-3000)}\nits last log lines:\n${lines.join('\n')}`,
          { cause: err },
        );
      }
      // The dead worker's socket leaves the port's group as the kernel reaps it: try again shortly after.
      await sleep(Math.min(20 * attempt, 200));
    }
  }
}

/** Asks `/health/status` until `check` holds (30 s at most). */
export async function waitForWorkers(gw: GatewayProcess, check: (s: WorkersStatus) => boolean): Promise<WorkersStatus> {
  for (let i = 0; ; i++) {
    const s = JSON.parse((await requestRetried(gw, `${gw.url}/health/status`)).body.toString()) as WorkersStatus;
    if (check(s)) return s;
    if (i > 600) throw new Error(`workers never reached the expected state: ${JSON.stringify(s)}`);
    await sleep(50);
  }
}

/**
 * The pid of the worker with `index`: each worker logs its index with its pid (pino's `pid`
 * binding) on every line, the first of them at its start.
 */
export async function workerPid(gw: GatewayProcess, index: number): Promise<number> {
  const line = gw.logLines().find((l) => l.worker === index && typeof l.pid === 'number');
  if (!line) throw new Error(`no log line of worker ${index}`);
  const pid = line.pid as number;
  // Still a child of the instance (not a pid reused since).
  const children = await readFile(`/proc/${gw.child.pid}/task/${gw.child.pid}/children`, 'utf8');
  expect(children.split(' ').map(Number)).toContain(pid);
  return pid;
}

/** Every staged upload (`*.upload`) under `root`'s tmp/, at any depth; none when there is no tmp/. */
export async function stagedUploads(root: string): Promise<string[]> {
  const entries = await readdir(path.join(root, 'tmp'), { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile() && e.name.endsWith('.upload')).map((e) => path.join(e.parentPath, e.name));
}
