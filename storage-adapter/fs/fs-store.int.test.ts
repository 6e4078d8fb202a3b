import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRepository } from '../../test/support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { createCatalog, type ArtifactKey } from '../catalog/catalog.ts';
import { startStaticStore } from '../../test/support/static-store.ts';
import { ALL_STORE_KINDS, startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { openFsStore } from './fs-store.ts';
import { openHttpStore } from '../http/index.ts';
import { blobRelativePath } from '../paths.ts';
import { publishArtifact } from '../catalog/publish.ts';

const dirs: string[] = [];
async function tempRoot(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-store-'));
  dirs.push(dir);
  return dir;
}
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
/** `blobs/sha256/ab/cd/<hex>` with forward slashes (probe names). */
const blobName = (hex: string) => blobRelativePath(hex).split(path.sep).join('/');
const body = (b: Buffer) => Readable.from([b.subarray(0, 1000), b.subarray(1000)]);

describe('storage identity', () => {
  const db = useTestDatabase();

  it('the writer creates root, layout, storage-id and the row; later starts verify; readers never create', async () => {
    await db.pool.query('DELETE FROM arkvory_storage');
    const root = path.join(await tempRoot(), 'nested', 'root');
    await expect(openFsStore({ root, role: 'reader', pool: db.pool })).rejects.toMatchObject({
      code: 'storage_mismatch',
    });
    const store = await openFsStore({ root, role: 'writer', pool: db.pool });
    const fileId = (await readFile(path.join(root, 'storage-id'), 'utf8')).trim();
    const { rows } = await db.pool.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage');
    expect(rows).toEqual([{ id: fileId }]);
    expect(store.storageId).toBe(fileId);
    for (const d of ['blobs/sha256', 'tmp', 'uploads'])
      expect((await stat(path.join(root, d))).isDirectory()).toBe(true);
    expect((await openFsStore({ root, role: 'writer', pool: db.pool })).storageId).toBe(fileId);
    const reader = await openFsStore({ root, role: 'reader', pool: db.pool });
    expect(reader.writable).toBe(false);

    // Another, empty root on the same database: refused with a message naming the fix.
    const other = await tempRoot();
    await expect(openFsStore({ root: other, role: 'writer', pool: db.pool })).rejects.toMatchObject({
      code: 'storage_mismatch',
      message: expect.stringContaining('ARKVORY_DATA_DIR'),
    });
    expect(await readdir(other)).toEqual([]);
    await expect(openFsStore({ root: other, role: 'reader', pool: db.pool })).rejects.toMatchObject({
      code: 'storage_mismatch',
    });

    // A root whose storage-id differs from the row: refused.
    await writeFile(path.join(root, 'storage-id'), '00000000-0000-4000-8000-000000000000\n');
    await expect(openFsStore({ root, role: 'writer', pool: db.pool })).rejects.toMatchObject({
      code: 'storage_mismatch',
      message: expect.stringContaining('different installations'),
    });
    await writeFile(path.join(root, 'storage-id'), 'garbage\n');
    await expect(openFsStore({ root, role: 'writer', pool: db.pool })).rejects.toMatchObject({
      code: 'storage_mismatch',
    });
  });

  it('a root bound to another database is refused', async () => {
    const other = await createTestDatabase();
    try {
      await db.pool.query('DELETE FROM arkvory_storage');
      const root = await tempRoot();
      await openFsStore({ root, role: 'writer', pool: db.pool });
      await expect(openFsStore({ root, role: 'writer', pool: other.pool })).rejects.toMatchObject({
        code: 'storage_mismatch',
        message: expect.stringContaining('ARKVORY_DATABASE_URL'),
      });
      const { rows } = await other.pool.query('SELECT id FROM arkvory_storage');
      expect(rows).toEqual([]);
    } finally {
      await other.drop();
    }
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
    expect(await entries(path.join(root, 'tmp'))).toEqual([]);
  });
});

/** Entries of a directory of the store root; a directory the HTTP store never created counts as empty. */
async function entries(dir: string): Promise<string[]> {
  return readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
}

// The conformance suite: every publish guarantee, unchanged, on every store: the directory, nginx
// (the static-HTTP store) and each real S3 server. The probe looks at the objects from outside.
describe.each(ALL_STORE_KINDS)('publish (%s store)', (kind) => {
  const db = useTestDatabase();
  const key = (name: string): ArtifactKey => ({
    repository: 'store-test',
    kind: 'artifact',
    name,
    version: '',
    asset: '',
  });
  let backing: StoreBacking;
  beforeAll(async () => {
    backing = await startStoreBacking(kind);
  });
  afterAll(async () => {
    await backing?.stop();
  });

  async function setup() {
    await db.pool.query('DELETE FROM arkvory_storage');
    await createRepository(db.pool, 'store-test').catch(() => {});
    await backing.reset();
    const store = await backing.open('writer', db.pool);
    return { probe: backing.probe(), store, catalog: createCatalog(db.pool) };
  }

  it('publishes once, answers unchanged for the same bytes and conflict for others; blobs are shared', async () => {
    const { probe, store, catalog } = await setup();
    const bytes = randomBytes(70_000);
    const first = await publishArtifact(
      { store, catalog },
      { key: key('a'), body: body(bytes), contentType: 'text/plain', publishedBy: null, stage: { maxBytes: 1e6 } },
    );
    expect(first).toMatchObject({
      outcome: 'created',
      entry: { sha256: sha256(bytes), sizeBytes: 70_000, contentType: 'text/plain' },
    });
    expect(await probe.read(blobName(sha256(bytes)))).toEqual(bytes);
    const again = await publishArtifact(
      { store, catalog },
      { key: key('a'), body: body(bytes), contentType: 'text/plain', publishedBy: null, stage: { maxBytes: 1e6 } },
    );
    expect(again.outcome).toBe('unchanged');
    const other = randomBytes(10);
    await expect(
      publishArtifact(
        { store, catalog },
        { key: key('a'), body: body(other), contentType: 'text/plain', publishedBy: null, stage: { maxBytes: 1e6 } },
      ),
    ).rejects.toMatchObject({ code: 'conflict' });
    // Same bytes under a second name: one blob.
    await publishArtifact(
      { store, catalog },
      { key: key('b'), body: body(bytes), contentType: 'text/plain', publishedBy: null, stage: { maxBytes: 1e6 } },
    );
    expect(await catalog.referencedBlobs()).toEqual(new Set([sha256(bytes)]));
    expect(await probe.list('tmp')).toEqual([]);
  });

  it.each([
    ['a wrong digest', { expectedSha256: 'f'.repeat(64) }, 'invalid_request'],
    ['a shorter body than declared', { expectedLength: 5001 }, 'invalid_request'],
    ['a longer body than declared', { expectedLength: 4999 }, 'invalid_request'],
    ['a body over the limit', { maxBytes: 4999 }, 'payload_too_large'],
    [
      'a wrong digest with the length declared',
      { expectedLength: 5000, expectedSha256: 'f'.repeat(64) },
      'invalid_request',
    ],
  ] as const)('%s publishes nothing and leaves tmp/ empty', async (_name, options, code) => {
    const { probe, store, catalog } = await setup();
    const bytes = randomBytes(5000);
    await expect(
      publishArtifact(
        { store, catalog },
        {
          key: key('x'),
          body: body(bytes),
          contentType: 'a/b',
          publishedBy: null,
          stage: { maxBytes: 1e6, ...options },
        },
      ),
    ).rejects.toMatchObject({ code });
    expect(await catalog.get(key('x'))).toBeUndefined();
    expect(await store.hasBlob(sha256(bytes))).toBe(false);
    expect(await probe.list('tmp')).toEqual([]);
  });

  // Several times round the filesystem store's write ring (4 × 1 MiB slots).
  it.each([
    ['declared', true],
    ['of unknown length', false],
  ])(
    'a body of several MiB, its length %s, is checked against its digest before anything is kept',
    async (name, declared) => {
      const { probe, store, catalog } = await setup();
      const bytes = randomBytes(5 * 1024 * 1024 + 3);
      const stage = (expectedSha256: string) => ({
        maxBytes: 1e8,
        expectedSha256,
        ...(declared ? { expectedLength: bytes.length } : {}),
      });
      const chunks = () =>
        Readable.from([bytes.subarray(0, 65_536), bytes.subarray(65_536, 3_000_000), bytes.subarray(3_000_000)]);
      await expect(
        publishArtifact(
          { store, catalog },
          { key: key(name), body: chunks(), contentType: 'a/b', publishedBy: null, stage: stage('e'.repeat(64)) },
        ),
      ).rejects.toMatchObject({ code: 'invalid_request' });
      expect(await store.hasBlob(sha256(bytes))).toBe(false);
      expect(await probe.list('tmp')).toEqual([]);
      const published = await publishArtifact(
        { store, catalog },
        { key: key(name), body: chunks(), contentType: 'a/b', publishedBy: null, stage: stage(sha256(bytes)) },
      );
      expect(published.entry).toMatchObject({ sha256: sha256(bytes), sizeBytes: bytes.length });
      // Compared by hash: toEqual walks 5 MiB element by element, tens of seconds on a busy machine.
      const stored = await probe.read(blobName(sha256(bytes)));
      expect(stored && sha256(stored)).toBe(sha256(bytes));
      expect(await probe.list('tmp')).toEqual([]);
    },
  );

  it('chunks declared owned may be freed by the store once used (the directory store does); others are left alone', async () => {
    const { probe, store, catalog } = await setup();
    const bytes = randomBytes(300_000);
    // Each chunk its own allocation, as a request body's chunks are.
    const fresh = () => [Buffer.from(bytes.subarray(0, 100_000)), Buffer.from(bytes.subarray(100_000))];
    const kept = fresh();
    await publishArtifact(
      { store, catalog },
      { key: key('kept'), body: Readable.from(kept), contentType: 'a/b', publishedBy: null, stage: { maxBytes: 1e6 } },
    );
    expect(Buffer.concat(kept)).toEqual(bytes);
    const owned = fresh();
    await publishArtifact(
      { store, catalog },
      {
        key: key('owned'),
        body: Readable.from(owned),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e6, chunksOwned: true },
      },
    );
    expect(owned.map((c) => c.buffer.detached)).toEqual(kind === 'fs' ? [true, true] : [false, false]);
    expect(await probe.read(blobName(sha256(bytes)))).toEqual(bytes);
  });

  // 6 MiB declared: the directory store writes it with direct I/O, several slots in flight at the abort.
  it.each([
    ['a small body', 100_000, undefined],
    ['a large body, its length declared', 6 * 1024 * 1024, 6 * 1024 * 1024 + 1],
  ])('an aborted body publishes nothing (%s)', async (_name, sent, expectedLength) => {
    const { probe, store, catalog } = await setup();
    async function* broken() {
      for (let at = 0; at < sent; at += 65_536) yield randomBytes(Math.min(65_536, sent - at));
      throw Object.assign(new Error('aborted'), { code: 'ECONNRESET' });
    }
    await expect(
      publishArtifact(
        { store, catalog },
        {
          key: key('y'),
          body: broken(),
          contentType: 'a/b',
          publishedBy: null,
          stage: { maxBytes: 1e8, expectedLength, chunksOwned: true },
        },
      ),
    ).rejects.toThrow('aborted');
    expect(await catalog.get(key('y'))).toBeUndefined();
    expect(await probe.list('tmp')).toEqual([]);
    expect(await probe.list('blobs/sha256')).toEqual([]);
  });

  it('charges an upload meter in quanta before accepting bytes', async () => {
    const { store, catalog } = await setup();
    const taken: number[] = [];
    const meter = { quantumBytes: 4096, take: async (n: number) => void taken.push(n) };
    await publishArtifact(
      { store, catalog },
      {
        key: key('m'),
        body: body(randomBytes(10_000)),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e6, meter },
      },
    );
    expect(taken.reduce((a, b) => a + b, 0)).toBe(10_000);
    expect(Math.max(...taken)).toBeLessThanOrEqual(4096);
  });

  it('reads back any byte range of a published blob, and an absent blob is not_found', async () => {
    const { store, catalog } = await setup();
    const bytes = randomBytes(300_000);
    await publishArtifact(
      { store, catalog },
      { key: key('r'), body: body(bytes), contentType: 'a/b', publishedBy: null, stage: { maxBytes: 1e6 } },
    );
    const ranges = [
      { start: 0, end: 0 },
      { start: 1000, end: 200_000 },
      { start: 299_999, end: 299_999 },
    ];
    const reader = await store.openBlob(sha256(bytes), ranges);
    try {
      expect(reader.sizeBytes).toBe(300_000);
      for (const range of ranges) {
        const buffer = Buffer.alloc(range.end - range.start + 1);
        let filled = 0;
        while (filled < buffer.length) {
          const { bytesRead } = await reader.read(buffer, filled, buffer.length - filled, range.start + filled);
          expect(bytesRead).toBeGreaterThan(0);
          filled += bytesRead;
        }
        expect(buffer.equals(bytes.subarray(range.start, range.end + 1))).toBe(true);
      }
    } finally {
      await reader.close();
    }
    await expect(store.openBlob('0'.repeat(64), [{ start: 0, end: 0 }])).rejects.toMatchObject({ code: 'not_found' });
    await expect(store.openBlob('0'.repeat(64))).rejects.toMatchObject({ code: 'not_found' });
  });
});

describe('storage identity (static-HTTP store)', () => {
  const db = useTestDatabase();

  it('the writer PUTs the storage-id object and binds it; readers verify; a mismatch or a store that is down refuses', async () => {
    const nginx = await startStaticStore();
    try {
      await db.pool.query('DELETE FROM arkvory_storage');
      const open = (role: 'writer' | 'reader', url = nginx.url) =>
        openHttpStore({ url, role, pool: db.pool, connectTimeoutMs: 1000, timeoutMs: 5000 });
      await expect(open('reader')).rejects.toMatchObject({ code: 'storage_mismatch' });
      const writer = await open('writer');
      const objectId = (await readFile(path.join(nginx.root, 'storage-id'), 'utf8')).trim();
      expect(writer.storageId).toBe(objectId);
      expect((await db.pool.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage')).rows).toEqual([
        { id: objectId },
      ]);
      const reader = await open('reader');
      expect(reader.storageId).toBe(objectId);
      expect(reader.writable).toBe(false);
      await Promise.all([writer.close(), reader.close()]);

      // Another, empty store on the same database: refused, naming the variable to fix.
      await expect(open('writer', `${nginx.url}other/`)).rejects.toMatchObject({
        code: 'storage_mismatch',
        message: expect.stringContaining('ARKVORY_STORAGE_URL'),
      });
      expect(await readdir(nginx.root)).toEqual(['storage-id']);
      await writeFile(path.join(nginx.root, 'storage-id'), '00000000-0000-4000-8000-000000000000\n');
      await expect(open('writer')).rejects.toMatchObject({
        code: 'storage_mismatch',
        message: expect.stringContaining('different installations'),
      });

      await nginx.stop();
      await expect(open('reader')).rejects.toMatchObject({ code: 'upstream_unreachable' });
    } finally {
      await nginx.stop();
    }
  });
});
