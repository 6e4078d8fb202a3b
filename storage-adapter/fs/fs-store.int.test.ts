/**
 * What only the directory store does: it creates its root (parents too) and layout, the writer
 * empties tmp/ at start, and a blob file replaced by an upload is not read through a descriptor kept
 * open for the file it replaced. Everything every store must do, this one included, is the conformance suite
 * (test/conformance/artifact-store.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { Readable } from 'node:stream';
import { openFsStore } from './fs-store.ts';
import { OpenFileCache } from './open-file-cache.ts';
import { blobRelativePath } from '../paths.ts';

const dirs: string[] = [];
async function tempRoot(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-store-'));
  dirs.push(dir);
  return dir;
}
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

describe('directory store', () => {
  const db = useTestDatabase();

  it('the writer creates a nested root, its layout and storage-id; a reader creates nothing; refusals name ARKVORY_DATA_DIR', async () => {
    await db.pool.query('DELETE FROM arkvory_storage');
    const root = path.join(await tempRoot(), 'nested', 'root');
    await expect(openFsStore({ root, role: 'reader', pool: db.pool })).rejects.toMatchObject({
      code: 'storage_mismatch',
    });
    expect(existsSync(root)).toBe(false);
    const store = await openFsStore({ root, role: 'writer', pool: db.pool });
    expect(store.storageId).toBe((await readFile(path.join(root, 'storage-id'), 'utf8')).trim());
    expect(store.identity.variable).toBe('ARKVORY_DATA_DIR');
    for (const d of ['blobs/sha256', 'tmp', 'uploads'])
      expect((await stat(path.join(root, d))).isDirectory()).toBe(true);

    // Another, empty root on the same database: refused with a message naming the fix.
    const other = await tempRoot();
    await expect(openFsStore({ root: other, role: 'writer', pool: db.pool })).rejects.toMatchObject({
      code: 'storage_mismatch',
      message: expect.stringContaining('ARKVORY_DATA_DIR'),
    });
    expect(await readdir(other)).toEqual([]);
  });

  it('the writer empties tmp/ at start; a reader leaves it alone', async () => {
    await db.pool.query('DELETE FROM arkvory_storage');
    const root = await tempRoot();
    await openFsStore({ root, role: 'writer', pool: db.pool });
    await writeFile(path.join(root, 'tmp', 'left-over.upload'), 'x');
    await mkdir(path.join(root, 'tmp', 'dir'));
    await openFsStore({ root, role: 'reader', pool: db.pool });
    expect((await readdir(path.join(root, 'tmp'))).sort()).toEqual(['dir', 'left-over.upload']);
    await openFsStore({ root, role: 'writer', pool: db.pool });
    expect(await readdir(path.join(root, 'tmp'))).toEqual([]);
  });

  it('a writer (re)start leaves alone a separate worker staging in tmp/worker/, which the worker taking over empties', async () => {
    await db.pool.query('DELETE FROM arkvory_storage');
    const root = await tempRoot();
    await openFsStore({ root, role: 'writer', pool: db.pool });
    const worker = await openFsStore({ root, role: 'worker', pool: db.pool });
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const body = (async function* () {
      yield Buffer.from('part one ');
      await gate;
      yield Buffer.from('part two');
    })();
    const staging = worker.stage(body, { maxBytes: 1e6, expectedLength: 17 });
    await waitUntil(async () =>
      (await readdir(path.join(root, 'tmp'), { recursive: true })).some((name) => name.endsWith('.upload')),
    );
    await writeFile(path.join(root, 'tmp', 'writer-left-over.upload'), 'x');
    await openFsStore({ root, role: 'writer', pool: db.pool }); // the writer restarts (systemd Restart=on-failure)
    release();
    const staged = await staging;
    await staged.commit(); // was ENOENT: the writer had removed the temporary
    expect(await readdir(path.join(root, 'tmp'))).toEqual(['worker']);
    await staged.discard();
    expect(await readFile(path.join(root, blobRelativePath(staged.sha256)), 'utf8')).toBe('part one part two');

    await writeFile(path.join(root, 'tmp', 'worker', 'crashed.upload'), 'x');
    await writeFile(path.join(root, 'tmp', 'writer-upload.upload'), 'x');
    await worker.clearStaging!();
    expect((await readdir(path.join(root, 'tmp'))).sort()).toEqual(['worker', 'writer-upload.upload']);
    expect(await readdir(path.join(root, 'tmp', 'worker'))).toEqual([]);
    // The writer (and an embedded worker) stage in tmp/ itself, emptied when the writer starts.
    const writer = await openFsStore({ root, role: 'writer', pool: db.pool });
    expect(writer.clearStaging).toBeUndefined();
  });

  it('an upload that replaces a damaged blob file drops the descriptors kept open for it: this process at once, another at its recheck', async () => {
    await db.pool.query('DELETE FROM arkvory_storage');
    const root = await tempRoot();
    // Never idle on this clock: only forgetting or rechecking lets the old descriptor go.
    const cache = () => new OpenFileCache({ maxEntries: 8, idleMs: 60_000, clock: { monotonicMs: () => 0 } });
    const [own, others] = [cache(), cache()];
    const store = await openFsStore({ root, role: 'writer', pool: db.pool, openFiles: own });
    // Another worker process of the instance, with a cache of its own.
    const other = await openFsStore({ root, role: 'worker', pool: db.pool, openFiles: others });
    const bytes = randomBytes(70_000);
    const hex = createHash('sha256').update(bytes).digest('hex');
    const file = path.join(root, blobRelativePath(hex));
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, randomBytes(bytes.length)); // damaged: other bytes of the same size
    const readAll = async (from: typeof store) => {
      const reader = await from.openBlob(hex);
      try {
        const buffer = Buffer.alloc(reader.sizeBytes);
        let filled = 0;
        while (filled < buffer.length) {
          const { bytesRead } = await reader.read(buffer, filled, buffer.length - filled, filled);
          if (bytesRead === 0) break;
          filled += bytesRead;
        }
        return createHash('sha256').update(buffer.subarray(0, filled)).digest('hex');
      } finally {
        await reader.close();
      }
    };
    // Served once by each: their descriptors are kept.
    const damaged = await readAll(store);
    expect(damaged).not.toBe(hex);
    expect(await readAll(other)).toBe(damaged);
    const staged = await store.stage(Readable.from([bytes]), { maxBytes: 1e6 });
    await staged.commit();
    await staged.discard();
    expect(await readAll(store)).toBe(hex);
    await others.recheck();
    expect(await readAll(other)).toBe(hex);
    // A descriptor of the file under the name is kept by a recheck.
    await others.recheck();
    expect(await readAll(other)).toBe(hex);
    expect(others.stats()).toMatchObject({ entries: 1, misses: 2, hits: 1 });
    await Promise.all([own.close(), others.close()]);
  });

  it('a blob file cut short in place under a kept descriptor is dropped at the recheck: the next open sees its size', async () => {
    await db.pool.query('DELETE FROM arkvory_storage');
    const root = await tempRoot();
    const openFiles = new OpenFileCache({ maxEntries: 8, idleMs: 60_000, clock: { monotonicMs: () => 0 } });
    const store = await openFsStore({ root, role: 'writer', pool: db.pool, openFiles });
    const bytes = randomBytes(70_000);
    const staged = await store.stage(Readable.from([bytes]), { maxBytes: 1e6 });
    await staged.commit();
    const hex = staged.sha256;
    const sizeOf = async () => {
      const reader = await store.openBlob(hex);
      await reader.close();
      return reader.sizeBytes;
    };
    expect(await sizeOf()).toBe(bytes.length);
    // The same file (same inode), shorter: a HEAD, which reads nothing, would go on promising the old size.
    await truncate(path.join(root, blobRelativePath(hex)), 1000);
    await openFiles.recheck();
    expect(await sizeOf()).toBe(1000);
    await openFiles.close();
  });
});
