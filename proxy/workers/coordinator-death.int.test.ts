/**
 * A writer instance of two workers (ARKVORY_WORKERS=2, docs/architecture.md "Workers") whose
 * coordinating process loses the writer lock, held on its connection. Killed (SIGKILL) while an
 * upload's body is arriving: no worker serves on without it, each exits at once, and the upload
 * publishes nothing. Stopped (SIGSTOP) when its session is ended: its workers still serve, so
 * another writer is refused until they are fenced.
 */
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'undici';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { waitForWorkers, workerPid } from '../../test/support/worker-instance.ts';
import { isAlive } from '../../lib/process-alive.ts';

const KiB = 1024;
const CHUNK = 64 * KiB;
const db = useTestDatabase();
let key: string;

beforeAll(async () => {
  await createRepository(db.pool, 'cd');
  ({ key } = await createServiceAccount(db.pool, { grants: { cd: 'write' } }));
});

describe('a writer instance whose coordinating process is killed', () => {
  it('its workers exit at once, and an upload whose body was still arriving publishes nothing', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const workers = [await workerPid(gw, 0), await workerPid(gw, 1)];

    const half = Promise.withResolvers<void>();
    const rest = Promise.withResolvers<void>();
    const chunks = Array.from({ length: 64 }, () => randomContent(CHUNK));
    async function* body() {
      for (const [i, chunk] of chunks.entries()) {
        if (i === chunks.length / 2) {
          half.resolve();
          await rest.promise;
        }
        yield chunk;
      }
    }
    const client = new Client(gw.url);
    const upload = client
      .request({
        path: '/api/v1/repositories/cd/artifacts/late.bin',
        method: 'PUT',
        headers: { ...bearer(key), 'content-length': String(chunks.length * CHUNK) },
        body: Readable.from(body()),
      })
      .then(
        async (res) => ({ status: res.statusCode, body: await res.body.text() }),
        (err: unknown) => err as Error,
      );
    await half.promise;
    // The first half is the gateway's (read past the sockets' buffers) before the kill.
    await sleep(500);
    gw.child.kill('SIGKILL');
    // Node's cluster ends a worker whose primary is gone as soon as its channel closes.
    await waitUntil(() => workers.every((pid) => !isAlive(pid)), { what: 'both workers to exit', timeoutMs: 15_000 });
    rest.resolve();
    const outcome = await upload;
    await client.destroy();
    // Cut with its worker: no answer at all.
    expect(outcome).toBeInstanceOf(Error);
    const rows = await db.pool.query(`SELECT 1 FROM arkvory_artifacts WHERE repository = 'cd' AND name = 'late.bin'`);
    expect(rows.rows).toEqual([]);
  });
});

describe('a writer instance whose coordinating process stands still when its session ends', () => {
  it('keeps a new writer from starting while its workers serve, and lets one start once they are fenced', async () => {
    const first = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
    await waitForWorkers(first, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    first.child.kill('SIGSTOP');
    try {
      const ended = await db.pool.query<{ ended: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'arkvory-api-lease'`,
      );
      expect(ended.rows).toEqual([{ ended: true }]);
      // The writer barrier is free now; the stopped instance's workers serve on.
      const second = await startGateway({
        env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: first.dataDir },
        waitFor: 'none',
      });
      const listening = () => second.logLines().some((l) => l.msg === 'listening');
      await waitUntil(() => second.child.exitCode !== null || listening(), {
        what: 'the second writer to start or refuse',
        timeoutMs: 60_000,
      });
      expect(listening()).toBe(false);
      expect(await second.exited).toBe(1);
      expect(second.logLines().map((l) => String(l.msg))).toContainEqual(
        expect.stringContaining('workers of another writer instance (ARKVORY_WORKERS) still run on this database'),
      );
    } finally {
      first.child.kill('SIGCONT');
    }
    // Running again, the instance learns its session ended and is fenced, every worker with it.
    await waitUntil(
      async () => {
        const res = await request(`${first.url}/health/status`).catch(() => undefined);
        return res?.status === 503 && JSON.parse(res.body.toString()).status === 'fenced';
      },
      { what: 'the instance to be fenced', timeoutMs: 30_000 },
    );
    const third = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: first.dataDir },
      waitFor: 'none',
    });
    await waitUntil(() => third.child.exitCode !== null || third.logLines().some((l) => l.msg === 'listening'), {
      what: 'the third writer to start or refuse',
      timeoutMs: 60_000,
    });
    expect(third.child.exitCode).toBeNull();
    expect(await third.stop()).toBe(0);
    await first.stop();
  });
});
