/**
 * The catalog cache of an instance with several workers (ARKVORY_WORKERS=2), through a real gateway
 * process and a real PostgreSQL: a DELETE answered by one worker is not served by the other from its
 * cache, and the name published again with other bytes is served with those bytes, at once, not when
 * PostgreSQL's notification reaches the other worker (proxy/workers/catalog-coherence.ts).
 *
 * The notification's way is made slow on purpose: the PostgreSQL backends of the catalog LISTEN
 * connections are stopped (SIGSTOP) for the rounds, so a worker hears of a change only through its
 * epoch poll (every 500 ms). Unstopped, the race is real but short: about 1 round in 300 served the
 * deleted bytes on this machine.
 */
import type { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import { connectionsOnBothWorkers, waitForWorkers } from '../../test/support/worker-instance.ts';

const ROUNDS = 10;

describe('catalog cache with ARKVORY_WORKERS=2: a DELETE holds on every worker once answered', () => {
  const db = useTestDatabase();
  let gw: GatewayProcess;
  let key: string;
  const clients: Client[] = [];
  let stopped: number[] = [];

  beforeAll(async () => {
    await createRepository(db.pool, 'w');
    ({ key } = await createServiceAccount(db.pool, { grants: { w: 'write' } }));
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' }, timeoutMs: 60_000 });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
  });

  afterAll(async () => {
    for (const pid of stopped) process.kill(pid, 'SIGCONT');
    for (const client of clients) await client.destroy();
  });

  it('the other worker answers 404 after the DELETE, and the new bytes after the name is published again', async () => {
    // Kept-alive connections pinned to each worker: one writes, the other reads.
    const [writer, , reader] = await connectionsOnBothWorkers(gw.url, clients, 2);
    expect([writer!.worker, reader!.worker]).toEqual([0, 1]);
    const listeners = await db.pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = 'arkvory-catalog-listen' AND datname = current_database()`,
    );
    expect(listeners.rows).toHaveLength(2);
    stopped = listeners.rows.map((r) => r.pid);
    for (const pid of stopped) process.kill(pid, 'SIGSTOP');

    const path = '/api/v1/repositories/w/artifacts/name';
    const send = async (client: Client, method: string, url: string, body?: Buffer) => {
      const headers: Record<string, string> = bearer(key);
      if (body) headers['content-digest'] = contentDigest(body);
      const res = await client.request({ method, path: url, headers, body });
      return { status: res.statusCode, body: Buffer.from(await res.body.arrayBuffer()) };
    };
    try {
      for (let round = 0; round < ROUNDS; round++) await oneRound(round);
    } finally {
      for (const pid of stopped) process.kill(pid, 'SIGCONT');
      stopped = [];
    }

    async function oneRound(round: number): Promise<void> {
      const first = randomContent(100);
      const second = randomContent(100);
      expect((await send(writer!.client, 'PUT', path, first)).status).toBe(201);
      // The reader's worker caches the row.
      expect(sha256((await send(reader!.client, 'GET', `${path}/content`)).body)).toBe(sha256(first));
      expect((await send(writer!.client, 'DELETE', path)).status).toBe(204);
      expect((await send(reader!.client, 'GET', `${path}/content`)).status, `round ${round}`).toBe(404);
      expect((await send(writer!.client, 'PUT', path, second)).status).toBe(201);
      const again = await send(reader!.client, 'GET', `${path}/content`);
      expect(sha256(again.body), `round ${round}`).toBe(sha256(second));
      expect((await send(writer!.client, 'DELETE', path)).status).toBe(204);
    }
  });
});
