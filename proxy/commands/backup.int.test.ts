/**
 * `arkvory backup` / `arkvory restore` with real processes: a writer taking full and multipart
 * uploads while the backup runs, a restore into a fresh database and storage root, a gateway on the
 * restored pair, and the damage `--verify` must find. On the store kinds a gateway reaches without a
 * bucket (the directory and nginx); the S3 kinds' backup and restore round trip is in the conformance
 * suite (test/conformance/artifact-store.ts), their restore target in restore-target.int.test.ts.
 */
import { execFile, spawn } from 'node:child_process';
import net from 'node:net';
import { constants, existsSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { localHostName, PARTIAL_STALE_MS } from '../../storage-adapter/backup/backup-dir.ts';
import { createCatalog } from '../../storage-adapter/catalog/catalog.ts';
import { publishArtifact } from '../../storage-adapter/catalog/publish.ts';
import { openFsStore } from '../../storage-adapter/fs/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, useTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { CLI, makeTempDir, ROOT, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { killEmbeddedRestoreBeforeCommit } from '../../test/support/killed-restore.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { startStaticStore } from '../../test/support/static-store.ts';
import { FILE_STORE_KINDS } from '../../test/support/store-kinds.ts';
import { processEnv, waitUntil } from '../../test/harness/index.ts';

const KiB = 1024;
const blobFile = (backup: string, hex: string) =>
  path.join(backup, 'blobs', 'sha256', hex.slice(0, 2), hex.slice(2, 4), hex);
/** stderr without its progress lines (JSON lines when not on a terminal). */
const said = (stderr: string) => stderr.split('\n').filter((l) => l !== '' && !l.startsWith('{"time":'));
const json = (r: { body: Buffer }) => JSON.parse(r.body.toString()) as Record<string, unknown>;
const drops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const drop of drops.splice(0)) await drop();
});

interface Upload {
  id: string;
  body: Buffer;
  startedAt: number;
  /** When the writer answered 201 (full upload) or reported `done` (multipart). */
  publishedAt?: number;
  /** When its DELETE was sent, and when it was answered 204. */
  deleteSentAt?: number;
  deletedAt?: number;
}

async function put(gw: GatewayProcess, key: string, id: string, body: Buffer): Promise<void> {
  const r = await request(`${gw.url}/api/v1/repositories/bk/artifacts/${id}`, {
    method: 'PUT',
    headers: bearer(key),
    body,
  });
  expect(r.status, r.body.toString()).toBe(201);
}

/** A 2-part multipart upload, completed and waited for. */
async function putMultipart(gw: GatewayProcess, key: string, id: string, body: Buffer): Promise<void> {
  const headers = { ...bearer(key), 'content-type': 'application/json' };
  const opened = await request(`${gw.url}/api/v1/repositories/bk/artifacts/${id}/uploads`, {
    method: 'POST',
    headers,
    body: Buffer.from('{}'),
  });
  expect(opened.status, opened.body.toString()).toBe(201);
  const upload = json(opened).upload as string;
  const parts = [body.subarray(0, body.length >> 1), body.subarray(body.length >> 1)];
  for (const [i, p] of parts.entries())
    expect(
      (
        await request(`${gw.url}/api/v1/repositories/bk/uploads/${upload}/parts/${i + 1}`, {
          method: 'PUT',
          headers: bearer(key),
          body: p,
        })
      ).status,
    ).toBe(200);
  const list = parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) }));
  expect(
    (
      await request(`${gw.url}/api/v1/repositories/bk/uploads/${upload}/complete`, {
        method: 'POST',
        headers,
        body: Buffer.from(JSON.stringify({ parts: list })),
      })
    ).status,
  ).toBe(202);
  for (;;) {
    const state = json(
      await request(`${gw.url}/api/v1/repositories/bk/uploads/${upload}`, { headers: bearer(key) }),
    ).state;
    if (state === 'done') return;
    expect(state).toBe('completing');
    await sleep(20);
  }
}

/**
 * Uploads one artifact after another (every third as multipart) until `stop` is set; after every
 * second one, deletes the one before it (a DELETE removes the catalog row, the blob stays for gc).
 */
async function uploadUntil(
  gw: GatewayProcess,
  key: string,
  prefix: string,
  stop: { done: boolean },
  into: Upload[],
): Promise<void> {
  for (let i = 0; !stop.done; i++) {
    const upload: Upload = { id: `${prefix}-${i}.bin`, body: randomContent(20 * KiB + i), startedAt: Date.now() };
    into.push(upload);
    if (i % 3 === 2) await putMultipart(gw, key, upload.id, upload.body);
    else await put(gw, key, upload.id, upload.body);
    upload.publishedAt = Date.now();
    if (i % 2 === 1) {
      const doomed = into.at(-2)!;
      doomed.deleteSentAt = Date.now();
      const r = await request(`${gw.url}/api/v1/repositories/bk/artifacts/${doomed.id}`, {
        method: 'DELETE',
        headers: bearer(key),
      });
      expect(r.status, r.body.toString()).toBe(204);
      doomed.deletedAt = Date.now();
    }
  }
}

async function listPartials(dir: string): Promise<string[]> {
  return (await readdir(dir).catch(() => [])).filter((n) => n.endsWith('.partial'));
}

/** When the backed-up disabled principal was disabled: long before the backup and its restore. */
const RETIRED_AT = '2021-03-04T05:06:07.123456Z';
/** When the backed-up re-granted principal's grant was removed: long before the backup too. */
const REGRANT_REMOVED_AT = '2022-04-05T06:07:08.654321Z';

describe.each(FILE_STORE_KINDS)('backup and restore (%s store)', (kind) => {
  const db = useTestDatabase();

  it('backs up while uploads run, restores byte-exact into a fresh database and root, and --verify finds a corrupt blob', async () => {
    await createRepository(db.pool, 'bk');
    const writer = await createServiceAccount(db.pool, { name: 'writer', grants: { bk: 'write' } });
    const reader = await createServiceAccount(db.pool, { name: 'reader', scopes: ['read'], grants: { bk: 'read' } });
    // A principal disabled long before the backup (disabled_at is set by a trigger as it is disabled).
    await db.pool.query(`INSERT INTO arkvory_principals (name, disabled) VALUES ('retired', true)`);
    await db.pool.query(`UPDATE arkvory_principals SET disabled_at = $1 WHERE name = 'retired'`, [RETIRED_AT]);
    // A grant removed long before the backup and given back since (the removal is stamped by a trigger).
    const regranted = await createServiceAccount(db.pool, {
      name: 'regranted',
      scopes: ['read'],
      grants: { bk: 'read' },
    });
    await db.pool.query('DELETE FROM arkvory_grants WHERE principal_id = $1', [regranted.principalId]);
    await db.pool.query('UPDATE arkvory_grant_removals SET removed_at = $1 WHERE principal_id = $2', [
      REGRANT_REMOVED_AT,
      regranted.principalId,
    ]);
    await db.pool.query(`INSERT INTO arkvory_grants (principal_id, repository, permission) VALUES ($1, 'bk', 'read')`, [
      regranted.principalId,
    ]);
    const sourceStore = kind === 'http' ? await startStaticStore() : undefined;
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_STORAGE_URL: sourceStore?.url } });
    const uploads: Upload[] = [];
    // 1.5 MiB published before the backup starts; paced at 1 MiB/s, the backup runs while more arrive.
    for (let i = 0; i < 6; i++) {
      const u: Upload = { id: `before-${i}.bin`, body: randomContent(256 * KiB + i), startedAt: Date.now() };
      await (i === 5 ? putMultipart(gw, writer.key, u.id, u.body) : put(gw, writer.key, u.id, u.body));
      u.publishedAt = Date.now();
      uploads.push(u);
    }
    // A session left open across the backup, its part held against the repository's storage quota
    // until the session's expiry.
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', 'bk', 1099511627776)`,
    );
    const jsonHeaders = { ...bearer(writer.key), 'content-type': 'application/json' };
    const open = json(
      await request(`${gw.url}/api/v1/repositories/bk/artifacts/left-open.bin/uploads`, {
        method: 'POST',
        headers: jsonHeaders,
        body: Buffer.from('{}'),
      }),
    ).upload as string;
    const openPart = await request(`${gw.url}/api/v1/repositories/bk/uploads/${open}/parts/1`, {
      method: 'PUT',
      headers: { ...bearer(writer.key), 'content-type': 'application/octet-stream' },
      body: randomContent(10 * KiB),
    });
    expect(openPart.status).toBe(200);
    expect(
      (await db.pool.query('SELECT bytes::int AS bytes FROM arkvory_quota_reservations WHERE id = $1', [open])).rows,
    ).toEqual([{ bytes: 10 * KiB }]);
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir, ARKVORY_STORAGE_URL: sourceStore?.url };
    const destination = await makeTempDir('arkvory-backups-');
    // Coordination state a shared-profile installation would have (read only at start, so the running standalone writer is unaffected).
    await db.pool.query(
      'INSERT INTO arkvory_download_policy (slots, download_bytes_per_second, download_bytes_per_second_per_principal) VALUES (2, 2097152, 0)',
    );
    await db.pool.query(
      `INSERT INTO arkvory_gateway_leases (slot, owner, generation, role, acquired_at, renewed_at, expires_at)
       VALUES (1, gen_random_uuid(), 1, 'reader', clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '10 seconds')`,
    );

    const stop = { done: false };
    const during: Upload[] = [];
    const load = uploadUntil(gw, writer.key, 'during', stop, during);
    const backupStarted = Date.now();
    const backup = await runCli(['backup', '--bytes-per-second', String(1024 * KiB), destination], env);
    const backupEnded = Date.now();
    stop.done = true;
    await load;
    expect(backup.code, backup.stderr).toBe(0);
    const summary = JSON.parse(backup.stdout) as {
      backup: string;
      snapshotTime: string;
      tables: Record<string, number>;
      blobs: { count: number; linked: number; copied: number; reused: number };
    };
    expect(summary.blobs.count).toBeGreaterThanOrEqual(6);
    // The directory store's blobs are on the same filesystem as the destination: hard links.
    if (kind === 'fs') expect(summary.blobs.linked).toBe(summary.blobs.count);
    else expect(summary.blobs.copied).toBe(summary.blobs.count);
    expect(
      during.filter((u) => u.publishedAt !== undefined && u.startedAt > backupStarted && u.publishedAt < backupEnded)
        .length,
      'uploads published while the backup ran',
    ).toBeGreaterThan(0);
    expect(
      during.filter((u) => u.deleteSentAt !== undefined && u.deleteSentAt > backupStarted && u.deletedAt! < backupEnded)
        .length,
      'artifacts deleted while the backup ran',
    ).toBeGreaterThan(0);
    const after: Upload[] = [];
    for (let i = 0; i < 2; i++) {
      const u: Upload = { id: `after-${i}.bin`, body: randomContent(10 * KiB), startedAt: Date.now() };
      await put(gw, writer.key, u.id, u.body);
      after.push(u);
    }
    const manifest = JSON.parse(await readFile(path.join(summary.backup, 'manifest.json'), 'utf8')) as {
      tables: Array<{ name: string; rows: number; restored: boolean }>;
      sha256: string;
      snapshotTime: string;
    };
    expect(manifest.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(manifest.tables.find((t) => t.name === 'arkvory_gateway_leases')).toEqual({
      name: 'arkvory_gateway_leases',
      rows: 1,
      restored: false,
    });
    expect(manifest.tables.find((t) => t.name === 'arkvory_download_policy')).toEqual({
      name: 'arkvory_download_policy',
      rows: 1,
      restored: false,
    });

    // Restore into a fresh database and a fresh root.
    const target = await createTestDatabase({ migrated: false });
    drops.push(target.drop);
    const targetStore = kind === 'http' ? await startStaticStore() : undefined;
    const targetDir = await makeTempDir();
    const targetEnv = {
      ARKVORY_DATABASE_URL: target.url,
      ARKVORY_DATA_DIR: targetDir,
      ARKVORY_STORAGE_URL: targetStore?.url,
    };
    const restore = await runCli(['restore', destination], targetEnv);
    expect(restore.code, restore.stderr).toBe(0);
    const restored = JSON.parse(restore.stdout) as {
      storageId: string;
      scrub: { checked: number; corrupt: unknown[] };
    };
    expect(restored.scrub).toMatchObject({ checked: summary.blobs.count, corrupt: [] });
    const sourceId = (await db.pool.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage')).rows[0]!.id;
    expect(restored.storageId).toBe(sourceId);
    // No upload runs across a restore: the open session comes back aborted, and nothing of it (nor
    // of any upload in progress at the snapshot) holds the quota.
    expect((await target.pool.query('SELECT state FROM arkvory_upload_sessions WHERE id = $1', [open])).rows).toEqual([
      { state: 'aborted' },
    ]);
    expect((await target.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
    // A disabled principal keeps when it was disabled, not the restore's time: the sessions and links
    // made before that moment stay void, and no later ones become so.
    expect(
      (
        await target.pool.query(
          `SELECT disabled, disabled_at = $1::timestamptz AS kept FROM arkvory_principals WHERE name = 'retired'`,
          [RETIRED_AT],
        )
      ).rows,
    ).toEqual([{ disabled: true, kept: true }]);
    // A grant's removal keeps its time too: the links made before it stay void, and no later ones become so.
    expect(
      (
        await target.pool.query(
          `SELECT p.name, x.repository, x.removed_at = $1::timestamptz AS kept
             FROM arkvory_grant_removals x JOIN arkvory_principals p ON p.id = x.principal_id`,
          [REGRANT_REMOVED_AT],
        )
      ).rows,
    ).toEqual([{ name: 'regranted', repository: 'bk', kept: true }]);

    const names = new Set(
      (
        await target.pool.query<{ name: string }>(`SELECT name FROM arkvory_artifacts WHERE repository = 'bk'`)
      ).rows.map((r) => r.name),
    );
    for (const u of uploads) expect(names.has(u.id), `${u.id} published before the backup`).toBe(true);
    for (const u of during.filter(
      (d) => d.publishedAt !== undefined && d.publishedAt < backupStarted && !(d.deleteSentAt! <= backupEnded),
    ))
      expect(names.has(u.id), u.id).toBe(true);
    for (const u of during.filter((d) => d.deletedAt !== undefined && d.deletedAt < backupStarted))
      expect(names.has(u.id), `${u.id} deleted before the backup`).toBe(false);
    for (const u of [...after, ...during.filter((d) => d.startedAt > backupEnded)])
      expect(names.has(u.id), `${u.id} started after the backup`).toBe(false);
    const grants = (pool: TestDatabase['pool']) =>
      pool
        .query(
          `SELECT p.name, g.repository, g.permission FROM arkvory_grants g JOIN arkvory_principals p ON p.id = g.principal_id ORDER BY 1, 2`,
        )
        .then((r) => r.rows);
    expect(await grants(target.pool)).toEqual(await grants(db.pool));
    expect((await target.pool.query('SELECT 1 FROM arkvory_gateway_leases')).rowCount).toBe(0);
    expect((await target.pool.query('SELECT 1 FROM arkvory_download_policy')).rowCount).toBe(0);

    // A gateway on the restored pair serves every restored artifact byte-exact (those deleted while the
    // backup ran but in its snapshot too: their blobs are in it); keys and grants still hold.
    await gw.stop('SIGTERM');
    const restoredGw = await startGateway({
      env: { ARKVORY_DATABASE_URL: target.url, ARKVORY_STORAGE_URL: targetStore?.url },
      dataDir: targetDir,
    });
    const all = new Map([...uploads, ...during].map((u) => [u.id, u.body]));
    for (const name of names) {
      const got = await request(`${restoredGw.url}/api/v1/repositories/bk/artifacts/${name}/content`, {
        headers: bearer(reader.key),
      });
      expect(got.status, name).toBe(200);
      expect(sha256(got.body), name).toBe(sha256(all.get(name)!));
    }
    const denied = await request(`${restoredGw.url}/api/v1/repositories/bk/artifacts/new.bin`, {
      method: 'PUT',
      headers: bearer(reader.key),
      body: Buffer.from('x'),
    });
    expect(denied.status).toBe(403);
    expect(
      (
        await request(`${restoredGw.url}/api/v1/repositories/bk/artifacts/new.bin`, {
          method: 'PUT',
          headers: bearer(writer.key),
          body: Buffer.from('x'),
        })
      ).status,
    ).toBe(201);
    await restoredGw.stop('SIGTERM');

    // A second restore into the now occupied target is refused, and changes nothing.
    const again = await runCli(['restore', destination], targetEnv);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('target_not_empty');

    // --verify: clean, then one blob replaced by other bytes in the backup.
    expect((await runCli(['restore', '--verify', summary.backup], {})).code).toBe(0);
    const victim = sha256(uploads[0]!.body);
    await rm(blobFile(summary.backup, victim));
    await writeFile(blobFile(summary.backup, victim), randomContent(uploads[0]!.body.length));
    const verify = await runCli(['restore', '--verify', destination], {});
    expect(verify.code).toBe(1);
    const report = JSON.parse(verify.stdout) as { ok: boolean; corrupt: Array<{ blob: string }>; missing: string[] };
    expect(report).toMatchObject({ ok: false, missing: [] });
    expect(report.corrupt.map((c) => c.blob)).toEqual([victim]);
    // A damaged manifest is refused outright.
    const manifestFile = path.join(summary.backup, 'manifest.json');
    await writeFile(
      manifestFile,
      (await readFile(manifestFile, 'utf8')).replace(/"rows": (\d+)/, (_m, n: string) => `"rows": ${Number(n) + 1}`),
    );
    const tampered = await runCli(['restore', '--verify', summary.backup], {});
    expect(tampered.code).toBe(1);
    expect(tampered.stderr).toContain('does not match its own sha256');
  }, 240_000);
});

describe('an interrupted backup', () => {
  const db = useTestDatabase();

  it('leaves no manifest; the next backup removes what it left; a later backup reuses the earlier blobs', async () => {
    await createRepository(db.pool, 'bk');
    const writer = await createServiceAccount(db.pool, { grants: { bk: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    for (let i = 0; i < 8; i++) await put(gw, writer.key, `a-${i}.bin`, randomContent(128 * KiB));
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir };
    const destination = await makeTempDir('arkvory-backups-');

    // 1 MiB at 128 KiB/s: killed once the first blob is in place, long before the manifest.
    const child = spawn(process.execPath, [CLI, 'backup', '--bytes-per-second', String(128 * KiB), destination], {
      cwd: ROOT,
      env: processEnv(env),
      stdio: 'ignore',
    });
    const exited = new Promise((resolve) => child.on('exit', resolve));
    await waitUntil(
      async () => {
        if (child.exitCode !== null) throw new Error('the backup exited before it had a blob in place');
        const partial = (await listPartials(destination))[0];
        const blobs = partial
          ? await readdir(path.join(destination, partial, 'blobs', 'sha256'), { recursive: true }).catch(() => [])
          : [];
        return blobs.some((n) => /[0-9a-f]{64}$/.test(String(n)));
      },
      { what: 'the backup to have a blob in place', timeoutMs: 30_000, intervalMs: 10 },
    );
    child.kill('SIGKILL');
    await exited;
    expect(await listPartials(destination)).toEqual([
      expect.stringMatching(
        new RegExp(`^arkvory-\\w+\\.${localHostName().replaceAll('.', '\\.')}\\.${child.pid}\\.partial$`),
      ),
    ]);
    const entries = await readdir(destination, { recursive: true });
    expect(entries.filter((n) => String(n).endsWith('manifest.json'))).toEqual([]);
    const verify = await runCli(['restore', '--verify', destination], {});
    expect(verify.code).toBe(1);
    expect(verify.stderr).toContain('holds no complete backup');

    // The next backup removes what the killed one left; SIGTERM stops it cleanly, its own partial directory removed too.
    const [stale] = await listPartials(destination);
    const stopped = spawn(process.execPath, [CLI, 'backup', '--bytes-per-second', String(128 * KiB), destination], {
      cwd: ROOT,
      env: processEnv(env),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    stopped.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const stoppedExit = new Promise<number | null>((resolve) => stopped.on('exit', resolve));
    while (!(await listPartials(destination)).some((n) => n !== stale)) {
      if (stopped.exitCode !== null) throw new Error(`the backup ended early: ${stderr}`);
      await sleep(10);
    }
    stopped.kill('SIGTERM');
    expect(await stoppedExit).toBe(1);
    expect(stderr).toContain('stopped by SIGTERM');
    expect(await listPartials(destination)).toEqual([]);

    // Another host's partial bearing a pid that is dead here is that host's business until it is idle past the bound.
    const foreignPartial = `arkvory-20261205T010000000Z.another-host.${child.pid}.partial`;
    await mkdir(path.join(destination, foreignPartial));
    const first = await runCli(['backup', destination], env);
    expect(first.code, first.stderr).toBe(0);
    const one = JSON.parse(first.stdout) as {
      backup: string;
      blobs: { count: number; reused: number };
      removedPartials: string[];
    };
    expect(one.blobs).toMatchObject({ count: 8, reused: 0 });
    expect(one.removedPartials).toEqual([]);
    expect(await listPartials(destination)).toEqual([foreignPartial]);
    const idle = new Date(Date.now() - PARTIAL_STALE_MS - 60_000);
    await utimes(path.join(destination, foreignPartial), idle, idle);
    // A second backup reuses the first one's blobs; --keep 1 then removes the first.
    await put(gw, writer.key, 'later.bin', randomContent(1000));
    await sleep(5);
    const second = await runCli(['backup', '--keep', '1', destination], env);
    expect(second.code, second.stderr).toBe(0);
    const two = JSON.parse(second.stdout) as {
      backup: string;
      pruned: string[];
      removedPartials: string[];
      blobs: { count: number; reused: number; linked: number };
    };
    expect(two.blobs).toMatchObject({ count: 9, reused: 8, linked: 1 });
    expect(two.removedPartials).toEqual([foreignPartial]);
    expect(two.pruned).toEqual([one.backup]);
    expect(existsSync(one.backup)).toBe(false);
    expect(await readdir(destination)).toEqual([path.basename(two.backup)]);
    expect((await runCli(['restore', '--verify', destination], {})).code).toBe(0);

    // Restore onto the embedded default: a fresh data dir, no ARKVORY_DATABASE_URL; then `serve` on it.
    const embeddedDir = await makeTempDir();
    const restored = await runCli(['restore', destination], { ARKVORY_DATA_DIR: embeddedDir });
    expect(restored.code, restored.stderr).toBe(0);
    expect(JSON.parse(restored.stdout)).toMatchObject({ blobs: { count: 9 }, scrub: { corrupt: [] } });
    expect(existsSync(path.join(embeddedDir, '.pg', 'postmaster.pid')), 'the embedded PostgreSQL was stopped').toBe(
      false,
    );
    const embeddedGw = await startGateway({ dataDir: embeddedDir });
    const got = await request(`${embeddedGw.url}/api/v1/repositories/bk/artifacts/later.bin/content`, {
      headers: bearer(writer.key),
    });
    expect(got.status).toBe(200);
    expect(got.body.length).toBe(1000);
    expect(existsSync(path.join(embeddedDir, 'admin.key')), 'no new admin: the restored principals are there').toBe(
      false,
    );
    const busy = await runCli(['restore', destination], { ARKVORY_DATA_DIR: embeddedDir });
    expect(busy.code).toBe(1);
    expect(busy.stderr).toContain('target_busy: a gateway is running the embedded database');
    await embeddedGw.stop('SIGTERM');

    // A destination that cannot be created fails at once with a clear line; usage errors exit 2.
    const unusable = await runCli(['backup', '/proc/sys/arkvory-test/backups'], env);
    expect(unusable.code).toBe(1);
    expect(unusable.stderr).toContain(
      'data_dir_unusable: <destination>=/proc/sys/arkvory-test/backups: cannot create /proc/sys/arkvory-test',
    );
    expect((await runCli(['backup'], env)).code).toBe(2);
    // The wrong storage root for this database: one line naming the mismatch, no stack.
    const foreign = await runCli(['backup', destination], { ...env, ARKVORY_DATA_DIR: await makeTempDir() });
    expect(foreign.code).toBe(1);
    expect(foreign.stderr).toMatch(/^arkvory backup: storage_mismatch: /);
    expect((await runCli(['backup', '--keep', '0', destination], env)).code).toBe(2);
    // Redis (the rule documents) down at the start: one line, no stack.
    const noRedis = await runCli(['backup', destination], { ...env, ARKVORY_REDIS_URL: 'redis://127.0.0.1:1' });
    expect(noRedis.code).toBe(1);
    expect(noRedis.stderr).toMatch(/^arkvory backup: redis_unreachable: Redis at redis:\/\/127.0.0.1:1 did not answer/);
    expect(noRedis.stderr).not.toMatch(/\n\s+at /);
  }, 180_000);
});

describe('a blob damaged in an earlier backup', () => {
  const db = useTestDatabase();

  it('is copied afresh, not linked into the next backup, and reported', async () => {
    await createRepository(db.pool, 'bk');
    const writer = await createServiceAccount(db.pool, { grants: { bk: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const bodies = [0, 1, 2].map((i) => randomContent(64 * KiB + i));
    for (const [i, body] of bodies.entries()) await put(gw, writer.key, `a-${i}.bin`, body);
    await gw.stop('SIGTERM');
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir };
    const destination = await makeTempDir('arkvory-backups-');
    const first = await runCli(['backup', destination], env);
    expect(first.code, first.stderr).toBe(0);
    const one = (JSON.parse(first.stdout) as { backup: string }).backup;
    // Other bytes of the same size under the name in the first backup (a file of its own: the store's stays sound).
    const damaged = blobFile(one, sha256(bodies[1]!));
    await writeFile(`${damaged}.new`, randomContent(bodies[1]!.length));
    await rename(`${damaged}.new`, damaged);
    await sleep(5);

    const second = await runCli(['backup', destination], env);
    expect(second.code, second.stderr).toBe(0);
    const two = JSON.parse(second.stdout) as {
      backup: string;
      blobs: { count: number; reused: number };
      damagedEarlier: string[];
    };
    expect(two.blobs).toMatchObject({ count: 3, reused: 2 });
    expect(two.damagedEarlier).toEqual([damaged]);
    expect(second.stderr).toContain(
      `warning: 1 blob file(s) of earlier backups do not match their sha256 (${damaged})`,
    );
    const verified = await runCli(['restore', '--verify', two.backup], {});
    expect(verified.code, verified.stdout).toBe(0);
    expect(said(verified.stderr)).toEqual([]);
    // One more blob of the first backup gone: the failure is said on stderr with its counts, not only in the report.
    await rm(blobFile(one, sha256(bodies[2]!)));
    const failed = await runCli(['restore', '--verify', one], {});
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.stdout)).toMatchObject({ ok: false, missing: [sha256(bodies[2]!)] });
    expect(said(failed.stderr)).toEqual([
      `arkvory restore --verify: ${one} is damaged: 1 blob(s) corrupt, 1 missing of 3 checked (listed in the report on stdout); restore from another backup`,
    ]);
  }, 120_000);
});

describe('a backup whose directory store holds a named pipe for a blob', () => {
  const db = useTestDatabase();

  it('fails naming the file at once, linked or copied, and leaves nothing under the destination', async () => {
    await createRepository(db.pool, 'bk');
    const dataDir = await makeTempDir();
    const store = await openFsStore({ root: dataDir, role: 'writer', pool: db.pool });
    const bodies = [0, 1].map((i) => randomContent(4 * KiB + i));
    try {
      for (const [i, body] of bodies.entries())
        await publishArtifact(
          { store, catalog: createCatalog(db.pool) },
          {
            key: { repository: 'bk', kind: 'artifact', name: `p-${i}.bin`, version: '', asset: '' },
            body: Readable.from([body]),
            contentType: 'application/octet-stream',
            publishedBy: null,
            stage: { maxBytes: 1e6 },
          },
        );
    } finally {
      await store.close();
    }
    const hex = sha256(bodies[1]!);
    const fifo = blobFile(dataDir, hex);
    await rm(fifo);
    await promisify(execFile)('mkfifo', [fifo]);
    // A reader the old code left waiting on the pipe is let go (an open for writing ends its wait).
    onTestFinished(async () => {
      const writer = await open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined);
      await writer?.close();
    });
    // Onto the store's filesystem (hard-linked) and onto a filesystem of its own (copied from the file).
    const linkedTo = await makeTempDir('arkvory-backups-');
    const copiedTo = await makeTempDir('arkvory-backups-');
    await promisify(execFile)('mount', ['-t', 'tmpfs', '-o', 'size=1m,mode=0755', 'tmpfs', copiedTo]);
    onTestFinished(() => promisify(execFile)('umount', ['-l', copiedTo]).then(() => {}));
    for (const destination of [linkedTo, copiedTo]) {
      // Killed if it waits on the pipe, so that a hang fails here and leaves no process behind.
      const made = await promisify(execFile)(process.execPath, [CLI, 'backup', destination], {
        cwd: ROOT,
        env: processEnv({ ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir }),
        timeout: 3_000,
        killSignal: 'SIGKILL',
      }).then(
        () => ({ code: 0, killed: false, stderr: '' }),
        (err: { code?: unknown; killed?: boolean; stderr?: string }) => ({
          code: err.code,
          killed: err.killed === true,
          stderr: err.stderr ?? '',
        }),
      );
      expect(made.killed, `backup onto ${destination} waited on the named pipe`).toBe(false);
      expect(made.code).toBe(1);
      expect(said(made.stderr)).toEqual([
        `arkvory backup: blob_corrupt: blob ${hex} in ${dataDir}: ${fifo} is not a regular file`,
      ]);
      expect(await readdir(destination)).toEqual([]);
    }
  }, 20_000);
});

describe('a restore onto the embedded default killed partway', () => {
  const db = useTestDatabase();

  it('is taken up by the same restore run again, though its PostgreSQL outlived it', async () => {
    await createRepository(db.pool, 'bk');
    const writer = await createServiceAccount(db.pool, { grants: { bk: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const bodies = [0, 1, 2].map((i) => randomContent(32 * KiB + i));
    for (const [i, body] of bodies.entries()) await put(gw, writer.key, `a-${i}.bin`, body);
    await gw.stop('SIGTERM');
    const made = await runCli(['backup', await makeTempDir('arkvory-backups-')], {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_DATA_DIR: gw.dataDir,
    });
    expect(made.code, made.stderr).toBe(0);
    const backup = (JSON.parse(made.stdout) as { backup: string }).backup;
    const dataDir = await makeTempDir();
    const pidFile = path.join(dataDir, '.pg', 'postmaster.pid');
    onTestFinished(async () => {
      // The PostgreSQL the killed restore started, should the test end before a restore stops it.
      const pid = Number((await readFile(pidFile, 'utf8').catch(() => '')).split('\n')[0]);
      if (pid > 0) {
        try {
          process.kill(pid, 'SIGINT');
        } catch {}
      }
    });
    // Killed in its transaction, every blob written under the restore's mark.
    await killEmbeddedRestoreBeforeCommit(backup, { ARKVORY_DATA_DIR: dataDir });
    expect(existsSync(pidFile), 'the killed restore left its PostgreSQL running').toBe(true);

    const again = await runCli(['restore', backup], { ARKVORY_DATA_DIR: dataDir });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ blobs: { count: 3 }, scrub: { corrupt: [] } });
    const restored = await startGateway({ dataDir });
    const got = await request(`${restored.url}/api/v1/repositories/bk/artifacts/a-2.bin/content`, {
      headers: bearer(writer.key),
    });
    expect(got.status).toBe(200);
    expect(got.body.equals(bodies[2]!)).toBe(true);
    await restored.stop('SIGTERM');
  }, 120_000);
});

describe('a backup onto a full disk', () => {
  const db = useTestDatabase();

  it('fails with ENOSPC and leaves nothing behind: no partial, no temporary, nothing --verify or restore takes', async () => {
    await createRepository(db.pool, 'bk');
    const writer = await createServiceAccount(db.pool, { grants: { bk: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    for (let i = 0; i < 4; i++) await put(gw, writer.key, `a-${i}.bin`, randomContent(128 * KiB));
    await gw.stop('SIGTERM');
    // A filesystem of its own (so every blob is copied, not linked) with room for the database file and about two blobs.
    const destination = await makeTempDir('arkvory-full-');
    await promisify(execFile)('mount', ['-t', 'tmpfs', '-o', 'size=320k,mode=0755', 'tmpfs', destination]);
    onTestFinished(() => promisify(execFile)('umount', ['-l', destination]).then(() => {}));
    const made = await runCli(['backup', destination], { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir });
    expect(made.code).toBe(1);
    expect(made.stderr).toMatch(/^arkvory backup: ENOSPC: no space left on device/m);
    expect(made.stderr).not.toMatch(/\n\s+at /);
    expect(await readdir(destination, { recursive: true })).toEqual([]);
    const verify = await runCli(['restore', '--verify', destination], {});
    expect(verify.code).toBe(1);
    expect(verify.stderr).toContain('holds no complete backup');
  }, 120_000);
});

/** Publishes, through the CLI with `env`, one transfer_bytes rule: `limit` bytes a day per principal. */
async function publishDailyBytesRule(env: Record<string, string>, limit = 10_000_000_000): Promise<void> {
  const rules = path.join(await makeTempDir('arkvory-rules-'), 'publish.yaml');
  await writeFile(
    rules,
    `rate_limits:\n  transfer_bytes:\n    - name: bytes_per_principal_per_day\n      action: limit\n      characteristics: [principal]\n      limit: ${limit}\n      period_s: 86400\n`,
  );
  const published = await runCli(['ratelimit', 'publish', rules], env);
  expect(published.code, published.stderr).toBe(0);
}

/** A stopped writer's data dir and database, with one daily-bytes rule published into Redis under `<prefix>a:`. */
async function sourceWithDailyBytesRule(
  databaseUrl: string,
  redis: { url: string; prefix: string },
): Promise<Record<string, string>> {
  const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: databaseUrl } });
  await writer.stop('SIGTERM');
  const source = {
    ARKVORY_DATABASE_URL: databaseUrl,
    ARKVORY_DATA_DIR: writer.dataDir,
    ARKVORY_REDIS_URL: redis.url,
    ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}a:`,
  };
  await publishDailyBytesRule(source);
  return source;
}

describe('rule documents kept in Redis', () => {
  const db = useTestDatabase();
  const redis = useTestRedis();

  it('are backed up beside the snapshot and restored into the target Redis, or into the target database without one', async () => {
    const source = await sourceWithDailyBytesRule(db.url, redis);
    const destination = await makeTempDir('arkvory-backups-');
    const backup = await runCli(['backup', destination], source);
    expect(backup.code, backup.stderr).toBe(0);
    // Every document the source Redis indexes (publishing writes every limiter's document).
    const indexed = await redis.client.scard(`${redis.prefix}a:ratelimit:rules::index`);
    expect(indexed).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(backup.stdout)).toMatchObject({ ruleDocuments: indexed });

    const published = async (env: Record<string, string>) => {
      const shown = await runCli(['ratelimit', 'show', 'transfer_bytes'], env);
      expect(shown.code, shown.stderr).toBe(0);
      return (
        JSON.parse(shown.stdout) as {
          limiters: Array<{ tiers: { published_rules: { rules: Array<{ name: string }> } } }>;
        }
      ).limiters[0]!.tiers.published_rules.rules.map((r) => r.name);
    };
    for (const withRedis of [true, false]) {
      const target = await createTestDatabase({ migrated: false });
      drops.push(target.drop);
      const env: Record<string, string> = {
        ARKVORY_DATABASE_URL: target.url,
        ARKVORY_DATA_DIR: await makeTempDir(),
        ...(withRedis ? { ARKVORY_REDIS_URL: redis.url, ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}b:` } : {}),
      };
      const restore = await runCli(['restore', destination], env);
      expect(restore.code, restore.stderr).toBe(0);
      expect(JSON.parse(restore.stdout)).toMatchObject({ ruleDocuments: indexed });
      expect(await published(env), withRedis ? 'in the target Redis' : 'in the target database').toEqual([
        'bytes_per_principal_per_day',
      ]);
    }
    expect(await redis.client.exists(`${redis.prefix}b:ratelimit:rules:transfer_bytes`)).toBe(1);
  }, 120_000);

  it("are not written over another installation's in the target Redis: such a restore is refused before it writes", async () => {
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    await writer.stop('SIGTERM');
    const publish = publishDailyBytesRule;
    const source = {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_DATA_DIR: writer.dataDir,
      ARKVORY_REDIS_URL: redis.url,
      ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}e:`,
    };
    await publish(source, 10_000_000_000);
    const destination = await makeTempDir('arkvory-backups-');
    const made = await runCli(['backup', destination], source);
    expect(made.code, made.stderr).toBe(0);

    // The target's Redis prefix is a live installation's (an env file copied for a trial restore).
    const live = { ARKVORY_REDIS_URL: redis.url, ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}f:` };
    await publish({ ...live, ARKVORY_DATABASE_URL: db.url }, 12_345);
    const liveKey = `${redis.prefix}f:ratelimit:rules:transfer_bytes`;
    const before = await redis.client.get(liveKey);
    expect(before).toContain('12345');
    const target = await createTestDatabase({ migrated: false });
    drops.push(target.drop);
    const dataDir = await makeTempDir();
    const refused = await runCli(['restore', destination], {
      ...live,
      ARKVORY_DATABASE_URL: target.url,
      ARKVORY_DATA_DIR: dataDir,
    });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /^arkvory restore: target_not_empty: the target Redis \S+ already holds rate-limit rule documents under the prefix \S+ that differ from the backup's \(transfer_bytes\)/,
    );
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(await redis.client.get(liveKey), "the live installation's rules").toBe(before);
    expect(existsSync(path.join(dataDir, 'storage-id'))).toBe(false);
    const storage = await target.pool.query('SELECT 1 FROM arkvory_storage');
    expect(storage.rowCount).toBe(0);

    // Documents the backup holds as they are (the installation's own Redis kept through the loss of its
    // database and disk) are no reason to refuse.
    const same = await createTestDatabase({ migrated: false });
    drops.push(same.drop);
    const recovered = await runCli(['restore', destination], {
      ARKVORY_REDIS_URL: redis.url,
      ARKVORY_REDIS_KEY_PREFIX: source.ARKVORY_REDIS_KEY_PREFIX,
      ARKVORY_DATABASE_URL: same.url,
      ARKVORY_DATA_DIR: await makeTempDir(),
    });
    expect(recovered.code, recovered.stderr).toBe(0);
  }, 120_000);

  it('that Redis refuses to give fail the backup with one line, leaving nothing under the destination', async () => {
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    await writer.stop('SIGTERM');
    // A login that may connect but not read the rule index: the read after the snapshot fails.
    const user = `arkvory-backup-${redis.prefix.split(':')[2]}`;
    const password = 'backup-redis-secret-4711';
    await redis.client.call('ACL', 'SETUSER', user, 'on', `>${password}`, '~*', '+@all', '-smembers');
    onTestFinished(async () => {
      await redis.client.call('ACL', 'DELUSER', user);
    });
    const url = new URL(redis.url);
    url.username = user;
    url.password = password;
    const destination = await makeTempDir('arkvory-backups-');
    const refused = await runCli(['backup', destination], {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_DATA_DIR: writer.dataDir,
      ARKVORY_REDIS_URL: url.href,
      ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}c:`,
    });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /^arkvory backup: redis_unreachable: Redis at \S+ did not give the rule documents: NOPERM/,
    );
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).not.toContain(password);
    expect(await readdir(destination)).toEqual([]);
  }, 120_000);
});

describe('a backup and a restore whose audit entry cannot be recorded', () => {
  const db = useTestDatabase();

  it('exit 3 with their summary on stdout and one audit_not_recorded line, not 1 as a failure does', async () => {
    await createRepository(db.pool, 'bk');
    const writer = await createServiceAccount(db.pool, { grants: { bk: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    await put(gw, writer.key, 'a.bin', randomContent(16 * KiB));
    await gw.stop('SIGTERM');
    // The audit table's INSERT refused, in the source and in a target migrated beforehand (a restore writes no audit rows).
    const target = await createTestDatabase({ migrated: true });
    drops.push(target.drop);
    for (const pool of [db.pool, target.pool]) {
      await pool.query(`CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'audit refused by the test'; END $$`);
      await pool.query(`CREATE TRIGGER test_refuse_audit BEFORE INSERT ON arkvory_audit_events
        FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()`);
    }
    const made = await runCli(['backup', await makeTempDir('arkvory-backups-')], {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_DATA_DIR: gw.dataDir,
    });
    expect(made.code, made.stderr).toBe(3);
    expect(made.stderr).toMatch(
      /^arkvory backup: audit_not_recorded: backup\.create was done, but its audit entry was not recorded: audit refused by the test\n$/m,
    );
    const backup = (JSON.parse(made.stdout) as { backup: string }).backup;
    expect((await runCli(['restore', '--verify', backup], {})).code).toBe(0);

    const restored = await runCli(['restore', backup], {
      ARKVORY_DATABASE_URL: target.url,
      ARKVORY_DATA_DIR: await makeTempDir(),
    });
    expect(restored.code, restored.stderr).toBe(3);
    expect(JSON.parse(restored.stdout)).toMatchObject({ blobs: { count: 1 }, scrub: { corrupt: [], missing: [] } });
    expect(restored.stderr).toMatch(
      /^arkvory restore: audit_not_recorded: backup\.restore was done, but its audit entry was not recorded: audit refused by the test\n$/m,
    );
  }, 120_000);
});

/**
 * A relay to Redis that, once, forwards a script call (EVAL/EVALSHA) and its execution but cuts the
 * connection instead of passing on its answer: the write happened, the client cannot know it.
 * Connections after that one pass untouched.
 */
async function relayCuttingFirstScriptAnswer(target: URL): Promise<{ url: string; cut: () => boolean; stop(): void }> {
  let cut = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const origin = net.connect(Number(target.port), target.hostname);
    sockets.add(client).add(origin);
    let scriptSent = false;
    client.on('data', (chunk: Buffer) => {
      if (!cut && /\r\nEVAL(SHA)?\r\n/i.test(chunk.toString('latin1'))) scriptSent = true;
      origin.write(chunk);
    });
    origin.on('data', (chunk: Buffer) => {
      // A NOSCRIPT answer ran nothing: the client sends the script itself next.
      if (scriptSent && !cut && !chunk.toString('latin1').startsWith('-NOSCRIPT')) {
        cut = true;
        client.destroy();
        origin.destroy();
        return;
      }
      scriptSent = false;
      client.write(chunk);
    });
    const close = () => {
      client.destroy();
      origin.destroy();
    };
    client.on('close', close).on('error', close);
    origin.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target.href);
  url.host = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return {
    url: url.href,
    cut: () => cut,
    stop: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

describe('a restore whose target Redis fails while it writes the rule documents', () => {
  const db = useTestDatabase();
  const redis = useTestRedis();

  it('takes the documents it may have written out again when it rolls back', async () => {
    const source = await sourceWithDailyBytesRule(db.url, redis);
    const destination = await makeTempDir('arkvory-backups-');
    expect((await runCli(['backup', destination], source)).code).toBe(0);

    const relay = await relayCuttingFirstScriptAnswer(new URL(redis.url));
    onTestFinished(() => relay.stop());
    const target = await createTestDatabase({ migrated: false });
    drops.push(target.drop);
    const prefix = `${redis.prefix}b:`;
    const failed = await runCli(['restore', destination], {
      ARKVORY_DATABASE_URL: target.url,
      ARKVORY_DATA_DIR: await makeTempDir(),
      ARKVORY_REDIS_URL: relay.url,
      ARKVORY_REDIS_KEY_PREFIX: prefix,
    });
    expect(relay.cut(), 'the relay cut the answer to the write').toBe(true);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toContain('store_outcome_unknown');
    expect(failed.stderr).toContain('the restore was rolled back');
    expect(await redis.client.keys(`${prefix}ratelimit:rules:*`), 'no rule document left in the target Redis').toEqual(
      [],
    );
  }, 120_000);
});
