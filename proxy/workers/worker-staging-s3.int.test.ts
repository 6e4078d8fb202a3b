/**
 * The S3 store's side of worker-staging.int.test.ts. A worker killed while it sends a single PUT
 * leaves nothing (the server drops a PUT cut short); what it leaves is an upload already staged
 * whole (`tmp/…/<uuid>.upload`) and not yet copied to its blob name, and a multipart upload of a
 * body of unknown length begun and never completed (its parts are kept until it is aborted). Each
 * worker stages under its index's prefix, which its replacement empties (objects deleted, multipart
 * uploads aborted) before it serves; the other worker's staged upload stays and is published. The
 * whole uploads are held between their staging and their commit by a lock on the catalog table.
 */
import { Readable } from 'node:stream';
import type { Client } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { listKeys, type S3Server } from '../../test/support/s3-server.ts';
import { sharedS3Bucket } from '../../test/support/shared-s3.ts';
import { connectionsOnBothWorkers, waitForWorkers, workerPid } from '../../test/support/worker-instance.ts';
import { holdPublishes } from '../../test/support/staging.ts';

const MiB = 1024 * 1024;
const db = useTestDatabase();
const clients: Client[] = [];
let server: S3Server;
// One principal per upload: a principal's second upload would wait for its first.
let keys: string[];

beforeAll(async () => {
  server = await sharedS3Bucket('minio');
  await createRepository(db.pool, 'ss');
  keys = [];
  for (let i = 0; i < 3; i++) keys.push((await createServiceAccount(db.pool, { grants: { ss: 'write' } })).key);
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.destroy()));
});
afterAll(async () => {
  await server?.destroy();
});

/**
 * The keys of the multipart uploads begun under tmp/ and neither completed nor aborted (listed
 * whole and filtered: MinIO lists none for a prefix that is not a whole key).
 */
async function openMultipartUploads(): Promise<string[]> {
  const found: string[] = [];
  for await (const u of server.client().listMultipartUploads('')) if (u.key.startsWith('tmp/')) found.push(u.key);
  return found;
}

function put(client: Client, key: string, name: string, body: Buffer | Readable): Promise<number> {
  const response = client
    .request({ path: `/api/v1/repositories/ss/artifacts/${name}`, method: 'PUT', headers: bearer(key), body })
    .then(async (res) => {
      await res.body.dump();
      return res.statusCode;
    });
  // Awaited by the test; a failed test's cleanup destroys the client.
  response.catch(() => undefined);
  return response;
}

describe('a worker of an instance on the S3 store killed with uploads staged', () => {
  it("has its staged object and its open multipart upload removed by its replacement, while the other worker's upload is published", async () => {
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_WORKERS: '2',
        ...server.env(),
        // The uploads wait on the lock below for as long as a worker takes to be killed and replaced.
        ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: '120000',
      },
    });
    let held: Awaited<ReturnType<typeof holdPublishes>> | undefined;
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    try {
      await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
      const [first, , second, third] = await connectionsOnBothWorkers(gw.url, clients, 2);
      held = await holdPublishes(db.pool);

      const doomed = put(second!.client, keys[1]!, 'doomed.bin', randomContent(64 * 1024));
      let doomedKey: string | undefined;
      await waitUntil(
        async () => {
          doomedKey = (await listKeys(server, 'tmp/'))[0];
          return doomedKey !== undefined;
        },
        { what: "worker 1's staged upload", timeoutMs: 30_000, intervalMs: 20 },
      );
      // No length: an S3 multipart upload, begun once a part's worth has arrived; then the body stops.
      let begun = false;
      const unending = put(
        third!.client,
        keys[2]!,
        'unending.bin',
        Readable.from(
          (async function* () {
            while (!begun) yield randomContent(MiB);
            await released;
          })(),
        ),
      );
      await waitUntil(
        async () => {
          begun = (await openMultipartUploads()).length === 1;
          return begun;
        },
        { what: "worker 1's multipart upload", timeoutMs: 30_000, intervalMs: 20 },
      );
      const surviving = put(first!.client, keys[0]!, 'surviving.bin', randomContent(64 * 1024));
      let survivingKey: string | undefined;
      await waitUntil(
        async () => {
          survivingKey = (await listKeys(server, 'tmp/')).find((k) => k !== doomedKey);
          return survivingKey !== undefined;
        },
        { what: "worker 0's staged upload", timeoutMs: 30_000, intervalMs: 20 },
      );

      process.kill(await workerPid(gw, 1), 'SIGKILL');
      await expect(doomed).rejects.toThrow();
      await expect(unending).rejects.toThrow();
      await waitForWorkers(gw, (s) =>
        s.workers.every((w) => w.state === 'serving' && w.restarts === (w.index === 1 ? 1 : 0)),
      );
      expect(await listKeys(server, 'tmp/')).toEqual([survivingKey]);
      expect(await openMultipartUploads()).toEqual([]);

      await held.release();
      expect(await surviving).toBe(201);
      expect(await listKeys(server, 'tmp/')).toEqual([]);
      expect(await gw.stop()).toBe(0);
    } finally {
      release();
      await held?.release().catch(() => undefined);
      await gw.stop();
    }
  });
});
