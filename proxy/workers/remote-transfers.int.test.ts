/**
 * A worker's admission when its coordinating process does not answer (ARKVORY_WORKERS=2: the
 * admission queue is the coordinating process's), through a real gateway process: the coordinating
 * process is stopped (SIGSTOP), and a download on each worker is answered 503 `unavailable` after the
 * admission wait bound plus its margin, not held until the client's idle timeout cuts it. Once the
 * coordinating process runs again the instance serves as before, and the slots it granted to the
 * requests that gave up meanwhile are released (docs/architecture.md, "Workers").
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import { connectionsOnBothWorkers, requestRetried, waitForWorkers } from '../../test/support/worker-instance.ts';

const WAIT_SECONDS = 1;
/**
 * Far above what the answer takes (the admission wait, 1 s, its 0.5 s margin, two rate-limit checks
 * of at most 300 ms each, the database's answers) and far below the send timeout (60 s) that would
 * otherwise cut the request with no answer.
 */
const ANSWER_BOUND_MS = 15_000;
/** How long the released slots may take to show on /metrics once the coordinating process runs. */
const RELEASE_BOUND_MS = 10_000;

async function activeDownloads(gw: GatewayProcess): Promise<number> {
  const text = (await requestRetried(gw, `${gw.url}/metrics`)).body.toString();
  const line = /^arkvory_admission_active\{kind="download"\} (\d+)$/m.exec(text);
  if (!line) throw new Error('no arkvory_admission_active{kind="download"} in /metrics');
  return Number(line[1]);
}

describe('admission of a worker whose coordinating process is stopped', () => {
  const db = useTestDatabase();
  const clients: Client[] = [];
  afterAll(async () => {
    for (const client of clients) await client.destroy();
  });

  it('each worker answers a download 503 unavailable within the bound; resumed, the instance serves and holds no slot', async () => {
    await createRepository(db.pool, 'ad');
    const { key } = await createServiceAccount(db.pool, { grants: { ad: 'write' } });
    const content = randomContent(64 * 1024);
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_WORKERS: '2',
        ARKVORY_ADMISSION_WAIT_SECONDS: String(WAIT_SECONDS),
        ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '300',
      },
      timeoutMs: 60_000,
    });
    const primary = gw.child.pid!;
    try {
      await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
      const put = await request(`${gw.url}/api/v1/repositories/ad/artifacts/a.bin`, {
        method: 'PUT',
        headers: bearer(key),
        body: content,
      });
      expect([200, 201]).toContain(put.status);
      const pinned = await connectionsOnBothWorkers(gw.url, clients, 1);
      const download = async (client: Client) => {
        const startedAt = performance.now();
        const answer = client
          .request({ method: 'GET', path: '/api/v1/repositories/ad/artifacts/a.bin/content', headers: bearer(key) })
          .then(async (res) => {
            const body = Buffer.from(await res.body.arrayBuffer());
            return {
              status: res.statusCode,
              code: res.statusCode >= 400 ? (JSON.parse(body.toString()) as { code: string }).code : '',
              retryAfter: res.headers['retry-after'],
              same: body.equals(content),
            };
          });
        const outcome = await Promise.race([
          answer,
          sleep(ANSWER_BOUND_MS).then(() => ({ status: 0, code: 'no answer', retryAfter: undefined, same: false })),
        ]);
        return { ...outcome, ms: performance.now() - startedAt };
      };
      for (const { client } of pinned) expect(await download(client)).toMatchObject({ status: 200, same: true });

      process.kill(primary, 'SIGSTOP');
      let stopped: Array<Awaited<ReturnType<typeof download>>>;
      try {
        stopped = await Promise.all(pinned.map(({ client }) => download(client)));
      } finally {
        process.kill(primary, 'SIGCONT');
      }
      for (const answer of stopped) {
        expect(answer).toMatchObject({ status: 503, code: 'unavailable', retryAfter: '1' });
        // The request waited for the coordinating process (the queue's wait bound), not less.
        expect(answer.ms).toBeGreaterThanOrEqual(WAIT_SECONDS * 1000);
      }

      for (const { client } of pinned) expect(await download(client)).toMatchObject({ status: 200, same: true });
      const deadline = performance.now() + RELEASE_BOUND_MS;
      let active = await activeDownloads(gw);
      while (active !== 0 && performance.now() < deadline) {
        await sleep(100);
        active = await activeDownloads(gw);
      }
      expect(active).toBe(0);
    } finally {
      // Never leave the coordinating process stopped, whatever failed above.
      process.kill(primary, 'SIGCONT');
      await gw.stop();
    }
  });
});
