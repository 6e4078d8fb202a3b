/**
 * Faults around publishing: the writer killed mid-upload, the disk filling up, and a storage root
 * that does not belong to the database. Each must leave no catalog row and no partial blob.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdir, readdir, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it, onTestFinished } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { openUploadWithParts } from '../../test/support/multipart-upload.ts';
import { waitUntil } from '../../test/harness/index.ts';

const exec = promisify(execFile);
const MiB = 1024 * 1024;

async function blobCount(root: string): Promise<number> {
  const base = path.join(root, 'blobs', 'sha256');
  let n = 0;
  for (const a of await readdir(base))
    for (const b of await readdir(path.join(base, a))) n += (await readdir(path.join(base, a, b))).length;
  return n;
}

async function tmpBytes(root: string): Promise<number> {
  let total = 0;
  for (const f of await readdir(path.join(root, 'tmp'))) total += (await stat(path.join(root, 'tmp', f))).size;
  return total;
}

/**
 * A gateway whose DATA_DIR is a real, small tmpfs mounted with `options` (root may mount one here;
 * without that the test fails loudly), on a database of its own with `repo` and a key that may write
 * there. Unmounted and dropped when the test ends.
 */
async function gatewayOnTmpfs(options: string, repo: string) {
  const db = await createTestDatabase();
  onTestFinished(() => db.drop());
  const mountPoint = await makeTempDir('arkvory-tmpfs-');
  await exec('mount', ['-t', 'tmpfs', '-o', `${options},mode=0755`, 'tmpfs', mountPoint]);
  onTestFinished(async () => {
    await exec('umount', ['-l', mountPoint]).catch(() => {});
  });
  await chmod(mountPoint, 0o755);
  await createRepository(db.pool, repo);
  const { key } = await createServiceAccount(db.pool, { grants: { [repo]: 'write' } });
  const gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_LOG_LEVEL: 'warn' },
    dataDir: mountPoint,
    timeoutMs: 60_000,
  });
  return { db, gw, key, mountPoint };
}

describe('publish faults', () => {
  const db = useTestDatabase();

  it('kill -9 in the middle of a 50 MiB upload: after restart no row, no blob, tmp/ empty', async () => {
    await createRepository(db.pool, 'crash');
    const { key } = await createServiceAccount(db.pool, { grants: { crash: 'write' } });
    const dataDir = await makeTempDir();
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_LOG_LEVEL: 'warn' };
    const gw = await startGateway({ env, dataDir, timeoutMs: 60_000 });
    const data = randomContent(50 * MiB);
    let killed = false;
    async function* slowBody() {
      for (let offset = 0; offset < data.length; offset += MiB) {
        if (offset === 10 * MiB) {
          // The gateway holds a partial temp file now; kill it without any chance to clean up.
          const deadline = Date.now() + 20_000;
          while ((await tmpBytes(dataDir)) < 5 * MiB && Date.now() < deadline)
            await new Promise((r) => setTimeout(r, 50));
          expect(await tmpBytes(dataDir)).toBeGreaterThanOrEqual(5 * MiB);
          gw.child.kill('SIGKILL');
          killed = true;
          await gw.exited;
        }
        yield data.subarray(offset, offset + MiB);
      }
    }
    const upload = await request(`${gw.url}/api/v1/repositories/crash/artifacts/big`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-length': String(data.length), 'content-digest': contentDigest(data) },
      body: slowBody(),
    }).catch((err: Error) => err);
    expect(killed).toBe(true);
    expect(upload).toBeInstanceOf(Error);
    expect(await readdir(path.join(dataDir, 'tmp'))).not.toEqual([]);

    const restarted = await startGateway({ env, dataDir, timeoutMs: 60_000 });
    expect(await readdir(path.join(dataDir, 'tmp'))).toEqual([]);
    expect(await blobCount(dataDir)).toBe(0);
    const rows = await db.pool.query("SELECT 1 FROM arkvory_artifacts WHERE repository = 'crash'");
    expect(rows.rowCount).toBe(0);
    expect(
      (await request(`${restarted.url}/api/v1/repositories/crash/artifacts/big/content`, { headers: bearer(key) }))
        .status,
    ).toBe(404);
    // The same upload now succeeds on the restarted writer.
    const retry = await request(`${restarted.url}/api/v1/repositories/crash/artifacts/big`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-digest': contentDigest(data) },
      body: data,
    });
    expect(retry.status).toBe(201);
    expect(JSON.parse(retry.body.toString())).toMatchObject({ sha256: sha256(data) });
  }, 180_000);

  it('refuses to start on a storage root that is not the one bound to the database', async () => {
    const own = await createTestDatabase();
    onTestFinished(() => own.drop());
    const first = await startGateway({
      env: { ARKVORY_DATABASE_URL: own.url, ARKVORY_LOG_LEVEL: 'warn' },
      dataDir: await makeTempDir(),
      timeoutMs: 60_000,
    });
    expect(await first.stop('SIGTERM')).toBe(0);
    const stranger = await makeTempDir();
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: own.url }, dataDir: stranger, waitFor: 'none' });
    expect(await gw.exited).toBe(1);
    expect(gw.logs()).toMatch(
      /cannot start: the database is bound to storage [0-9a-f-]{36} but .* has no storage-id; point ARKVORY_DATA_DIR at that storage root/,
    );
    expect(await readdir(stranger)).toEqual([]);
  }, 180_000);
});

describe('disk full', () => {
  it('an upload that does not fit answers 507 storage_full and publishes nothing; the next one that fits succeeds', async () => {
    const { db, gw, key, mountPoint } = await gatewayOnTmpfs('size=16m', 'full');
    const put = (name: string, data: Buffer) =>
      request(`${gw.url}/api/v1/repositories/full/artifacts/${name}`, {
        method: 'PUT',
        headers: bearer(key),
        body: data,
      });

    const tooBig = randomContent(24 * MiB);
    const res = await put('too-big', tooBig);
    expect(res.status).toBe(507);
    expect(JSON.parse(res.body.toString())).toMatchObject({ code: 'storage_full' });
    expect(await readdir(path.join(mountPoint, 'tmp'))).toEqual([]);
    expect(await blobCount(mountPoint)).toBe(0);
    expect((await db.pool.query('SELECT 1 FROM arkvory_artifacts')).rowCount).toBe(0);

    const fits = randomContent(4 * MiB);
    const ok = await put('fits', fits);
    expect(ok.status, ok.body.toString()).toBe(201);
    const back = await request(`${gw.url}/api/v1/repositories/full/artifacts/fits/content`, { headers: bearer(key) });
    expect(sha256(back.body)).toBe(sha256(fits));
    await gw.stop('SIGTERM');
  }, 180_000);

  it('a multipart part that finds no inode left answers 507 storage_full, as a PUT does; with room again it is stored', async () => {
    const { gw, key, mountPoint } = await gatewayOnTmpfs('size=16m,nr_inodes=64', 'inodes');
    try {
      const base = `${gw.url}/api/v1/repositories/inodes`;
      const upload = await openUploadWithParts(base, 'parted', key, []);
      // Every inode left taken by files outside the storage root's layout.
      const filler = path.join(mountPoint, 'filler');
      await mkdir(filler);
      for (let i = 0; ; i++) {
        const full = await writeFile(path.join(filler, String(i)), '').then(
          () => false,
          (err: NodeJS.ErrnoException) => err.code === 'ENOSPC',
        );
        if (full) break;
      }
      const part = randomContent(64 * 1024);
      const putPart = () =>
        request(`${base}/uploads/${upload}/parts/1`, { method: 'PUT', headers: bearer(key), body: part });
      const refused = await putPart();
      expect(refused.status, refused.body.toString()).toBe(507);
      expect(JSON.parse(refused.body.toString())).toMatchObject({ code: 'storage_full' });
      const whole = await request(`${base}/artifacts/whole`, { method: 'PUT', headers: bearer(key), body: part });
      expect(whole.status, whole.body.toString()).toBe(507);

      await rm(filler, { recursive: true });
      const stored = await putPart();
      expect(stored.status, stored.body.toString()).toBe(200);
    } finally {
      await gw.stop('SIGTERM');
    }
  }, 180_000);

  it('a multipart completion that finds the disk full keeps its parts and publishes them byte-exact once there is room', async () => {
    const { db, gw, key, mountPoint } = await gatewayOnTmpfs('size=16m', 'fullmp');
    try {
      const base = `${gw.url}/api/v1/repositories/fullmp`;
      const json = (r: { body: Buffer }) => JSON.parse(r.body.toString()) as Record<string, unknown>;
      const parts = [randomContent(2 * MiB), randomContent(2 * MiB)];
      const upload = await openUploadWithParts(base, 'parted', key, parts);
      // The rest of the disk taken by a file outside the storage root's layout: no room to assemble.
      const filler = path.join(mountPoint, 'filler');
      // Whole MiBs first, then 4 KiB at a time, until not even that fits.
      for (const size of [MiB, 4096]) {
        let room = true;
        while (room)
          room = await writeFile(filler, Buffer.alloc(size), { flag: 'a' }).then(
            () => true,
            (err: NodeJS.ErrnoException) => {
              if (err.code !== 'ENOSPC') throw err;
              return false;
            },
          );
      }
      const completed = await request(`${base}/uploads/${upload}/complete`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) })) })),
      });
      expect(completed.status, completed.body.toString()).toBe(202);
      const session = async () => json(await request(`${base}/uploads/${upload}`, { headers: bearer(key) }));
      let seen: Record<string, unknown> = {};
      await waitUntil(
        async () => {
          seen = await session();
          return seen.error !== null || seen.state !== 'completing';
        },
        { what: 'the first assembly attempt', timeoutMs: 20_000 },
      );
      // Before, the full disk failed the upload for good and removed both parts.
      expect(seen).toMatchObject({ state: 'completing', error: expect.stringMatching(/^storage_full: /) });
      expect((seen.parts as unknown[]).length).toBe(2);
      expect(await readdir(path.join(mountPoint, 'uploads', upload))).toHaveLength(2);
      expect(await readdir(path.join(mountPoint, 'tmp'))).toEqual([]);
      expect(await blobCount(mountPoint)).toBe(0);

      // The operator frees the disk: the next attempt (2 s after the first) publishes.
      await rm(filler);
      await waitUntil(async () => ((seen = await session()), seen.state !== 'completing'), {
        what: 'the completion',
        timeoutMs: 20_000,
      });
      expect(seen).toMatchObject({ state: 'done', error: null });
      // Its parts are removed just after the outcome is recorded.
      await expect.poll(async () => (await session()).parts, { timeout: 10_000 }).toEqual([]);
      const back = await request(`${base}/artifacts/parted/content`, { headers: bearer(key) });
      expect(back.status).toBe(200);
      expect(sha256(back.body)).toBe(sha256(Buffer.concat(parts)));
      expect(await readdir(path.join(mountPoint, 'tmp'))).toEqual([]);
      expect((await db.pool.query('SELECT 1 FROM arkvory_quota_reservations WHERE id = $1', [upload])).rowCount).toBe(
        0,
      );
    } finally {
      await gw.stop('SIGTERM');
    }
  }, 180_000);
});
