/**
 * How an instance of two workers (ARKVORY_WORKERS=2, docs/architecture.md "Workers") keeps its
 * workers: one whose own database connection (its maintenance barrier) is cut leaves and is
 * replaced, so the instance serves on every worker again; a SIGHUP while the workers start kills
 * none of them, and the worker that was starting reloads its secrets once it serves.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { requestRetried, waitForWorkers } from '../../test/support/worker-instance.ts';

const db = useTestDatabase();
let key: string;

beforeAll(async () => {
  await createRepository(db.pool, 'wl');
  ({ key } = await createServiceAccount(db.pool, { grants: { wl: 'write' } }));
});

describe('a worker of an instance', () => {
  it('fenced by the loss of its own database connection leaves with exit code 3 and is replaced', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const put = await request(`${gw.url}/api/v1/repositories/wl/artifacts/a.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body: randomContent(1000),
    });
    expect(put.status).toBe(201);
    const leases = await db.pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'arkvory-worker-lease'`,
    );
    // Each worker holds its maintenance barrier on a connection of its own.
    expect(leases.rows).toHaveLength(2);
    await db.pool.query('SELECT pg_terminate_backend($1)', [leases.rows[0]!.pid]);

    const left = () => gw.logLines().find((l) => String(l.msg).startsWith('a worker left, fenced'));
    await waitUntil(() => left() !== undefined, { what: 'the fenced worker to leave', timeoutMs: 30_000 });
    expect(left()).toMatchObject({ code: 3 });
    const status = await waitForWorkers(
      gw,
      (s) => s.workers.every((w) => w.state === 'serving') && s.workers.some((w) => w.restarts === 1),
    );
    expect(status.workers.map((w) => w.restarts).sort()).toEqual([0, 1]);
    // Every worker serves again: new connections, wherever the kernel puts them, are answered.
    for (let i = 0; i < 20; i++) {
      expect((await requestRetried(gw, `${gw.url}/health/status`)).status).toBe(200);
      const get = await requestRetried(gw, `${gw.url}/api/v1/repositories/wl/artifacts/a.bin/content`, {
        headers: bearer(key),
      });
      expect(get.status).toBe(200);
    }
    // The replacement holds its own barrier again.
    const after = await db.pool.query(
      `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'arkvory-worker-lease'`,
    );
    expect(after.rows).toHaveLength(2);
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
