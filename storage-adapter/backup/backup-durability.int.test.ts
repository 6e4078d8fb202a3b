/**
 * The order in which a backup makes its files' names durable, observed through its directory-sync
 * seam (each call is passed on to the real fsync), on a real PostgreSQL and directory store: every
 * directory holding a blob, and the backup's own, is fsynced before the manifest is written; the
 * backup's directory again once it holds the manifest, then the destination once it holds the
 * renamed backup. A new destination's parents are fsynced before anything is written in it.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { rename, rm, symlink } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { createRepository } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir } from '../../test/support/gateway.ts';
import { createCatalog } from '../catalog/catalog.ts';
import { publishArtifact } from '../catalog/publish.ts';
import { openFsStore } from '../fs/index.ts';
import type { ArtifactStore } from '../store.ts';
import { runBackup, type BackupSummary } from './backup.ts';
import { blobDirectories } from './backup-dir.ts';
import { MANIFEST_FILE } from './manifest.ts';

const db = useTestDatabase();
let root: string;
let store: ArtifactStore;
const blobs: string[] = [];

beforeAll(async () => {
  await createRepository(db.pool, 'durable');
  root = await makeTempDir('arkvory-durable-store-');
  store = await openFsStore({ root, role: 'writer', pool: db.pool });
  const catalog = createCatalog(db.pool);
  for (let i = 0; i < 4; i++) {
    const published = await publishArtifact(
      { store, catalog },
      {
        key: { repository: 'durable', kind: 'artifact', name: `b${i}`, version: '', asset: '' },
        body: Readable.from([randomBytes(1000 + i)]),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e6 },
      },
    );
    blobs.push(published.entry.sha256);
  }
  return () => store.close();
});

interface SyncCall {
  readonly dir: string;
  /** Entries of `dir` when it was synced. */
  readonly entries: readonly string[];
  /** Whether the backup's partial directory held its manifest then. */
  readonly sealed: boolean;
}

async function observedBackup(
  destination: string,
  fsRoot?: string,
): Promise<{ summary: BackupSummary; calls: SyncCall[] }> {
  const calls: SyncCall[] = [];
  const sealed = () =>
    existsSync(destination) &&
    readdirSync(destination).some(
      (e) => e.endsWith('.partial') && existsSync(path.join(destination, e, MANIFEST_FILE)),
    );
  const summary = await runBackup({
    destination,
    pool: db.pool,
    store,
    fsRoot,
    nowMs: () => Date.now(),
    async syncDirectory(dir) {
      calls.push({ dir, entries: readdirSync(dir), sealed: sealed() });
      await fsyncDirectory(dir);
    },
  });
  return { summary, calls };
}

/** The calls' order against what a power cut may lose: nothing the manifest counts. */
function expectDurableOrder(destination: string, { summary, calls }: { summary: BackupSummary; calls: SyncCall[] }) {
  const partial = calls.find((c) => path.dirname(c.dir) === destination && c.dir.endsWith('.partial'))?.dir;
  expect(partial, 'the partial directory is synced').toBeDefined();
  const at = (dir: string, sealed: boolean) => calls.findIndex((c) => c.dir === dir && c.sealed === sealed);
  const partialBefore = at(partial!, false);
  expect(partialBefore, 'the partial directory is synced before the manifest').toBeGreaterThanOrEqual(0);
  expect(calls[partialBefore]!.entries).toEqual(expect.arrayContaining(['database.jsonl', 'blobs']));
  for (const sha256 of blobs) {
    const leaf = path.join(partial!, 'blobs', 'sha256', sha256.slice(0, 2), sha256.slice(2, 4));
    const synced = at(leaf, false);
    expect(synced, `${leaf} is synced before the manifest`).toBeGreaterThanOrEqual(0);
    expect(calls[synced]!.entries).toContain(sha256);
    expect(synced).toBeLessThan(partialBefore);
  }
  for (const dir of blobDirectories(blobs)) {
    const synced = at(path.join(partial!, dir), false);
    expect(synced, `${dir} is synced before the manifest`).toBeGreaterThanOrEqual(0);
    expect(synced).toBeLessThan(partialBefore);
  }
  // Sealed: the manifest's entry, then the rename into the destination.
  const partialAfter = at(partial!, true);
  expect(partialAfter, 'the partial directory is synced once it holds the manifest').toBeGreaterThan(partialBefore);
  expect(calls[partialAfter]!.entries).toContain(MANIFEST_FILE);
  const renamed = calls.findIndex((c) => c.dir === destination && c.entries.includes(path.basename(summary.backup)));
  expect(renamed, 'the destination is synced once it holds the renamed backup').toBeGreaterThan(partialAfter);
}

describe('a backup makes its files’ names durable before its manifest', () => {
  it('copied, then reused from the earlier backup, into a destination it makes: every blob directory, then the backup’s, then the manifest', async () => {
    const base = await makeTempDir('arkvory-durable-backups-');
    const destination = path.join(base, 'new', 'backups');
    const first = await observedBackup(destination);
    expect(first.summary.blobs).toMatchObject({ count: blobs.length, copied: blobs.length });
    expectDurableOrder(destination, first);
    // The destination's new directories are named durably in their parents, before anything in them.
    const firstPartial = first.calls.findIndex((c) => c.dir.endsWith('.partial'));
    for (const parent of [path.join(base, 'new'), base]) {
      const synced = first.calls.findIndex((c) => c.dir === parent);
      expect(synced, `${parent} is synced`).toBeGreaterThanOrEqual(0);
      expect(synced).toBeLessThan(firstPartial);
    }
    const second = await observedBackup(destination);
    expect(second.summary.blobs).toMatchObject({ count: blobs.length, reused: blobs.length });
    expectDurableOrder(destination, second);
  });

  it('hard-linked from the directory store', async () => {
    const destination = await makeTempDir('arkvory-durable-linked-');
    const linked = await observedBackup(destination, root);
    expect(linked.summary.blobs).toMatchObject({ count: blobs.length, linked: blobs.length });
    expectDurableOrder(destination, linked);
  });
});

describe('a backup whose destination cannot be made durable after the rename', () => {
  it('fails and leaves no complete backup under the destination (exit 1 means none was made)', async () => {
    const destination = await makeTempDir('arkvory-durable-eio-');
    await expect(
      runBackup({
        destination,
        pool: db.pool,
        store,
        nowMs: () => Date.now(),
        async syncDirectory(dir) {
          // The destination's sync once it holds the renamed backup fails, as on a disk returning EIO.
          if (dir === destination && readdirSync(dir).some((e) => /^arkvory-[0-9TZ]+$/.test(e)))
            throw Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' });
          await fsyncDirectory(dir);
        },
      }),
    ).rejects.toMatchObject({ code: 'EIO' });
    expect(readdirSync(destination)).toEqual([]);
  });
});

describe('a directory store whose blobs/sha256 was moved to another disk and linked back', () => {
  it('is backed up as the store reads it: the link on blobs/sha256 is followed, blob files are read in place', async () => {
    const blobsDir = path.join(root, 'blobs', 'sha256');
    const moved = path.join(await makeTempDir('arkvory-moved-blobs-'), 'sha256');
    await rename(blobsDir, moved);
    await symlink(moved, blobsDir);
    try {
      {
        const fsRoot = root;
        const destination = await makeTempDir('arkvory-linked-layout-');
        const summary = await runBackup({ destination, pool: db.pool, store, fsRoot, nowMs: () => Date.now() });
        expect(summary.blobs.count).toBe(blobs.length);
      }
    } finally {
      await rm(blobsDir);
      await rename(moved, blobsDir);
    }
  });
});
