/**
 * On a real PostgreSQL and directory store, in this process (the clock and the store's opening are
 * injected): backups made while the clock was ahead do not shadow later ones (`--keep`, a restore
 * from the destination); two restores that found one empty root at the same instant do not both go
 * on; a resealed manifest cannot make a restore empty the target's migrations record.
 */
import { randomBytes } from 'node:crypto';
import { cp, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listMigrations } from '../../migrations/runner.ts';
import { createRepository } from '../../test/support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir } from '../../test/support/gateway.ts';
import { heldFirstRead } from '../../test/support/held-identity-read.ts';
import { createCatalog } from '../catalog/catalog.ts';
import { publishArtifact } from '../catalog/publish.ts';
import { openFsStore } from '../fs/index.ts';
import type { ArtifactStore } from '../store.ts';
import { runBackup } from './backup.ts';
import { completeBackups, resolveBackup } from './backup-dir.ts';
import { MANIFEST_FILE, sealManifest, type BackupManifest } from './manifest.ts';
import { runRestore } from './restore.ts';

const db = useTestDatabase();
const drops: Array<() => Promise<void>> = [];
let store: ArtifactStore;
let backup: string;
let codeSchemaVersion: number;

beforeAll(async () => {
  await createRepository(db.pool, 'ordered');
  store = await openFsStore({ root: await makeTempDir('arkvory-order-store-'), role: 'writer', pool: db.pool });
  const catalog = createCatalog(db.pool);
  for (let i = 0; i < 3; i++)
    await publishArtifact(
      { store, catalog },
      {
        key: { repository: 'ordered', kind: 'artifact', name: `o${i}`, version: '', asset: '' },
        body: Readable.from([randomBytes(2000 + i)]),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e6 },
      },
    );
  codeSchemaVersion = Math.max(...(await listMigrations()).map((m) => m.version));
  backup = (
    await runBackup({ destination: await makeTempDir('arkvory-order-one-'), pool: db.pool, store, nowMs: Date.now })
  ).backup;
  return () => store.close();
});
afterAll(async () => {
  for (const drop of drops.splice(0)) await drop();
});

describe('backups named while the clock was ahead', () => {
  it('are the oldest for --keep and for a restore from the destination, whatever their names say', async () => {
    const destination = await makeTempDir('arkvory-order-');
    const now = Date.now();
    const made = async (atMs: number, keep?: number) =>
      runBackup({ destination, pool: db.pool, store, keep, nowMs: () => atMs });
    // The clock a year ahead, then set right: the first backup's name sorts after every later one's.
    const ahead = await made(now + 365 * 86_400_000);
    const second = await made(now);
    const third = await made(now + 1000, 2);
    expect(path.basename(ahead.backup) > path.basename(third.backup)).toBe(true);
    expect(third.pruned).toEqual([ahead.backup]);
    expect(await completeBackups(destination)).toEqual([second.backup, third.backup]);
    expect(await resolveBackup(destination)).toBe(third.backup);
  }, 60_000);
});

describe('two restores into one empty root at the same instant (directory store)', () => {
  it('only one goes on; the other is target_busy and removes nothing', async () => {
    const targets = [await createTestDatabase(), await createTestDatabase()];
    drops.push(...targets.map((t) => t.drop));
    const root = await makeTempDir('arkvory-order-root-');
    // Each is answered its read of the opened root's storage-id (none) only once both have read it:
    // the instant the race needs (test/support/held-identity-read.ts).
    let arrived = 0;
    let bothRead!: () => void;
    const read = new Promise<void>((resolve) => {
      bothRead = resolve;
    });
    const restore = (pool: (typeof targets)[number]['pool']) =>
      runRestore({
        backup,
        pool,
        codeSchemaVersion,
        fsRoot: root,
        openTarget: async (storageId) =>
          heldFirstRead(await openFsStore({ root, role: 'writer', pool, restoreAs: storageId }), read, () => {
            if (++arrived === 2) bothRead();
          }),
      });
    const outcomes = await Promise.allSettled(targets.map((t) => restore(t.pool)));
    const done = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as Error & { code?: string }] : []));
    const reasons = refused.map((e) => `${e.code}: ${e.message}`).join('\n');
    expect(done, reasons).toHaveLength(1);
    expect(refused.map((e) => e.code)).toEqual(['target_busy']);
    expect(refused[0]!.message).toMatch(/was taken by another restore at the same time/);
    const rows = await Promise.all(
      targets.map(async (t) => (await t.pool.query('SELECT id::text AS id FROM arkvory_storage')).rowCount),
    );
    expect(rows.sort()).toEqual([0, 1]);
    const winner = done[0]!.status === 'fulfilled' ? done[0]!.value : undefined;
    expect(winner?.scrub).toMatchObject({ corrupt: [], missing: [] });
    expect((await readFile(path.join(root, 'storage-id'), 'utf8')).trim()).toBe(winner?.storageId);
  }, 60_000);
});

describe('a resealed manifest that marks the migrations record as restored', () => {
  it('is refused (backup_invalid) before the target is touched: its migrations stay recorded', async () => {
    const dir = path.join(await makeTempDir('arkvory-order-edited-'), path.basename(backup));
    await cp(backup, dir, { recursive: true });
    const { sha256: _seal, ...fields } = JSON.parse(
      await readFile(path.join(dir, MANIFEST_FILE), 'utf8'),
    ) as BackupManifest & {
      sha256: string;
    };
    const tables = [{ name: 'arkvory_schema_migrations', rows: 0, restored: true }, ...fields.tables];
    await writeFile(path.join(dir, MANIFEST_FILE), sealManifest({ ...fields, tables }));
    const target = await createTestDatabase();
    drops.push(target.drop);
    const before = (await target.pool.query('SELECT version FROM arkvory_schema_migrations')).rowCount;
    const root = await makeTempDir('arkvory-order-root-');
    await expect(
      runRestore({
        backup: dir,
        pool: target.pool,
        codeSchemaVersion,
        fsRoot: root,
        openTarget: (storageId) => openFsStore({ root, role: 'writer', pool: target.pool, restoreAs: storageId }),
      }),
    ).rejects.toMatchObject({
      code: 'backup_invalid',
      message: expect.stringMatching(/lists table arkvory_schema_migrations as restored/),
    });
    expect((await target.pool.query('SELECT version FROM arkvory_schema_migrations')).rowCount).toBe(before);
    expect((await target.pool.query('SELECT 1 FROM arkvory_storage')).rowCount).toBe(0);
  }, 60_000);
});
