/**
 * Fault: `limit_data` (0 bytes) on the completion worker's PostgreSQL link while it assembles a
 * multipart upload: every connection is closed at the next byte it sends, so the job's next query
 * (the catalog lookup before publishing) is cut. Expected: nothing half-published (no catalog row,
 * no blob, 404 for the content, the upload neither done nor failed). Recovery: the toxic removed,
 * the worker queues the job again by itself and publishes it on the second attempt, bytes exact.
 * The worker is its own process (`ARKVORY_ROLE=worker`): a writer's link also carries its lease
 * connection, whose loss fences it first (writer-link-cut-upload.chaos.test.ts). The worker reads the
 * parts from a static-HTTP store through a `bandwidth` toxic, so the assembly lasts ~2 s and the
 * fault lands in its middle whatever the machine's speed.
 */
import { createHash } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { randomContent } from '../test/support/content.ts';
import { startGateway, type GatewayProcess } from '../test/support/gateway.ts';
import { startStaticStore, type StaticStore } from '../test/support/static-store.ts';
import { call } from './support/gateways.ts';
import { addToxic, type ProxiedUpstream } from './support/toxiproxy.ts';
import { waitUntil } from '../test/harness/index.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';

const MiB = 1024 * 1024;
/** KB/s (1 KB = 1000 bytes): 4 MiB of parts take ~2.1 s to read. */
const STORE_LINK_KB_PER_SEC = 2000;
const parts = [randomContent(2 * MiB), randomContent(2 * MiB)];
const file = Buffer.concat(parts);
const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const target = '/api/v1/repositories/chaos/artifacts/assembled.bin';

const chaos = useToxiproxyAndDatabase();
let store: StaticStore;
let storeLink: ProxiedUpstream;
let dbLink: ProxiedUpstream;
let writer: GatewayProcess;
let worker: GatewayProcess;

beforeAll(async () => {
  store = await startStaticStore();
  storeLink = await chaos.toxiproxy.proxyTo(`127.0.0.1:${store.port}`);
  dbLink = await chaos.toxiproxy.proxyToUrl(inject('adminDatabaseUrl'));
  writer = await startGateway({
    env: { ARKVORY_DATABASE_URL: chaos.db.url, ARKVORY_STORAGE_URL: store.url, ARKVORY_EMBEDDED_WORKER: '0' },
    timeoutMs: 60_000,
  });
  worker = await startGateway({
    env: {
      ARKVORY_ROLE: 'worker',
      ARKVORY_DATABASE_URL: dbLink.through(chaos.db.url),
      ARKVORY_STORAGE_URL: storeLink.through(store.url),
    },
    timeoutMs: 60_000,
  });
  await waitUntil(() => worker.logs().includes('worker.active'), {
    timeoutMs: 15_000,
    intervalMs: 50,
    what: 'the worker to become active',
  });
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await writer?.stop();
  await store?.stop();
});

async function post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await call(`${writer.url}${path}`, {
    method: 'POST',
    key: chaos.key,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify(body)),
  });
  return { status: res.status, json: JSON.parse(res.body.toString()) as Record<string, unknown> };
}

async function jobOf(upload: string): Promise<{ state: string; attempts: number } | undefined> {
  return (
    await chaos.db.pool.query<{ state: string; attempts: number }>(
      'SELECT state, attempts FROM arkvory_upload_jobs WHERE session_id = $1',
      [upload],
    )
  ).rows[0];
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => e.name);
}

describe('the completion worker loses PostgreSQL in the middle of a multipart completion', () => {
  it('publishes nothing half-way, then retries the job by itself and publishes the exact bytes', async () => {
    const opened = await post(`${target}/uploads`, { size: file.length });
    expect(opened.status).toBe(201);
    const upload = opened.json.upload as string;
    for (const [i, part] of parts.entries()) {
      const put = await call(`${writer.url}/api/v1/repositories/chaos/uploads/${upload}/parts/${i + 1}`, {
        method: 'PUT',
        key: chaos.key,
        body: part,
      });
      expect(put.status).toBe(200);
    }
    const slowStore = await addToxic(
      storeLink,
      'bandwidth',
      'downstream',
      { rate: STORE_LINK_KB_PER_SEC },
      'slow-parts',
    );
    const completed = await post(`/api/v1/repositories/chaos/uploads/${upload}/complete`, {
      parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: digest(p) })),
    });
    expect(completed.status).toBe(202);

    // The worker claimed the job and reads the parts; cut its database link at the next byte.
    await waitUntil(async () => (await jobOf(upload))?.state === 'running', {
      timeoutMs: 10_000,
      intervalMs: 10,
      what: 'the worker to claim the job',
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const cut = await addToxic(dbLink, 'limit_data', 'upstream', { bytes: 0 }, 'cut-after-0-bytes');
    await waitUntil(() => worker.logs().includes('worker.db_unreachable'), {
      timeoutMs: 15_000,
      intervalMs: 50,
      what: 'the worker to lose PostgreSQL',
    });

    // Nothing half-published while the link is cut.
    expect((await chaos.db.pool.query(`SELECT 1 FROM arkvory_artifacts WHERE name = 'assembled.bin'`)).rowCount).toBe(
      0,
    );
    expect((await call(`${writer.url}${target}/content`, { key: chaos.key })).status).toBe(404);
    expect(
      (
        await chaos.db.pool.query<{ state: string }>('SELECT state FROM arkvory_upload_sessions WHERE id = $1', [
          upload,
        ])
      ).rows[0]?.state,
    ).toBe('completing');
    expect(await jobOf(upload)).toEqual({ state: 'running', attempts: 1 });
    await waitUntil(async () => (await filesUnder(`${store.root}/tmp`)).length === 0, {
      timeoutMs: 5000,
      intervalMs: 50,
      what: 'the staged blob to be discarded',
    });
    expect((await filesUnder(`${store.root}/blobs`)).filter((f) => f.includes(digest(file)))).toEqual([]);
    expect(worker.logLines().filter((l) => l.event === 'upload.failed')).toEqual([]);

    // The link returns: the worker queues the job again by itself and publishes it.
    await cut.remove();
    await slowStore.remove();
    await waitUntil(async () => (await jobOf(upload))?.state === 'done', {
      timeoutMs: 30_000,
      intervalMs: 50,
      what: 'the job to be done',
    });
    expect(await jobOf(upload)).toEqual({ state: 'done', attempts: 2 });
    expect(worker.logs()).toContain('worker.resumed');
    const status = await call(`${writer.url}/api/v1/repositories/chaos/uploads/${upload}`, { key: chaos.key });
    expect(JSON.parse(status.body.toString())).toMatchObject({ state: 'done' });
    const got = await call(`${writer.url}${target}/content`, { key: chaos.key });
    expect(got.status).toBe(200);
    expect(digest(got.body)).toBe(digest(file));
    expect((await chaos.db.pool.query(`SELECT 1 FROM arkvory_artifacts WHERE name = 'assembled.bin'`)).rowCount).toBe(
      1,
    );
    expect(worker.logs()).not.toMatch(/unhandled|uncaught/i);
  }, 120_000);
});
