/**
 * The slice cache in front of the S3 store (SeaweedFS; the cache logic is the same for every
 * remote store) with real clients and under its bounds, over real sockets. Slices are 1 MiB.
 * - aria2c -x 8 (eight ranged connections) and the resuming `arkvory get` read byte-exact from a
 *   cold, a half-warm and a warm cache.
 * - Eviction: the issue's 64 MiB bound under 1 GiB of distinct reads, scaled 1:4 with the same
 *   ratio (a 16 MiB bound, 256 MiB of distinct blobs, read one by one and four at a time, so
 *   concurrent fills exceed the bound too): the bytes on disk never pass the bound.
 * - A full disk during fills (the cache directory on a 4 MiB tmpfs that another writer keeps full):
 *   every read is byte-exact; the fills that found no room or could not be written are relayed
 *   from the store, never an error.
 */
import { spawn } from 'node:child_process';
import { appendFile, mkdir, readdir, readFile, rmdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, makeTempDir, runCli, startGateway } from '../../test/support/gateway.ts';
import { startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { runProcess, samplePeak, waitForSliceFills, waitUntil } from '../../test/harness/index.ts';
import { HOLDER_FILE, LOCK_FILE, PURGE_MARK_FILE, WORKERS_LOCK_FILE } from '../../storage-adapter/slice-cache/index.ts';

const MiB = 1024 * 1024;
const SLICE = MiB;
const BOOKKEEPING = new Set([PURGE_MARK_FILE, LOCK_FILE, HOLDER_FILE, WORKERS_LOCK_FILE]);

/**
 * Bytes of the slices under `dir`: its purge note (`purges`), the instance's locks and its note (a few
 * bytes) are no slices and not bounded.
 */
async function bytesOnDisk(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (!entry.isFile() || BOOKKEEPING.has(entry.name)) continue;
    total += await stat(path.join(entry.parentPath, entry.name)).then(
      (s) => s.size,
      () => 0,
    );
  }
  return total;
}

async function metric(gw: GatewayProcess, line: string): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const found = text.split('\n').find((l) => l.startsWith(`${line} `));
  return found ? Number(found.split(' ').at(-1)) : 0;
}

function run(cmd: string, args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

describe('slice cache with real clients and under its bounds (seaweedfs)', () => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let key: string;
  const env = (cacheDir: string, extra: Record<string, string> = {}) => ({
    ARKVORY_DATABASE_URL: db.url,
    ...backing.env,
    ARKVORY_CACHE_DIR: cacheDir,
    ARKVORY_CACHE_SLICE_BYTES: String(SLICE),
    ARKVORY_CACHE_MIN_FREE_BYTES: '0',
    ARKVORY_BLOB_CACHE_BYTES: '0',
    ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '16',
    ...extra,
  });

  beforeAll(async () => {
    backing = await startStoreBacking('seaweedfs');
    await createRepository(db.pool, 'b');
    ({ key } = await createServiceAccount(db.pool, { grants: { b: 'write' } }));
  });
  afterAll(async () => {
    await backing?.stop();
  });

  const artifact = (gw: GatewayProcess, id: string) => `${gw.url}/api/v1/repositories/b/artifacts/${id}`;
  async function upload(gw: GatewayProcess, id: string, body: Buffer): Promise<void> {
    expect((await request(artifact(gw, id), { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
  }

  it('aria2c -x 8 and arkvory get are byte-exact from a half-warm, a warm and a cold cache', async () => {
    const cacheDir = await makeTempDir('arkvory-slices-clients-');
    const gw = await startGateway({ env: env(cacheDir), timeoutMs: 60_000 });
    const first = randomContent(24 * MiB + 333);
    const second = randomContent(20 * MiB + 77);
    await upload(gw, 'first.bin', first);
    await upload(gw, 'second.bin', second);
    // Half-warm: every other 1 MiB slice of the first half of `first`.
    for (let i = 0; i < 12; i += 2) {
      const res = await request(`${artifact(gw, 'first.bin')}/content`, {
        headers: { ...bearer(key), range: `bytes=${i * SLICE + 10}-${i * SLICE + 20}` },
      });
      expect(res.status).toBe(206);
    }
    const out = await makeTempDir('arkvory-slices-out-');
    const aria = (name: string) =>
      run('aria2c', [
        '-q',
        '-x',
        '8',
        '-s',
        '8',
        '--min-split-size=1M',
        '--file-allocation=none',
        '--allow-overwrite=true',
        '--auto-file-renaming=false',
        `--header=Authorization: Bearer ${key}`,
        '-d',
        out,
        '-o',
        name,
        `${artifact(gw, 'first.bin')}/content`,
      ]);
    const halfWarm = await aria('half-warm.bin');
    expect(halfWarm.code, halfWarm.stderr).toBe(0);
    expect(sha256(await readFile(path.join(out, 'half-warm.bin')))).toBe(sha256(first));
    // Their request lines cross the gateway's stdout pipe after the answers: waited for.
    const ranged = () => gw.logLines().filter((l) => l.msg === 'request' && l.status === 206 && l.method === 'GET');
    await waitUntil(() => ranged().length >= 8 + 6, {
      what: '8 + 6 ranged request lines',
      timeoutMs: 10_000,
      process: gw,
    });
    const warm = await aria('warm.bin');
    expect(warm.code, warm.stderr).toBe(0);
    expect(sha256(await readFile(path.join(out, 'warm.bin')))).toBe(sha256(first));

    const cliEnv = { ARKVORY_URL: gw.url, ARKVORY_KEY: key };
    for (const [name, what] of [
      ['cold', 'second.bin'],
      ['warm', 'second.bin'],
      ['first-warm', 'first.bin'],
    ] as const) {
      const output = path.join(out, `get-${name}.bin`);
      const got = await runCli(['get', `b/${what}`, '-o', output], cliEnv);
      expect(got.code, got.stderr).toBe(0);
      const expected = what === 'first.bin' ? first : second;
      expect(JSON.parse(got.stdout).sha256).toBe(sha256(expected));
      expect(sha256(await readFile(output))).toBe(sha256(expected));
    }
    expect(await metric(gw, 'arkvory_slice_cache_requests_total{result="hit"}')).toBeGreaterThan(0);
    expect(await gw.stop()).toBe(0);
  }, 180_000);

  it('a 16 MiB bound holds under 256 MiB of distinct reads, sequential and four at a time', async () => {
    const cacheDir = await makeTempDir('arkvory-slices-evict-');
    const BOUND = 16 * MiB;
    const gw = await startGateway({
      env: env(cacheDir, { ARKVORY_CACHE_MAX_BYTES: String(BOUND) }),
      timeoutMs: 60_000,
    });
    const blobs = Array.from({ length: 32 }, () => randomContent(8 * MiB));
    for (const [i, b] of blobs.entries()) await upload(gw, `e${i}.bin`, b);
    let peak = 0;
    const onDisk = samplePeak(() => bytesOnDisk(cacheDir), 5);
    const read = async (i: number) => {
      const res = await request(`${artifact(gw, `e${i}.bin`)}/content`, { headers: bearer(key) });
      expect(res.status).toBe(200);
      expect(sha256(res.body)).toBe(sha256(blobs[i]!));
    };
    try {
      for (let i = 0; i < 16; i++) await read(i);
      for (let i = 16; i < 32; i += 4) await Promise.all([i, i + 1, i + 2, i + 3].map(read));
      // Verified slices are written behind their readers: the last ones are kept or relayed after.
      await waitForSliceFills(gw.url);
    } finally {
      peak = await onDisk.stop();
    }
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(BOUND);
    expect(await metric(gw, 'arkvory_slice_cache_held_bytes')).toBeLessThanOrEqual(BOUND);
    // 256 MiB went through a 16 MiB cache: at least 240 slices had to go.
    const evicted = await metric(gw, 'arkvory_slice_cache_evictions_total');
    const relayed = await metric(gw, 'arkvory_slice_cache_relayed_fills_total');
    expect(evicted + relayed).toBeGreaterThanOrEqual(240);
    expect(await gw.stop()).toBe(0);
  }, 240_000);

  it('a full disk during fills degrades to relaying from the store: every read byte-exact, never an error', async () => {
    const mount = path.join(await makeTempDir('arkvory-slices-full-'), 'tmpfs');
    await mkdir(mount);
    const mounted = await runProcess('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mount]);
    expect(mounted.code, `mounting a tmpfs needs root: ${mounted.stderr}`).toBe(0);
    let gw: GatewayProcess | undefined;
    try {
      const cacheDir = path.join(mount, 'cache');
      gw = await startGateway({ env: env(cacheDir), timeoutMs: 60_000 });
      const blobs = [randomContent(8 * MiB + 1), randomContent(6 * MiB)];
      for (const [i, b] of blobs.entries()) await upload(gw, `full${i}.bin`, b);
      // Something else on the cache's filesystem takes every byte that comes free, for as long as
      // the reads run: fills find no room, or lose it between the check and their writes.
      let hogging = true;
      let refused = 0;
      const hog = (async () => {
        const piece = Buffer.alloc(64 * 1024, 1);
        while (hogging) {
          try {
            await appendFile(path.join(mount, 'ballast'), piece);
          } catch (err) {
            if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
            refused++;
            await new Promise((r) => setTimeout(r, 1));
          }
        }
      })();
      try {
        for (let round = 0; round < 3; round++)
          for (const [i, b] of blobs.entries()) {
            const res = await request(`${artifact(gw, `full${i}.bin`)}/content`, { headers: bearer(key) });
            expect(res.status).toBe(200);
            expect(sha256(res.body)).toBe(sha256(b));
          }
      } finally {
        hogging = false;
        await hog;
      }
      expect(refused, 'the filesystem was full').toBeGreaterThan(0);
      expect(await metric(gw, 'arkvory_slice_cache_relayed_fills_total')).toBeGreaterThan(0);
      expect(await gw.stop()).toBe(0);
      gw = undefined;
    } finally {
      await gw?.stop('SIGKILL');
      const unmounted = await runProcess('umount', [mount]);
      expect(unmounted.code, unmounted.stderr).toBe(0);
      await rmdir(mount);
    }
  }, 180_000);
});
