/**
 * A worker's health checks and scrapes when its coordinating process does not answer
 * (ARKVORY_WORKERS=2), through a real gateway process: the coordinating process is stopped
 * (SIGSTOP), and `/health/status`, `/health/ready` and `/metrics` on each worker are answered 503
 * within the read deadlines, naming the coordinating process, not held until the client gives up.
 * Once it runs again each worker answers 200 as before (docs/architecture.md, "Workers").
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { connectionsOnBothWorkers, waitForWorkers } from '../../test/support/worker-instance.ts';

/**
 * Far above what the answers take (the 2 s read deadline, the 4 s metrics deadline, a rate-limit
 * check of at most 300 ms for the key of /health/ready) and far below what a balancer's client would
 * wait for a hung check here: the test's own bound on waiting.
 */
const ANSWER_BOUND_MS = 15_000;

interface Seen {
  path: string;
  status: number;
  retryAfter: string | string[] | undefined;
  body: Record<string, unknown> | string;
}

describe('health and metrics of a worker whose coordinating process is stopped', () => {
  const db = useTestDatabase();
  const clients: Client[] = [];
  afterAll(async () => {
    for (const client of clients) await client.destroy();
  });

  it('each worker answers /health/status, /health/ready and /metrics 503 within the bound; resumed, 200 again', async () => {
    const { key } = await createServiceAccount(db.pool);
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2', ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '300' },
      timeoutMs: 60_000,
    });
    const primary = gw.child.pid!;
    try {
      await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
      const pinned = await connectionsOnBothWorkers(gw.url, clients, 3);
      const ask = async (client: Client, path: string): Promise<Seen> => {
        const answer = client
          .request({ method: 'GET', path, headers: path === '/health/ready' ? bearer(key) : {} })
          .then(async (res) => {
            const text = await res.body.text();
            const json = (res.headers['content-type'] ?? '').toString().startsWith('application/json');
            const body = json ? (JSON.parse(text) as Record<string, unknown>) : text;
            return { path, status: res.statusCode, retryAfter: res.headers['retry-after'], body };
          });
        const timedOut = { path, status: 0, retryAfter: undefined, body: 'no answer' };
        return Promise.race([answer, sleep(ANSWER_BOUND_MS).then(() => timedOut)]);
      };
      const paths = ['/health/status', '/health/ready', '/metrics'];
      // One connection per path on each worker: a hung request would hold its connection.
      const askAll = () => Promise.all(pinned.map(({ client }, i) => ask(client, paths[i % paths.length]!)));
      for (const seen of await askAll()) expect(seen.status, seen.path).toBe(200);

      process.kill(primary, 'SIGSTOP');
      let stopped: Seen[];
      try {
        stopped = await askAll();
      } finally {
        process.kill(primary, 'SIGCONT');
      }
      for (const seen of stopped) {
        if (seen.path === '/metrics')
          expect(seen).toMatchObject({
            status: 503,
            retryAfter: '1',
            body: { code: 'unavailable', message: /coordinating process/ },
          });
        else
          expect(seen).toMatchObject({ status: 503, body: { status: 'unavailable', reason: /coordinating process/ } });
      }
      const status = stopped.find((s) => s.path === '/health/status')!.body as Record<string, unknown>;
      // The rest of the documented answer is what was read last.
      expect(status).toMatchObject({ workers: [{ state: 'serving' }, { state: 'serving' }] });

      for (const seen of await askAll()) expect(seen.status, seen.path).toBe(200);
    } finally {
      // Never leave the coordinating process stopped, whatever failed above.
      process.kill(primary, 'SIGCONT');
      await gw.stop();
    }
  });
});
