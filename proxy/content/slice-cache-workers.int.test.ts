/**
 * The slice cache of an instance with several workers (ARKVORY_WORKERS=2) in front of a real static
 * store (nginx), through real gateway processes: the bounds are the instance's, each worker keeping
 * its share under its own w<index>/ (storage-adapter/slice-cache/worker-layout.ts).
 * - Reads spread over both workers leave at most ARKVORY_CACHE_MAX_BYTES of slices on disk, all under
 *   the workers' directories; what an earlier single process (slices/, tmp/) or a third worker (w2/)
 *   left is removed at the start, anything else in the directory left alone.
 *   `arkvory cache stats` counts every worker's slices; the console shows the answering worker's
 *   bytes against its share.
 * - A worker killed and replaced reuses its predecessor's directory: the other worker's slices stay,
 *   and the instance's held bytes are the bytes on disk (no worker counts another's files).
 * - A purge made while the instance is stopped is applied by each worker to its directory at start.
 * - A single process (its slices/, tmp/ and purge note directly under the directory) removes the
 *   workers' directories an earlier instance left.
 */
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitForSliceFills } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, makeTempDir, runCli, startGateway } from '../../test/support/gateway.ts';
import { startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { connectionsOnBothWorkers, waitForWorkers, workerPid } from '../../test/support/worker-instance.ts';
import { HOLDER_FILE, LOCK_FILE, PURGE_MARK_FILE, WORKERS_LOCK_FILE } from '../../storage-adapter/slice-cache/index.ts';

const MiB = 1024 * 1024;
const BOUND = 4 * MiB;
const BLOBS = 8;

/** Every file under `dir` (relative path → size). */
async function filesUnder(dir: string): Promise<Map<string, number>> {
  const files = new Map<string, number>();
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath, entry.name);
    const size = await stat(file).then(
      (s) => s.size,
      () => undefined,
    );
    if (size !== undefined) files.set(path.relative(dir, file), size);
  }
  return files;
}

/** The cache's bookkeeping files: each directory's purge note (`purges`), the instance's locks and its note. */
const BOOKKEEPING = new Set([PURGE_MARK_FILE, LOCK_FILE, HOLDER_FILE, WORKERS_LOCK_FILE]);

/** Bytes of the slices among `files`: the bookkeeping files (a few bytes) are no slices. */
const total = (files: Map<string, number>) =>
  [...files].filter(([file]) => !BOOKKEEPING.has(path.basename(file))).reduce((a, [, size]) => a + size, 0);

async function metric(gw: GatewayProcess, name: string): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ').at(-1)) : Number.NaN;
}

/** A file of `bytes` at `dir/rel`, its directories made. */
async function plant(dir: string, rel: string, bytes: number): Promise<void> {
  await mkdir(path.dirname(path.join(dir, rel)), { recursive: true });
  await writeFile(path.join(dir, rel), Buffer.alloc(bytes, 1));
}

/** A slice file name the cache would index: a sha256, the slice size, the index. */
const sliceName = (fill: string) => `${fill.repeat(64)}-${MiB}-0`;

describe('slice cache with ARKVORY_WORKERS=2: the bounds are the instance’s', () => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let key: string;
  let adminKey: string;
  const clients: Client[] = [];
  const env = (cacheDir: string, extra: Record<string, string> = {}) => ({
    ARKVORY_DATABASE_URL: db.url,
    ...backing.env,
    ARKVORY_CACHE_DIR: cacheDir,
    ARKVORY_CACHE_SLICE_BYTES: String(MiB),
    ARKVORY_CACHE_MAX_BYTES: String(BOUND),
    ARKVORY_CACHE_MIN_FREE_BYTES: '0',
    ARKVORY_CACHE_READAHEAD_SLICES: '0',
    ARKVORY_BLOB_CACHE_BYTES: '0',
    ...extra,
  });

  beforeAll(async () => {
    backing = await startStoreBacking('http');
    await createRepository(db.pool, 'sc');
    ({ key } = await createServiceAccount(db.pool, { grants: { sc: 'write' } }));
    ({ key: adminKey } = await createServiceAccount(db.pool, { scopes: ['admin'] }));
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.destroy()));
    await backing?.stop();
  });

  it('reads through both workers stay within ARKVORY_CACHE_MAX_BYTES; a replacement worker reuses its directory', async () => {
    const cacheDir = await makeTempDir('arkvory-slices-workers-');
    const gw = await startGateway({ env: env(cacheDir, { ARKVORY_WORKERS: '2' }) });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);

    for (let i = 0; i < BLOBS; i++) {
      const put = await request(`${gw.url}/api/v1/repositories/sc/artifacts/f${i}.bin`, {
        method: 'PUT',
        headers: bearer(key),
        body: randomContent(MiB),
      });
      expect(put.status).toBe(201);
    }
    // Half of the blobs read through each worker: each caches what it reads, under its own share.
    const conns = await connectionsOnBothWorkers(gw.url, clients, 1);
    for (let i = 0; i < BLOBS; i++) {
      const { client } = conns[i < BLOBS / 2 ? 0 : 1]!;
      const res = await client.request({
        path: `/api/v1/repositories/sc/artifacts/f${i}.bin/content`,
        method: 'GET',
        headers: bearer(key),
      });
      expect(res.statusCode).toBe(200);
      expect((await res.body.arrayBuffer()).byteLength).toBe(MiB);
      await waitForSliceFills(gw.url);
    }
    const cached = await filesUnder(cacheDir);
    expect(total(cached)).toBeLessThanOrEqual(BOUND);
    // Each worker kept what fits its half of the bound (its latest two slices).
    expect(total(await filesUnder(path.join(cacheDir, 'w0', 'slices')))).toBe(BOUND / 2);
    expect(total(await filesUnder(path.join(cacheDir, 'w1', 'slices')))).toBe(BOUND / 2);
    expect(await metric(gw, 'arkvory_slice_cache_held_bytes')).toBe(total(cached));
    // `arkvory cache stats` counts every worker's slices; the console holds a worker against its share.
    const disk = await runCli(['cache', 'stats'], { ARKVORY_DATABASE_URL: db.url, ARKVORY_CACHE_DIR: cacheDir });
    expect(JSON.parse(disk.stdout)).toMatchObject({ slices: BOUND / MiB, bytes: BOUND });
    // Console sessions are a process's: sign in and ask on one connection, so on one worker.
    const { client: one } = conns[1]!;
    const session = await one.request({ path: '/console/session', method: 'POST', headers: bearer(adminKey) });
    await session.body.dump();
    expect(session.statusCode).toBe(201);
    const cookie = String([session.headers['set-cookie']].flat()[0]).split(';')[0]!;
    const status = (await (
      await one.request({ path: '/console/api/status', method: 'GET', headers: { cookie } })
    ).body.json()) as { sliceCache: unknown };
    expect(status.sliceCache).toMatchObject({ heldBytes: BOUND / 2, maxBytes: BOUND / 2 });

    // Worker 1 dies; its replacement indexes w1/ again and leaves worker 0's files alone.
    const w0 = await filesUnder(path.join(cacheDir, 'w0'));
    process.kill(await workerPid(gw, 1), 'SIGKILL');
    await waitForWorkers(gw, (s) => s.workers.some((w) => w.index === 1 && w.restarts === 1 && w.state === 'serving'));
    expect(await filesUnder(path.join(cacheDir, 'w0'))).toEqual(w0);
    expect(total(await filesUnder(cacheDir))).toBe(BOUND);
    expect(await metric(gw, 'arkvory_slice_cache_held_bytes')).toBe(BOUND);
    await gw.stop();
  });

  it('a purge made while the instance is stopped is applied by each worker when it starts', async () => {
    const cacheDir = await makeTempDir('arkvory-slices-workers-purge-');
    let gw = await startGateway({ env: env(cacheDir, { ARKVORY_WORKERS: '2' }) });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const conns = await connectionsOnBothWorkers(gw.url, clients, 1);
    for (const [i, { client }] of conns.entries()) {
      const body = randomContent(MiB);
      const put = await request(`${gw.url}/api/v1/repositories/sc/artifacts/p${i}.bin`, {
        method: 'PUT',
        headers: bearer(key),
        body,
      });
      expect(put.status).toBe(201);
      const res = await client.request({
        path: `/api/v1/repositories/sc/artifacts/p${i}.bin/content`,
        method: 'GET',
        headers: bearer(key),
      });
      await res.body.dump();
      await waitForSliceFills(gw.url);
    }
    const slicesOf = async (worker: string) => total(await filesUnder(path.join(cacheDir, worker, 'slices')));
    expect([await slicesOf('w0'), await slicesOf('w1')]).toEqual([MiB, MiB]);
    await gw.stop();

    for (const i of [0, 1]) {
      const purge = ['cache', 'purge', '--repository', 'sc', '--artifact', `p${i}.bin`];
      expect((await runCli(purge, { ARKVORY_DATABASE_URL: db.url })).code).toBe(0);
    }
    gw = await startGateway({ env: env(cacheDir, { ARKVORY_WORKERS: '2' }) });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    expect([await slicesOf('w0'), await slicesOf('w1')]).toEqual([0, 0]);
    await gw.stop();
  });

  it('at the start, what a single process or a third worker left is removed, anything else kept', async () => {
    const cacheDir = await makeTempDir('arkvory-slices-stray-');
    await plant(cacheDir, path.join('slices', 'aa', sliceName('a')), MiB);
    await plant(cacheDir, path.join('tmp', 'half-written'), MiB);
    await plant(cacheDir, path.join('w2', 'slices', 'bb', sliceName('b')), MiB);
    await plant(cacheDir, 'operator-notes.txt', 10);
    const gw = await startGateway({ env: env(cacheDir, { ARKVORY_WORKERS: '2' }) });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    expect((await readdir(cacheDir)).sort()).toEqual([
      LOCK_FILE,
      HOLDER_FILE,
      'operator-notes.txt',
      'w0',
      'w1',
      WORKERS_LOCK_FILE,
    ]);
    await gw.stop();
  });

  it('a single process removes the directories of workers an earlier instance left', async () => {
    const cacheDir = await makeTempDir('arkvory-slices-single-');
    await plant(cacheDir, path.join('w0', 'slices', 'aa', sliceName('a')), MiB);
    await plant(cacheDir, path.join('w1', 'tmp', 'half-written'), MiB);
    const gw = await startGateway({ env: env(cacheDir) });
    expect((await readdir(cacheDir)).sort()).toEqual([
      LOCK_FILE,
      HOLDER_FILE,
      'purges',
      'slices',
      'tmp',
      WORKERS_LOCK_FILE,
    ]);
    await gw.stop();
  });
});
