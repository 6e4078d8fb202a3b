/**
 * Two restores racing for one storage root, on every store (a directory, nginx WebDAV, SeaweedFS,
 * MinIO; real PostgreSQL, in this process with the store's opening and reads held to force the race):
 * of two that found the root empty at the same instant, or two that found the same stopped
 * restore's mark, only one goes on; the other is `target_busy` and removes nothing of the winner's.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listMigrations } from '../../migrations/runner.ts';
import { createRepository } from '../../test/support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir } from '../../test/support/gateway.ts';
import { heldFirstRead } from '../../test/support/held-identity-read.ts';
import { directoryProbe, STORE_KINDS, startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { createCatalog } from '../catalog/catalog.ts';
import { publishArtifact } from '../catalog/publish.ts';
import { openFsStore } from '../fs/index.ts';
import { runBackup } from './backup.ts';
import { MANIFEST_FILE } from './manifest.ts';
import { runRestore } from './restore.ts';

const db = useTestDatabase();
const drops: Array<() => Promise<void>> = [];
let backup: string;
let storageId: string;
let blobNames: string[];
let codeSchemaVersion: number;

beforeAll(async () => {
  await createRepository(db.pool, 'raced');
  const store = await openFsStore({ root: await makeTempDir('arkvory-claims-source-'), role: 'writer', pool: db.pool });
  try {
    const catalog = createCatalog(db.pool);
    for (let i = 0; i < 3; i++)
      await publishArtifact(
        { store, catalog },
        {
          key: { repository: 'raced', kind: 'artifact', name: `r${i}`, version: '', asset: '' },
          body: Readable.from([randomBytes(3000 + i)]),
          contentType: 'a/b',
          publishedBy: null,
          stage: { maxBytes: 1e6 },
        },
      );
    backup = (
      await runBackup({ destination: await makeTempDir('arkvory-claims-'), pool: db.pool, store, nowMs: Date.now })
    ).backup;
  } finally {
    await store.close();
  }
  storageId = (JSON.parse(await readFile(path.join(backup, MANIFEST_FILE), 'utf8')) as { storageId: string }).storageId;
  const { rows } = await db.pool.query<{ s: string }>('SELECT DISTINCT sha256 AS s FROM arkvory_artifacts');
  blobNames = rows.map((r) => `${r.s.slice(0, 2)}/${r.s.slice(2, 4)}/${r.s}`).sort();
  codeSchemaVersion = Math.max(...(await listMigrations()).map((m) => m.version));
}, 60_000);
afterAll(async () => {
  for (const drop of drops.splice(0)) await drop();
});

/** Both restores' outcomes: exactly one restored, the other refused with target_busy. */
async function oneWins(
  outcomes: PromiseSettledResult<unknown>[],
  pools: pg.Pool[],
): Promise<{ winner: pg.Pool; refusal: Error }> {
  const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as Error & { code?: string }] : []));
  expect(
    refused,
    outcomes.map((o) => (o.status === 'rejected' ? (o.reason as Error).message : 'restored')).join('\n'),
  ).toHaveLength(1);
  expect(refused[0]!.code, refused[0]!.message).toBe('target_busy');
  const winner = pools[outcomes.findIndex((o) => o.status === 'fulfilled')]!;
  const loser = pools[outcomes.findIndex((o) => o.status === 'rejected')]!;
  expect((await winner.query('SELECT id::text AS id FROM arkvory_storage')).rows).toEqual([{ id: storageId }]);
  expect((await loser.query('SELECT 1 FROM arkvory_storage')).rowCount).toBe(0);
  return { winner, refusal: refused[0]! };
}

describe.each(STORE_KINDS)('two restores racing for one root ($server)', ({ kind }) => {
  let backing: StoreBacking;
  beforeAll(async () => {
    backing = await startStoreBacking(kind);
  }, 60_000);
  afterAll(() => backing?.stop());

  const targets = async () => {
    const made = [await createTestDatabase(), await createTestDatabase()];
    drops.push(...made.map((t) => t.drop));
    return made.map((t) => t.pool);
  };

  it('that found it empty at the same instant: one goes on, the other is target_busy and removes nothing', async () => {
    const pools = await targets();
    const place = `empty-${kind}`;
    let arrived = 0;
    let bothRead!: () => void;
    const read = new Promise<void>((resolve) => {
      bothRead = resolve;
    });
    // Each is answered its read of the root's storage-id (none) only once both have read it: the
    // instant the race needs. (Held until both had only opened the root, the second could read the
    // first's claim, which bears this process's pid and so is taken for a stopped restore's.)
    const outcomes = await Promise.allSettled(
      pools.map((pool) =>
        runRestore({
          backup,
          pool,
          codeSchemaVersion,
          openTarget: async (id) => {
            const store = await backing.openAt(place, 'writer', pool, { restoreAs: id });
            return heldFirstRead(store, read, () => {
              if (++arrived === 2) bothRead();
            });
          },
        }),
      ),
    );
    const { refusal } = await oneWins(outcomes, pools);
    // Lost at the claim: both had found the root empty (a store with tokens may be found mid-claim).
    expect(refusal.message).toMatch(/appeared after this restore found the root empty|another restore is claiming/);
    const probe = backing.probeAt(place);
    expect(await probe.files('blobs/sha256')).toEqual(blobNames);
    expect((await probe.read('storage-id'))?.toString().trim()).toBe(storageId);
  }, 30_000);

  it("that found the same stopped restore's mark: one goes on, the other is target_busy and removes nothing of it", async () => {
    const pools = await targets();
    const place = `stopped-${kind}`;
    const probe = backing.probeAt(place);
    // A restore of another host stopped there: its mark and a blob it wrote.
    await probe.write('storage-id', `restoring ${storageId} elsewhere 4242\n`);
    const leftover = `00/00/${'0'.repeat(64)}`;
    await probe.write(`blobs/sha256/${leftover}`, 'left by the stopped restore');
    // Both find the stopped one's mark; the second then waits until the first has taken the root
    // over and written a blob: the moment it used to empty that root under the first. (Both run in
    // this process: a mark bearing this pid is taken for a stopped run's, as in a container, so the
    // second must have read the stopped one's mark before the first replaces it.)
    let firstWrote!: () => void;
    const wrote = new Promise<void>((resolve) => {
      firstWrote = resolve;
    });
    let secondRead!: () => void;
    const read = new Promise<void>((resolve) => {
      secondRead = resolve;
    });
    const outcomes = await Promise.allSettled(
      pools.map((pool, i) =>
        runRestore({
          backup,
          pool,
          codeSchemaVersion,
          onProgress: i === 0 ? () => firstWrote() : undefined,
          openTarget: async (id) => {
            const store = await backing.openAt(place, 'writer', pool, { restoreAs: id });
            if (i === 0) return heldFirstRead(store, read);
            return heldFirstRead(store, wrote, secondRead);
          },
        }),
      ),
    );
    const { winner } = await oneWins(outcomes, pools);
    expect(winner).toBe(pools[0]);
    expect(await probe.files('blobs/sha256')).toEqual(blobNames);
    expect((await probe.read('storage-id'))?.toString().trim()).toBe(storageId);
    // No token is left beside the storage-id.
    expect((await probe.list('')).filter((n) => n.startsWith('storage-id'))).toEqual(['storage-id']);
  }, 30_000);
});

describe('a restore target on the directory store', () => {
  it("is opened without emptying tmp/, which may hold another restore's blobs being written", async () => {
    const root = await makeTempDir('arkvory-claims-tmp-');
    await mkdir(path.join(root, 'tmp'));
    await writeFile(path.join(root, 'tmp', 'staged.upload'), 'being written by another restore');
    const store = await openFsStore({ root, role: 'writer', pool: db.pool, restoreAs: storageId });
    await store.close();
    expect(await readFile(path.join(root, 'tmp', 'staged.upload'), 'utf8')).toBe('being written by another restore');
  });
});

describe('a restore whose root another host takes over while it runs (directory store)', () => {
  it('does not commit over the other restore, nor remove anything of the root: target_busy, rolled back', async () => {
    const target = await createTestDatabase();
    drops.push(target.drop);
    const root = await makeTempDir('arkvory-claims-taken-');
    // Another host's restore takes the root over once this one has written its first blob: it took
    // this host's mark for a stopped restore's, as a restore of another host must.
    const theirs = `restoring ${storageId} elsewhere 4343 0f0f0f0f-0000-4000-8000-000000000000`;
    let taken = false;
    const restoring = runRestore({
      backup,
      pool: target.pool,
      codeSchemaVersion,
      fsRoot: root,
      onProgress: () => {
        if (taken) return;
        taken = true;
        writeFileSync(path.join(root, 'storage-id'), `${theirs}\n`);
      },
      openTarget: (id) => openFsStore({ root, role: 'writer', pool: target.pool, restoreAs: id }),
    });
    await expect(restoring).rejects.toMatchObject({
      code: 'target_busy',
      message: expect.stringContaining('was taken over by another restore while this one ran'),
    });
    expect((await readFile(path.join(root, 'storage-id'), 'utf8')).trim()).toBe(theirs);
    expect((await target.pool.query('SELECT 1 FROM arkvory_storage')).rowCount).toBe(0);
    // Its blobs are left to the other restore, whose emptying or commit decides them.
    expect(await directoryProbe(root).files('blobs/sha256')).toEqual(blobNames);
  });
});
