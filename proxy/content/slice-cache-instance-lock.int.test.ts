/**
 * One gateway instance per slice cache directory (storage-adapter/slice-cache/directory-lock.ts),
 * with real gateway processes in front of a real static store (nginx):
 * - a second instance given the directory of a running one refuses to start (exit 1,
 *   `cache_dir_in_use`, naming the holder) before it touches anything there: the first keeps its
 *   slices, which another layout's start would have removed;
 * - the workers of one instance (ARKVORY_WORKERS=2) each fill their part under the instance's hold,
 *   and a single process given that directory is refused;
 * - workers left running by a coordinating process killed with SIGKILL hold off the next start
 *   until they have exited;
 * - a holder killed with SIGKILL leaves no lock behind: the next start takes the directory, its
 *   slices included, and holds it against another;
 * - another account of the host cannot open the lock files (0600), so it cannot hold a lock on
 *   them that keeps every gateway from starting.
 */
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { LOCK_FILE, WORKERS_LOCK_FILE } from '../../storage-adapter/slice-cache/index.ts';
import { waitForSliceFills, waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { connectionsOnBothWorkers, waitForWorkers, workerPid } from '../../test/support/worker-instance.ts';

const MiB = 1024 * 1024;
/** A refused start exits within this; one that is not refused would still be running. */
const REFUSAL_BOUND_MS = 30_000;

/** The slice files under `dir` (relative paths), every layout's. */
async function slicesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true }).catch(() => []);
  return entries.filter((f) => /(^|\/)slices\/[0-9a-f]{2}\/[0-9a-f]{64}-\d+-\d+$/.test(f)).sort();
}

/** The process has exited (gone, or a zombie no one has reaped yet: its locks are let go either way). */
async function gone(pid: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  return stat === undefined || stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
}

/** The exit code of a start expected to be refused, or 'still running' past the bound. */
async function refusal(gw: GatewayProcess): Promise<number | string> {
  return Promise.race([gw.exited, sleep(REFUSAL_BOUND_MS).then(() => 'still running')]);
}

function expectRefusedFor(gw: GatewayProcess, dir: string, holder: GatewayProcess): void {
  expect(gw.logs()).toContain('"code":"cache_dir_in_use"');
  expect(gw.stderr()).toContain(
    `arkvory: cannot start: ARKVORY_CACHE_DIR=${dir} is held by another gateway instance (process ${holder.child.pid} on `,
  );
}

describe('one gateway instance per slice cache directory', () => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let key: string;
  const clients: Client[] = [];
  // The shared profile: a writer (slot 0) and readers on one host, each in its own slot.
  const env = (cacheDir: string, slot: number, extra: Record<string, string> = {}) => ({
    ARKVORY_DATABASE_URL: db.url,
    ...backing.env,
    ARKVORY_REDIS_URL: inject('redisUrl'),
    ARKVORY_GATEWAY_SLOTS: '4',
    ARKVORY_GATEWAY_SLOT: String(slot),
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(1024 * MiB),
    ...(slot > 0 ? { ARKVORY_ROLE: 'reader' } : {}),
    ARKVORY_CACHE_DIR: cacheDir,
    ARKVORY_CACHE_SLICE_BYTES: String(MiB),
    ARKVORY_CACHE_MIN_FREE_BYTES: '0',
    ARKVORY_CACHE_READAHEAD_SLICES: '0',
    ARKVORY_BLOB_CACHE_BYTES: '0',
    ...extra,
  });

  beforeAll(async () => {
    backing = await startStoreBacking('http');
    await createRepository(db.pool, 'lk');
    ({ key } = await createServiceAccount(db.pool, { grants: { lk: 'write' } }));
    // Readers start once a writer has stored the shared download policy, whichever test runs first.
    await (await startGateway({ env: env(await makeTempDir('arkvory-lock-policy-'), 0) })).stop();
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.destroy()));
    await backing?.stop();
  });

  /** Uploads `name` through `gw` and reads it once, so its slice is kept; returns its bytes. */
  async function cached(gw: GatewayProcess, name: string): Promise<Buffer> {
    const body = randomContent(MiB);
    const url = `${gw.url}/api/v1/repositories/lk/artifacts/${name}`;
    expect((await request(url, { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
    expect(sha256((await request(`${url}/content`, { headers: bearer(key) })).body)).toBe(sha256(body));
    await waitForSliceFills(gw.url);
    return body;
  }

  it('a second instance on the directory of a running one is refused before it touches it', async () => {
    const dir = await makeTempDir('arkvory-lock-second-');
    const first = await startGateway({ env: env(dir, 0) });
    await cached(first, 'second.bin');
    const held = await slicesUnder(dir);
    expect(held).toHaveLength(1);

    // With workers its layout differs: had it started, it would have removed the first one's slices/.
    const second = await startGateway({ env: env(dir, 1, { ARKVORY_WORKERS: '2' }), waitFor: 'none' });
    expect(await refusal(second)).toBe(1);
    expectRefusedFor(second, dir, first);
    expect(await slicesUnder(dir)).toEqual(held);
    // The same layout is refused as well.
    const third = await startGateway({ env: env(dir, 2), waitFor: 'none' });
    expect(await refusal(third)).toBe(1);
    expectRefusedFor(third, dir, first);
    expect(await slicesUnder(dir)).toEqual(held);
    expect(first.isRunning()).toBe(true);
  }, 120_000);

  it('the workers of one instance fill their parts under its hold; a single process on that directory is refused', async () => {
    const dir = await makeTempDir('arkvory-lock-workers-');
    const instance = await startGateway({ env: env(dir, 0, { ARKVORY_WORKERS: '2' }) });
    await waitForWorkers(instance, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const names = ['w-a.bin', 'w-b.bin'];
    for (const name of names) {
      const put = await request(`${instance.url}/api/v1/repositories/lk/artifacts/${name}`, {
        method: 'PUT',
        headers: bearer(key),
        body: randomContent(MiB),
      });
      expect(put.status).toBe(201);
    }
    const conns = await connectionsOnBothWorkers(instance.url, clients, 1);
    for (const [i, { client }] of conns.entries()) {
      const res = await client.request({
        path: `/api/v1/repositories/lk/artifacts/${names[i]}/content`,
        method: 'GET',
        headers: bearer(key),
      });
      expect(res.statusCode).toBe(200);
      await res.body.dump();
      await waitForSliceFills(instance.url);
    }
    const held = await slicesUnder(dir);
    expect(held.map((f) => f.split('/')[0])).toEqual(['w0', 'w1']);

    // Its start would have removed w0/ and w1/, which a single process does not use.
    const single = await startGateway({ env: env(dir, 1), waitFor: 'none' });
    expect(await refusal(single)).toBe(1);
    expectRefusedFor(single, dir, instance);
    expect(await slicesUnder(dir)).toEqual(held);
    await waitForWorkers(instance, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
  }, 120_000);

  it('workers left running by a coordinating process killed with SIGKILL hold off the next start until they are gone', async () => {
    const dir = await makeTempDir('arkvory-lock-orphans-');
    // A reader's slot: the slot of a killed gateway stays reserved for a while, and later tests use the writer's.
    const instance = await startGateway({ env: env(dir, 3, { ARKVORY_WORKERS: '2' }) });
    await waitForWorkers(instance, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const workers = [await workerPid(instance, 0), await workerPid(instance, 1)];
    // Stopped, they outlive their coordinating process for as long as the test needs (on their own
    // they would drain for up to the shutdown timeout, still using their parts).
    for (const pid of workers) process.kill(pid, 'SIGSTOP');
    try {
      expect(await instance.stop('SIGKILL')).toBe('SIGKILL');
      const early = await startGateway({ env: env(dir, 1), waitFor: 'none' });
      expect(await refusal(early)).toBe(1);
      expect(early.logs()).toContain('"code":"cache_dir_in_use"');
      expect(early.stderr()).toContain(
        `arkvory: cannot start: ARKVORY_CACHE_DIR=${dir} is still used by the workers of a gateway instance whose coordinating process is gone`,
      );
    } finally {
      for (const pid of workers) process.kill(pid, 'SIGKILL');
    }
    await waitUntil(async () => (await Promise.all(workers.map(gone))).every(Boolean), {
      what: 'the stopped workers to exit',
      timeoutMs: 10_000,
    });
    const next = await startGateway({ env: env(dir, 2) });
    expect(next.isRunning()).toBe(true);
  }, 120_000);

  it('a holder killed with SIGKILL does not block the next start, which holds the directory in turn', async () => {
    const dir = await makeTempDir('arkvory-lock-killed-');
    const killed = await startGateway({ env: env(dir, 0) });
    const body = await cached(killed, 'killed.bin');
    const held = await slicesUnder(dir);
    expect(held).toHaveLength(1);
    expect(await killed.stop('SIGKILL')).toBe('SIGKILL');

    const next = await startGateway({ env: env(dir, 1) });
    // The slice the killed one kept is served from disk: the directory was taken over, not cleared.
    const res = await request(`${next.url}/api/v1/repositories/lk/artifacts/killed.bin/content`, {
      headers: bearer(key),
    });
    expect(sha256(res.body)).toBe(sha256(body));
    const metrics = await (await fetch(`${next.url}/metrics`)).text();
    expect(metrics).toMatch(/arkvory_slice_cache_requests_total\{result="hit"\} 1\n/);
    expect(await slicesUnder(dir)).toEqual(held);

    const another = await startGateway({ env: env(dir, 2), waitFor: 'none' });
    expect(await refusal(another)).toBe(1);
    expectRefusedFor(another, dir, next);
  }, 120_000);

  it('another account of the host cannot open the lock files, so it cannot keep a gateway from starting', async () => {
    // A directory every account may reach, as a unit's CacheDirectory= (mode 0755) under /var/cache is.
    const base = await mkdtemp('/var/tmp/arkvory-lock-others-');
    onTestFinished(() => rm(base, { recursive: true, force: true }));
    await chmod(base, 0o755);
    const dir = path.join(base, 'cache');
    await (await startGateway({ env: env(dir, 0) })).stop();

    // What a worker does to share the directory, done by another account on each lock file: a
    // shared lock held on either would refuse every start (`cache_dir_in_use`).
    const tries = [LOCK_FILE, WORKERS_LOCK_FILE].map(async (name) => {
      const script = `const { DatabaseSync } = require('node:sqlite');
        const db = new DatabaseSync(${JSON.stringify(path.join(dir, name))}, { readOnly: true, timeout: 0 });
        db.exec('BEGIN; SELECT count(*) FROM sqlite_schema');
        console.log('held');
        setInterval(() => {}, 1000);`;
      const child = spawn(
        'setpriv',
        ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, '-e', script],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      onTestFinished(() => {
        child.kill('SIGKILL');
      });
      let out = '';
      child.on('error', (err) => (out += String(err)));
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      await waitUntil(async () => out.includes('held') || child.exitCode !== null, {
        what: `another account's try at ${name}`,
        timeoutMs: 20_000,
        intervalMs: 20,
      });
      return { name, held: out.includes('held'), out };
    });
    const results = await Promise.all(tries);
    expect(results.map((r) => [r.name, r.held])).toEqual([
      [LOCK_FILE, false],
      [WORKERS_LOCK_FILE, false],
    ]);
    for (const r of results) expect(r.out).toMatch(/unable to open database file/);
    for (const name of [LOCK_FILE, WORKERS_LOCK_FILE])
      expect((await stat(path.join(dir, name))).mode & 0o777).toBe(0o600);
    const gw = await startGateway({ env: env(dir, 0) });
    expect(await gw.stop()).toBe(0);
  }, 120_000);
});
