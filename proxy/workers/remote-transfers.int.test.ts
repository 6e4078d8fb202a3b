/**
 * A worker's admission when its coordinating process does not answer (ARKVORY_WORKERS=2: the
 * admission queue is the coordinating process's), through a real gateway process: the coordinating
 * process is stopped (SIGSTOP), and a download on each worker is answered 503 `unavailable` after the
 * admission wait bound plus its margin, not held until the client's idle timeout cuts it. Once the
 * coordinating process runs again the instance serves as before, and the slots it granted to the
 * requests that gave up meanwhile are released (docs/architecture.md, "Workers"). A paced download
 * and upload under way on each worker are failed within 3 s of the stop (take-watch.ts) rather than
 * held for as long as it lasts, and counted; meanwhile a metadata request is still answered 200
 * while /health/status says 503.
 */
import { PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'undici';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
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

/** The paced ceilings of the second test: a download of `PACED_BYTES` lasts about 16 s. */
const PACED_RATE = 64 * 1024;
const PACED_BYTES = 1024 * 1024;
/**
 * Far above when a take waiting on a stopped coordinating process fails (within 3 s: a check every
 * second, each answered within 2 s) and far below the idle timeouts (60 s), which the pacing
 * exempts anyway: on the old code the streams are still held here.
 */
const TAKE_BOUND_MS = 6000;

describe('paced streams of a worker whose coordinating process is stopped', () => {
  const db = useTestDatabase();
  const clients: Client[] = [];
  let primary: number | undefined;
  let gw: GatewayProcess | undefined;
  afterEach(async () => {
    // Never leave the coordinating process stopped, whatever failed.
    if (primary !== undefined) {
      try {
        process.kill(primary, 'SIGCONT');
      } catch {}
    }
    for (const client of clients.splice(0)) await client.destroy();
    await gw?.stop();
    gw = undefined;
    primary = undefined;
  });

  it('a download under way is cut and an upload under way is 503 unavailable within the bound, each counted', async () => {
    await createRepository(db.pool, 'pc');
    // Uploads paced by their repository's ceiling, so the download stored first is not.
    await createRepository(db.pool, 'pu');
    await db.pool.query("UPDATE arkvory_repositories SET upload_bytes_per_second = $1 WHERE name = 'pu'", [PACED_RATE]);
    const { key } = await createServiceAccount(db.pool, { grants: { pc: 'write', pu: 'write' } });
    const content = randomContent(PACED_BYTES);
    gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_WORKERS: '2',
        ARKVORY_ADMISSION_WAIT_SECONDS: '1',
        ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '300',
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(PACED_RATE),
        ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '2',
      },
      timeoutMs: 60_000,
    });
    const instance = gw;
    primary = gw.child.pid!;
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const put = await request(`${gw.url}/api/v1/repositories/pc/artifacts/a.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body: content,
    });
    expect([200, 201]).toContain(put.status);
    const pinned = await connectionsOnBothWorkers(gw.url, clients, 2);

    // On each worker: a download whose first bytes arrived, and an upload holding its admission.
    const downloads = await Promise.all(
      pinned
        .filter((_, i) => i % 2 === 0)
        .map(async ({ client }) => {
          const res = await client.request({
            method: 'GET',
            path: '/api/v1/repositories/pc/artifacts/a.bin/content',
            headers: bearer(key),
          });
          expect(res.statusCode).toBe(200);
          const chunks = res.body[Symbol.asyncIterator]();
          await chunks.next();
          return chunks;
        }),
    );
    const uploads = pinned
      .filter((_, i) => i % 2 === 1)
      .map(({ client }, i) => {
        const body = new PassThrough();
        body.write(content.subarray(0, 16 * 1024));
        const answer = client
          .request({
            method: 'PUT',
            path: `/api/v1/repositories/pu/artifacts/up-${i}.bin`,
            headers: { ...bearer(key), 'content-length': String(content.length) },
            body,
          })
          .then(
            async (res) => ({ status: res.statusCode, body: await res.body.text() }),
            (err: Error) => ({ status: 0, body: err.message }),
          );
        return { body, answer };
      });
    await waitForAdmitted(instance, 'upload', 2);

    process.kill(primary, 'SIGSTOP');
    const startedAt = performance.now();
    const within = <T>(p: Promise<T>, none: T) => Promise.race([p, sleep(TAKE_BOUND_MS).then(() => none)]);
    const cut = downloads.map((chunks) =>
      within(
        (async () => {
          try {
            for (let next = await chunks.next(); !next.done; next = await chunks.next());
            return 'complete';
          } catch {
            return 'cut';
          }
        })(),
        'held',
      ),
    );
    for (const { body } of uploads) body.write(content.subarray(16 * 1024, 256 * 1024));
    // Meanwhile what needs none of the coordinating process's state is still served, while the
    // health check tells a balancer to send new requests elsewhere.
    const meanwhile = Promise.all([
      request(`${instance.url}/api/v1/repositories/pc/artifacts/a.bin`, { headers: bearer(key) }),
      request(`${instance.url}/health/status`),
    ]);
    const refused = uploads.map(({ answer }) => within(answer, { status: -1, body: 'held' }));
    const outcomes = { downloads: await Promise.all(cut), uploads: await Promise.all(refused) };
    const tookMs = performance.now() - startedAt;
    const [metadata, health] = await meanwhile;
    process.kill(primary, 'SIGCONT');
    for (const { body } of uploads) body.destroy();

    expect({ downloads: outcomes.downloads, uploads: outcomes.uploads.map((u) => u.status) }).toEqual({
      downloads: ['cut', 'cut'],
      uploads: [503, 503],
    });
    for (const upload of outcomes.uploads) {
      expect(JSON.parse(upload.body)).toMatchObject({ code: 'unavailable' });
      expect(upload.body).toMatch(/bandwidth/);
    }
    expect(tookMs).toBeLessThan(TAKE_BOUND_MS);
    expect({ metadata: metadata.status, health: health.status }).toEqual({ metadata: 200, health: 503 });

    // Resumed, the instance counts the four streams failed (two per direction) and serves again.
    const fresh = await requestRetried(instance, `${instance.url}/metrics`);
    const text = fresh.body.toString();
    expect(text).toMatch(/^arkvory_bandwidth_unanswered_total\{direction="download"\} 2$/m);
    expect(text).toMatch(/^arkvory_bandwidth_unanswered_total\{direction="upload"\} 2$/m);
    const again = await request(`${instance.url}/api/v1/repositories/pc/artifacts/a.bin/content`, {
      headers: { ...bearer(key), range: 'bytes=0-1023' },
    });
    expect(again.status).toBe(206);
  });
});

/** Waits until the instance counts `count` admitted transfers of `kind`. */
async function waitForAdmitted(gw: GatewayProcess, kind: 'download' | 'upload', count: number): Promise<void> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const text = (await requestRetried(gw, `${gw.url}/metrics`)).body.toString();
    const line = new RegExp(`^arkvory_admission_active\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(text);
    if (line && Number(line[1]) >= count) return;
    if (performance.now() > deadline) throw new Error(`never ${count} ${kind}s admitted`);
    await sleep(50);
  }
}
