/**
 * A writer instance of two workers (ARKVORY_WORKERS=2, docs/architecture.md "Workers") whose
 * coordinating process is killed (SIGKILL) while an upload's body is arriving: the writer lock went
 * with the coordinating process's connection, so another writer may start at once. No worker serves
 * on without it: each exits at once, and the upload publishes nothing.
 */
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'undici';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { waitForWorkers, workerPid } from '../../test/support/worker-instance.ts';

const KiB = 1024;
const CHUNK = 64 * KiB;
const db = useTestDatabase();
let key: string;

beforeAll(async () => {
  await createRepository(db.pool, 'cd');
  ({ key } = await createServiceAccount(db.pool, { grants: { cd: 'write' } }));
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

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
    await waitUntil(() => workers.every((pid) => !alive(pid)), { what: 'both workers to exit', timeoutMs: 15_000 });
    rest.resolve();
    const outcome = await upload;
    await client.destroy();
    // Cut with its worker: no answer at all.
    expect(outcome).toBeInstanceOf(Error);
    const rows = await db.pool.query(`SELECT 1 FROM arkvory_artifacts WHERE repository = 'cd' AND name = 'late.bin'`);
    expect(rows.rows).toEqual([]);
  });
});
