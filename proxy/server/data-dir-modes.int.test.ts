/**
 * What another local account can read of a gateway's data dir: nothing the gateway wrote there.
 * The filesystem store keeps every repository's bytes under blobs/ (and uploads in progress under
 * tmp/ and uploads/); an account that can read them has every artifact without a key or a grant.
 * `npm start` runs under the user's umask (usually 022), so the gateway must not rely on it.
 */
import { spawnSync } from 'node:child_process';
import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { processEnv, runProcess } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { CLI, makeTempDir, ROOT, startGateway } from '../../test/support/gateway.ts';
import { startStaticStore } from '../../test/support/static-store.ts';

const NOBODY = 65534;
/** Under the umask most shells give `npm start` and the CLI. */
const PERMISSIVE_UMASK = ['sh', '-c', 'umask 022 && exec "$@"', 'sh'];
const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function arkvory(args: readonly string[], env: Record<string, string>) {
  const [sh, ...shArgs] = PERMISSIVE_UMASK;
  return runProcess(sh!, [...shArgs, process.execPath, CLI, ...args], { env: processEnv(env), cwd: ROOT });
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
}

/** The files of `files` that user nobody (no groups, no capabilities) can open for reading. */
function readableByNobody(files: readonly string[]): string[] {
  const run = spawnSync(
    'setpriv',
    [
      `--reuid=${NOBODY}`,
      `--regid=${NOBODY}`,
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--',
      'sh',
      '-c',
      'for f in "$@"; do cat -- "$f" >/dev/null 2>&1 && echo "$f"; done; exit 0',
      'sh',
      ...files,
    ],
    { encoding: 'utf8' },
  );
  expect(run.status, run.stderr).toBe(0);
  return run.stdout.split('\n').filter(Boolean);
}

/** A new repository `private` and one 64 KiB artifact published in it through the gateway at `url`. */
async function publishOne(url: string, pool: pg.Pool): Promise<void> {
  await createRepository(pool, 'private');
  const writer = await createServiceAccount(pool, { grants: { private: 'write' } });
  const put = await request(`${url}/api/v1/repositories/private/artifacts/secret.bin`, {
    method: 'PUT',
    headers: bearer(writer.key),
    body: randomContent(64 * 1024),
  });
  expect(put.status).toBe(201);
}

/** `root` holds a blob, and no file under it that the `nobody` account can read. */
async function expectUnreadableByOthers(root: string): Promise<void> {
  const files = await filesUnder(root);
  expect(files.some((f) => f.startsWith(path.join(root, 'blobs') + path.sep))).toBe(true);
  expect(readableByNobody(files)).toEqual([]);
}

describe('what the gateway and its backup and restore write under a permissive umask', () => {
  const db = useTestDatabase();

  it('holds no file another local account can read: artifacts, uploads, their backup and its restore', async () => {
    expect(process.getuid?.(), 'runs as root: it reads as user nobody with setpriv').toBe(0);
    // A data dir that does not exist yet, under a directory every account may traverse.
    const dataDir = path.join(await makeTempDir(), 'data');
    const gw = await startGateway({
      dataDir,
      env: { ARKVORY_DATABASE_URL: db.url },
      wrap: PERMISSIVE_UMASK,
    });
    await createRepository(db.pool, 'private');
    const writer = await createServiceAccount(db.pool, { grants: { private: 'write' } });
    const body = randomContent(64 * 1024);
    const put = await request(`${gw.url}/api/v1/repositories/private/artifacts/secret.bin`, {
      method: 'PUT',
      headers: bearer(writer.key),
      body,
    });
    expect(put.status).toBe(201);
    // A multipart session leaves its part under uploads/ until it is completed.
    const session = await request(`${gw.url}/api/v1/repositories/private/artifacts/parted.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(writer.key), 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    expect(session.status, session.body.toString()).toBe(201);
    const { upload } = JSON.parse(session.body.toString()) as { upload: string };
    const part = await request(`${gw.url}/api/v1/repositories/private/uploads/${upload}/parts/1`, {
      method: 'PUT',
      headers: bearer(writer.key),
      body: randomContent(16 * 1024),
    });
    expect(part.status, part.body.toString()).toBeLessThan(300);

    const files = await filesUnder(dataDir);
    const blobs = files.filter((f) => f.startsWith(path.join(dataDir, 'blobs') + path.sep));
    expect(blobs.length, 'the artifact is on disk').toBeGreaterThan(0);
    expect(files.some((f) => f.startsWith(path.join(dataDir, 'uploads') + path.sep))).toBe(true);
    expect(readableByNobody(files)).toEqual([]);

    // A backup on another filesystem (its blobs copied, not hard-linked), and a restore from it
    // into a fresh database and data dir: the same bytes, closed to other accounts too.
    const shm = await mkdtemp('/dev/shm/arkvory-backup-');
    cleanups.push(() => rm(shm, { recursive: true, force: true }));
    await chmod(shm, 0o755);
    const destination = path.join(shm, 'backups');
    const backup = await arkvory(['backup', destination], { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir });
    expect(backup.code, backup.stderr).toBe(0);
    const summary = JSON.parse(backup.stdout) as { blobs: { copied: number } };
    expect(summary.blobs.copied).toBeGreaterThan(0);
    expect(readableByNobody(await filesUnder(destination))).toEqual([]);

    const target = await createTestDatabase({ migrated: false });
    cleanups.push(target.drop);
    const restoredDir = path.join(await makeTempDir(), 'restored');
    const restore = await arkvory(['restore', destination], {
      ARKVORY_DATABASE_URL: target.url,
      ARKVORY_DATA_DIR: restoredDir,
    });
    expect(restore.code, restore.stderr).toBe(0);
    const restored = await filesUnder(restoredDir);
    expect(restored.some((f) => f.startsWith(path.join(restoredDir, 'blobs') + path.sep))).toBe(true);
    expect(readableByNobody(restored)).toEqual([]);
  });

  it('the same with ARKVORY_WORKERS: what its worker processes write', async () => {
    const dataDir = path.join(await makeTempDir(), 'data');
    const database = await createTestDatabase();
    cleanups.push(database.drop);
    const gw = await startGateway({
      dataDir,
      env: { ARKVORY_DATABASE_URL: database.url, ARKVORY_WORKERS: '2' },
      wrap: PERMISSIVE_UMASK,
    });
    await publishOne(gw.url, database.pool);
    await expectUnreadableByOthers(dataDir);
  });

  it('the static-HTTP store of deploy/static-store keeps what it is sent from other accounts of its host', async () => {
    const store = await startStaticStore();
    cleanups.push(() => store.stop());
    const database = await createTestDatabase();
    cleanups.push(database.drop);
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: database.url, ARKVORY_STORAGE_URL: store.url } });
    await publishOne(gw.url, database.pool);
    await expectUnreadableByOthers(store.root);
  });
});
