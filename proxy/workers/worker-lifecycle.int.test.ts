/**
 * How an instance of two workers (ARKVORY_WORKERS=2, docs/architecture.md "Workers") keeps its
 * workers: one whose own database connection (its maintenance barrier) is cut leaves and is
 * replaced, so the instance serves on every worker again; one that stands still (SIGSTOP) is killed
 * and replaced, and the admission slot of its transfer given back; a SIGHUP while the workers start kills
 * none of them, and the worker that was starting reloads its secrets once it serves.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'undici';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import {
  connectionsOnBothWorkers,
  requestRetried,
  type WorkersStatus,
  waitForWorkers,
  workerPid,
} from '../../test/support/worker-instance.ts';
import { HUNG_AFTER_MS, LIVENESS_INTERVAL_MS } from './liveness.ts';

const KiB = 1024;
const PER_PRINCIPAL = 64 * KiB;
const SIZE = 16 * PER_PRINCIPAL;
const db = useTestDatabase();
const clients: Client[] = [];
let key: string;

beforeAll(async () => {
  await createRepository(db.pool, 'wl');
  ({ key } = await createServiceAccount(db.pool, { grants: { wl: 'write' } }));
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.destroy()));
});

/** An instance of two serving workers, downloads paced per principal, holding `name` (`size` bytes) in `wl`. */
async function pacedTwoWorkersHolding(name: string, size: number): Promise<GatewayProcess> {
  const gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_WORKERS: '2',
      ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(PER_PRINCIPAL),
    },
  });
  await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
  const put = await request(`${gw.url}/api/v1/repositories/wl/artifacts/${name}`, {
    method: 'PUT',
    headers: bearer(key),
    body: randomContent(size),
  });
  expect(put.status).toBe(201);
  return gw;
}

describe('a worker of an instance', () => {
  it('fenced by the loss of its own database connection shows fenced while it drains, leaves with exit code 3 and is replaced', async () => {
    // Paced downloads (the instance's governor) keep the fenced worker draining for its whole bound.
    const gw = await pacedTwoWorkersHolding('a.bin', SIZE);
    const connections = await connectionsOnBothWorkers(gw.url, clients, 1);
    // One download on each worker, running when the connection is cut (it lasts about 16 s): its
    // head is in before the cut, else a worker with nothing in flight drains at once and leaves
    // between two looks at the worker list.
    const heads = await Promise.all(
      connections.map(({ client }) =>
        client.request({
          path: '/api/v1/repositories/wl/artifacts/a.bin/content',
          method: 'GET',
          headers: bearer(key),
        }),
      ),
    );
    for (const head of heads) expect(head.statusCode).toBe(200);
    const downloads = heads.map(async (res) => {
      try {
        for await (const _ of res.body);
      } catch {
        // The fenced worker's download may be cut as it leaves.
      }
    });
    const leases = await db.pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'arkvory-worker-lease'`,
    );
    // Each worker holds its maintenance barrier on a connection of its own.
    expect(leases.rows).toHaveLength(2);
    await db.pool.query('SELECT pg_terminate_backend($1)', [leases.rows[0]!.pid]);

    // While it drains, the instance's worker list (asked of either worker) shows it fenced.
    const left = () => gw.logLines().find((l) => String(l.msg).startsWith('a worker left, fenced'));
    // Asked on new connections, whichever worker takes them: each held connection carries its
    // download to the end, and the fenced worker leaves as soon as its drain ends.
    const states = new Set<string>();
    const giveUpAt = performance.now() + 30_000;
    while (!states.has('fenced') && left() === undefined && performance.now() < giveUpAt) {
      const view = await request(`${gw.url}/health/status`)
        .then((answer) => JSON.parse(answer.body.toString()) as WorkersStatus)
        .catch(() => undefined);
      for (const w of view?.workers ?? []) states.add(w.state);
      await sleep(50);
    }
    expect(states).toContain('fenced');
    await waitUntil(() => left() !== undefined, { what: 'the fenced worker to leave', timeoutMs: 30_000 });
    expect(left()).toMatchObject({ code: 3 });
    // Its own line says it is replaced, not that an operator must restart it.
    expect(gw.logLines().filter((l) => String(l.msg).startsWith('fenced:'))).toEqual([
      expect.objectContaining({ msg: expect.stringContaining('it leaves and its instance starts a new one') }),
    ]);
    const status = await waitForWorkers(
      gw,
      (s) => s.workers.every((w) => w.state === 'serving') && s.workers.some((w) => w.restarts === 1),
    );
    expect(status.workers.map((w) => w.restarts).sort()).toEqual([0, 1]);
    // Every worker serves again: new connections, wherever the kernel puts them, are answered.
    for (let i = 0; i < 20; i++) {
      expect((await requestRetried(gw, `${gw.url}/health/status`)).status).toBe(200);
      const head = await requestRetried(gw, `${gw.url}/api/v1/repositories/wl/artifacts/a.bin/content`, {
        method: 'HEAD',
        headers: bearer(key),
      });
      expect(head.status).toBe(200);
    }
    // The replacement holds its own barrier again.
    const after = await db.pool.query(
      `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'arkvory-worker-lease'`,
    );
    expect(after.rows).toHaveLength(2);
    // The other worker's download would hold the stop's drain: it is cut here.
    await Promise.all(clients.splice(0).map((c) => c.destroy()));
    await Promise.all(downloads);
    expect(await gw.stop()).toBe(0);
  });

  it('that stands still (SIGSTOP) mid-transfer is killed and replaced, and its admission slot given back', async () => {
    // Paced: each download lasts about 64 s, past the stop, the kill and the replacement.
    const gw = await pacedTwoWorkersHolding('long.bin', 64 * PER_PRINCIPAL);
    // Two connections on each worker: one download on each, and worker 0's second for the checks.
    const connections = await connectionsOnBothWorkers(gw.url, clients, 2);
    const observer = connections[1]!.client;
    const downloads = [connections[0]!, connections[2]!].map(({ client }) =>
      client
        .request({ path: '/api/v1/repositories/wl/artifacts/long.bin/content', method: 'GET', headers: bearer(key) })
        .then(async (res) => {
          for await (const _ of res.body);
        })
        .catch(() => undefined),
    );
    const activeDownloads = async () => {
      const res = await observer.request({ path: '/metrics', method: 'GET' });
      const text = await res.body.text();
      const line = /^arkvory_admission_active\{kind="download"\} (\d+)$/m.exec(text);
      return line ? Number(line[1]) : undefined;
    };
    await waitUntil(async () => (await activeDownloads()) === 2, {
      what: 'both downloads admitted',
      timeoutMs: 30_000,
    });

    const victim = await workerPid(gw, 1);
    process.kill(victim, 'SIGSTOP');
    const stoppedAt = performance.now();
    // The bound the coordinating process keeps (its check's silence and one interval), and the
    // load of a shared machine on top.
    await waitUntil(async () => (await activeDownloads()) === 1, {
      what: "the stopped worker's slot to be given back",
      timeoutMs: HUNG_AFTER_MS + LIVENESS_INTERVAL_MS + 20_000,
    });
    // Not before the bound: its silence counts from its last answer, at most an interval before the stop.
    expect(performance.now() - stoppedAt).toBeGreaterThanOrEqual(HUNG_AFTER_MS - LIVENESS_INTERVAL_MS);
    expect(gw.logLines().filter((l) => String(l.msg).startsWith('a worker did not answer'))).toEqual([
      expect.objectContaining({ worker: 1, pid: victim }),
    ]);
    const status = await waitForWorkers(gw, (s) =>
      s.workers.every((w) => w.state === 'serving' && w.restarts === (w.index === 1 ? 1 : 0)),
    );
    expect(status.workers).toHaveLength(2);
    // The replacement serves: every new connection is answered, wherever the kernel puts it.
    for (let i = 0; i < 20; i++) expect((await requestRetried(gw, `${gw.url}/health/status`)).status).toBe(200);
    // The other worker's download would hold the stop's drain: it is cut here.
    await Promise.all(clients.splice(0).map((c) => c.destroy()));
    await Promise.all(downloads);
    expect(await gw.stop()).toBe(0);
  });

  it('survives a SIGHUP while the workers start, and the starting one reloads once it serves', async () => {
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' },
      waitFor: 'none',
    });
    await waitUntil(() => gw.logLines().some((l) => l.msg === 'starting the workers of this instance'), {
      what: 'the instance to start its workers',
      timeoutMs: 60_000,
      intervalMs: 10,
    });
    gw.child.kill('SIGHUP');
    // Both workers listen, or the instance ended (what the default action of SIGHUP in a starting
    // worker did: the start failed and took the instance with it).
    const listening = () => gw.logLines().filter((l) => l.msg === 'listening').length;
    await waitUntil(() => listening() === 2 || gw.child.exitCode !== null, {
      what: 'both workers to listen',
      timeoutMs: 60_000,
    });
    expect(gw.child.exitCode).toBeNull();
    const status = await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    expect(status.workers.map((w) => w.restarts)).toEqual([0, 0]);
    // The first worker was starting when the signal came: it reads its secrets again once it serves.
    await waitUntil(() => gw.logLines().some((l) => l.worker === 0 && l.signal === 'SIGHUP'), {
      what: 'the first worker to take the SIGHUP',
      timeoutMs: 30_000,
    });
    expect(gw.logLines().filter((l) => /failed to start|died/.test(String(l.msg)))).toEqual([]);
    expect(await gw.stop()).toBe(0);
  });
});
