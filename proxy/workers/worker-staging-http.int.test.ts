import type { Client } from 'undici';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { startStaticStore } from '../../test/support/static-store.ts';
import { holdPublishes } from '../../test/support/staging.ts';
import {
  connectionsOnBothWorkers,
  stagedUploads,
  waitForWorkers,
  workerPid,
} from '../../test/support/worker-instance.ts';

const db = useTestDatabase();
const clients: Client[] = [];
let keys: string[];

beforeAll(async () => {
  await createRepository(db.pool, 'hs');
  keys = [];
  for (let i = 0; i < 2; i++) keys.push((await createServiceAccount(db.pool, { grants: { hs: 'write' } })).key);
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.destroy()));
});

function upload(client: Client, key: string, name: string): Promise<number> {
  const response = client
    .request({
      path: `/api/v1/repositories/hs/artifacts/${name}`,
      method: 'PUT',
      headers: bearer(key),
      body: randomContent(64 * 1024),
    })
    .then(async (res) => {
      await res.body.dump();
      return res.statusCode;
    });
  response.catch(() => undefined);
  return response;
}

describe('a worker of an instance on the static-HTTP store killed with an upload staged', () => {
  it("has its staged upload removed from the store by its replacement, while the other worker's is published", async () => {
    const store = await startStaticStore();
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_WORKERS: '2',
        ARKVORY_STORAGE_URL: store.url,
        // The uploads wait on the lock below for as long as a worker takes to be killed and replaced.
        ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: '120000',
      },
    });
    let held: Awaited<ReturnType<typeof holdPublishes>> | undefined;
    try {
      await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
      const connections = await connectionsOnBothWorkers(gw.url, clients, 1);
      held = await holdPublishes(db.pool);

      const doomed = upload(connections[1]!.client, keys[1]!, 'doomed.bin');
      let doomedFile: string | undefined;
      await waitUntil(
        async () => {
          doomedFile = (await stagedUploads(store.root))[0];
          return doomedFile !== undefined;
        },
        { what: "worker 1's staged upload", timeoutMs: 30_000, intervalMs: 20 },
      );
      const surviving = upload(connections[0]!.client, keys[0]!, 'surviving.bin');
      let survivingFile: string | undefined;
      await waitUntil(
        async () => {
          survivingFile = (await stagedUploads(store.root)).find((f) => f !== doomedFile);
          return survivingFile !== undefined;
        },
        { what: "worker 0's staged upload", timeoutMs: 30_000, intervalMs: 20 },
      );

      process.kill(await workerPid(gw, 1), 'SIGKILL');
      await expect(doomed).rejects.toThrow();
      await waitForWorkers(gw, (s) =>
        s.workers.every((w) => w.state === 'serving' && w.restarts === (w.index === 1 ? 1 : 0)),
      );
      expect(await stagedUploads(store.root)).toEqual([survivingFile]);

      await held.release();
      expect(await surviving).toBe(201);
      expect(await stagedUploads(store.root)).toEqual([]);
      expect(await gw.stop()).toBe(0);
    } finally {
      await held?.release().catch(() => undefined);
      await gw.stop();
      await store.stop();
    }
  });
});
