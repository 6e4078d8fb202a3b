import { Readable } from 'node:stream';
import type { Client } from 'undici';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import {
  connectionsOnBothWorkers,
  stagedUploads,
  waitForWorkers,
  workerPid,
} from '../../test/support/worker-instance.ts';

const HALF = 256 * 1024;
const db = useTestDatabase();
const clients: Client[] = [];
// Two principals: one admission each (a principal's second upload would wait for its first).
let keys: string[];

beforeAll(async () => {
  await createRepository(db.pool, 'ws');
  keys = [];
  for (let i = 0; i < 2; i++) keys.push((await createServiceAccount(db.pool, { grants: { ws: 'write' } })).key);
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.destroy()));
});

/** An upload whose first half is sent at once and its second only when `finish` is called. */
function heldUpload(client: Client, key: string, name: string) {
  const content = randomContent(2 * HALF);
  let finish!: () => void;
  const released = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const body = Readable.from(
    (async function* () {
      yield content.subarray(0, HALF);
      await released;
      yield content.subarray(HALF);
    })(),
  );
  const response = client
    .request({
      path: `/api/v1/repositories/ws/artifacts/${name}`,
      method: 'PUT',
      headers: { ...bearer(key), 'content-length': String(content.length) },
      body,
    })
    .then(async (res) => {
      await res.body.dump();
      return res.statusCode;
    });
  // Awaited by the test only when it is to succeed; a failed test's cleanup destroys the client.
  response.catch(() => undefined);
  return { finish, response };
}

describe('a worker of an instance killed mid-upload', () => {
  it("has its partial staging file removed by its replacement, while the other worker's upload completes", async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const connections = await connectionsOnBothWorkers(gw.url, clients, 1);
    const before = new Set(await stagedUploads(gw.dataDir));

    const doomed = heldUpload(connections[1]!.client, keys[1]!, 'doomed.bin');
    let doomedFile: string | undefined;
    await waitUntil(
      async () => {
        doomedFile = (await stagedUploads(gw.dataDir)).find((f) => !before.has(f));
        return doomedFile !== undefined;
      },
      { what: "worker 1's staging file", timeoutMs: 30_000 },
    );
    const surviving = heldUpload(connections[0]!.client, keys[0]!, 'surviving.bin');
    let survivingFile: string | undefined;
    await waitUntil(
      async () => {
        survivingFile = (await stagedUploads(gw.dataDir)).find((f) => !before.has(f) && f !== doomedFile);
        return survivingFile !== undefined;
      },
      { what: "worker 0's staging file", timeoutMs: 30_000 },
    );

    process.kill(await workerPid(gw, 1), 'SIGKILL');
    await expect(doomed.response).rejects.toThrow();
    // The replacement empties its index's staging directory before it serves.
    await waitForWorkers(gw, (s) =>
      s.workers.every((w) => w.state === 'serving' && w.restarts === (w.index === 1 ? 1 : 0)),
    );
    // The first death of a streak is replaced within the first step of the backoff (restart-backoff.ts).
    const died = gw.logLines().find((l) => l.msg === 'a worker died; what it held is released; starting a new one');
    expect(died).toMatchObject({ worker: 1, crashStreak: 1, restartInMs: expect.any(Number) });
    expect(died?.restartInMs).toBeLessThanOrEqual(1000);
    const left = await stagedUploads(gw.dataDir);
    expect(left).not.toContain(doomedFile);
    expect(left).toContain(survivingFile);

    surviving.finish();
    expect(await surviving.response).toBe(201);
    expect(await stagedUploads(gw.dataDir)).toEqual([...before]);
    expect(await gw.stop()).toBe(0);
  });
});
