/**
 * The behaviour every `ArtifactStore` must have (storage-adapter/store.ts), one section per promise:
 * publish atomically, read ranges, refuse a wrong digest or size, survive a cut upload, list, delete,
 * identity, multipart parts, backup and restore. Run over every kind of test/support/store-kinds.ts by
 * artifact-store.int.test.ts. Everything goes through the stores' public API (their `open…Store`,
 * the catalog, upload sessions, gc, backup and restore); a probe looks at the objects from outside.
 * A section a kind cannot run is declared only for the kinds whose capability flag says they can.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listMigrations } from '../../migrations/runner.ts';
import { runBackup } from '../../storage-adapter/backup/backup.ts';
import { runRestore } from '../../storage-adapter/backup/restore.ts';
import { createCatalog, type ArtifactKey, type Catalog } from '../../storage-adapter/catalog/catalog.ts';
import { publishArtifact } from '../../storage-adapter/catalog/publish.ts';
import { collectGarbage } from '../../storage-adapter/maintenance/gc.ts';
import { assembleJob } from '../../storage-adapter/multipart/assemble.ts';
import type { ReceivedPart } from '../../storage-adapter/multipart/completion-plan.ts';
import type { MultipartLimits } from '../../storage-adapter/multipart/bounds.ts';
import { UploadSessions } from '../../storage-adapter/multipart/sessions.ts';
import { decideRange, type ByteRange } from '../../storage-adapter/range.ts';
import type {
  ArtifactStore,
  BlobReader,
  OpenedArtifactStore,
  StageOptions,
  StoreTree,
} from '../../storage-adapter/store.ts';
import { createRepository } from '../support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../support/database.ts';
import { makeTempDir } from '../support/gateway.ts';
import type { StoreBacking, StoreKindEntry, StoreProbe } from '../support/store-kinds.ts';

const MiB = 1024 * 1024;
const REPOSITORY = 'conformance';
/** The contract, not the gateway's per-principal bounds (proxy/multipart tests those). */
const UNBOUNDED: MultipartLimits = {
  maxUploadBytes: Number.MAX_SAFE_INTEGER,
  maxSessionsPerPrincipal: Number.MAX_SAFE_INTEGER,
  maxPendingBytesPerPrincipal: Number.MAX_SAFE_INTEGER,
  maxPartsPerPrincipal: Number.MAX_SAFE_INTEGER,
};
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
/** `blobs/sha256/ab/cd/<hex>`, as the probes name it. */
const blobName = (hex: string) => `blobs/sha256/${hex.slice(0, 2)}/${hex.slice(2, 4)}/${hex}`;
/**
 * `actual` holds exactly `expected`, compared by digest: a deep equality walks a buffer element by
 * element, seconds for a few hundred KiB on a busy machine.
 */
function expectBytes(actual: Buffer | undefined, expected: Buffer): void {
  expect(actual && { size: actual.length, sha256: sha256(actual) }).toEqual({
    size: expected.length,
    sha256: sha256(expected),
  });
}
/** A body in two chunks, as a socket hands one over. */
const body = (b: Buffer) => Readable.from([b.subarray(0, 1000), b.subarray(1000)]);

/** The bytes of `range` through `reader.read`, as response streaming reads them. */
async function readRange(reader: BlobReader, range: ByteRange): Promise<Buffer> {
  const buffer = Buffer.alloc(range.end - range.start + 1);
  let filled = 0;
  while (filled < buffer.length) {
    const { bytesRead } = await reader.read(buffer, filled, buffer.length - filled, range.start + filled);
    expect(bytesRead).toBeGreaterThan(0);
    filled += bytesRead;
  }
  return buffer;
}

/** The blob under `hex` holds `bytes`: seen from outside, and read through the store. */
async function expectBlobHolds(probe: StoreProbe, store: ArtifactStore, hex: string, bytes: Buffer): Promise<void> {
  expectBytes(await probe.read(blobName(hex)), bytes);
  const reader = await store.openBlob(hex);
  try {
    expect(reader.sizeBytes).toBe(bytes.length);
    expectBytes(await readRange(reader, { start: 0, end: bytes.length - 1 }), bytes);
  } finally {
    await reader.close();
  }
}

/** Damaged bytes under a blob name, as bit rot, a file cut short by a crash, or one replaced on the storage host leave them. */
function damagesOf(bytes: Buffer): ReadonlyArray<readonly [string, Buffer]> {
  return [
    ['same-size', randomBytes(bytes.length)],
    ['cut', bytes.subarray(0, 30_000)],
  ];
}

/** The bytes of `ranges`, in order, through one reader opened for them. */
async function readRanges(store: ArtifactStore, hex: string, ranges: readonly ByteRange[]): Promise<Buffer[]> {
  const reader = await store.openBlob(hex, ranges);
  try {
    const out: Buffer[] = [];
    for (const range of ranges) out.push(await readRange(reader, range));
    return out;
  } finally {
    await reader.close();
  }
}

async function collect(chunks: AsyncIterable<Buffer>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const chunk of chunks) out.push(chunk);
  return Buffer.concat(out);
}

/** Every file under `dir` of a store's tree, depth first, as `[relative name, size]`, sorted. */
async function filesUnder(tree: StoreTree, dir: string): Promise<Array<[string, number]>> {
  const out: Array<[string, number]> = [];
  for (const entry of await tree.list(dir)) {
    if (entry.isDirectory) out.push(...(await filesUnder(tree, `${dir}/${entry.name}`)));
    else out.push([`${dir}/${entry.name}`, entry.sizeBytes]);
  }
  return out.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A body that yields `sent` bytes and then fails, as a client that goes away mid-upload. */
async function* cutAfter(sent: number): AsyncGenerator<Buffer> {
  for (let at = 0; at < sent; at += 65_536) yield randomBytes(Math.min(65_536, sent - at));
  throw Object.assign(new Error('aborted'), { code: 'ECONNRESET' });
}

interface Fixture {
  readonly store: OpenedArtifactStore;
  readonly probe: StoreProbe;
  readonly catalog: Catalog;
  readonly pool: pg.Pool;
  /** The store's place in the backing (test/support/store-kinds.ts `openAt`). */
  readonly place: string;
  /** A key no other test uses. */
  key(name: string): ArtifactKey;
  publish(name: string, bytes: Buffer, stage?: Partial<StageOptions>): ReturnType<typeof publishArtifact>;
}

/**
 * Declares the suite for one store kind. `start` starts what the kind needs, once for the whole
 * suite; the suite stops it. Each test gets a writer on a store of its own (a new place, a fresh
 * identity), so tests share the server but never objects.
 */
export function artifactStoreConformance(entry: StoreKindEntry, start: () => Promise<StoreBacking>): void {
  describe(`ArtifactStore conformance: ${entry.kind} (${entry.server})`, () => {
    const db = useTestDatabase();
    let backing: StoreBacking;
    let places = 0;
    beforeAll(async () => {
      backing = await start();
      await createRepository(db.pool, REPOSITORY);
    });
    afterAll(async () => {
      await backing?.stop();
    });

    /** A writer on a new, empty place, bound to this file's database with a fresh identity. */
    async function fresh(pool: pg.Pool = db.pool): Promise<Fixture> {
      await pool.query('DELETE FROM arkvory_storage');
      const place = `s${++places}`;
      const store = await backing.openAt(place, 'writer', pool);
      const catalog = createCatalog(pool);
      const key = (name: string): ArtifactKey => ({
        repository: REPOSITORY,
        kind: 'artifact',
        name: `${place}-${name}`,
        version: '',
        asset: '',
      });
      return {
        store,
        probe: backing.probeAt(place),
        catalog,
        pool,
        place,
        key,
        publish: (name, bytes, stage = {}) =>
          publishArtifact(
            { store, catalog },
            {
              key: key(name),
              body: body(bytes),
              contentType: 'a/b',
              publishedBy: null,
              stage: { maxBytes: 1e9, ...stage },
            },
          ),
      };
    }

    it('should offer exactly the optional methods its capability flags declare', async () => {
      const { store } = await fresh();
      expect(typeof store.assembleParts === 'function').toBe(entry.capabilities.serverSideAssembly);
      expect(store.kind).toBe(entry.kind === 'fs' || entry.kind === 'http' ? entry.kind : 's3');
      expect(store.writable).toBe(true);
    });

    describe('publish atomically', () => {
      it('should publish once, answer unchanged for the same bytes and conflict for others; blobs are shared', async () => {
        const { probe, store, catalog, key, publish } = await fresh();
        const bytes = randomBytes(70_000);
        const first = await publishArtifact(
          { store, catalog },
          { key: key('a'), body: body(bytes), contentType: 'text/plain', publishedBy: null, stage: { maxBytes: 1e6 } },
        );
        expect(first).toMatchObject({
          outcome: 'created',
          entry: { sha256: sha256(bytes), sizeBytes: 70_000, contentType: 'text/plain' },
        });
        expectBytes(await probe.read(blobName(sha256(bytes))), bytes);
        expect((await publish('a', bytes)).outcome).toBe('unchanged');
        await expect(publish('a', randomBytes(10))).rejects.toMatchObject({ code: 'conflict' });
        // Same bytes under a second name: one blob.
        await publish('b', bytes);
        expect(await catalog.referencedBlobs()).toEqual(new Set([sha256(bytes)]));
        expect(await probe.list(`blobs/sha256/${sha256(bytes).slice(0, 2)}`)).toEqual([sha256(bytes).slice(2, 4)]);
        expect(await probe.list('tmp')).toEqual([]);
        // The same bytes again are committed too (in place of what is under the blob name).
        expect(store.uploadStats()).toEqual({ committed: 3, discarded: 1, failed: 0 });
      });

      it('should show nothing before commit, keep nothing after discard, and keep one blob for identical commits', async () => {
        const { probe, store } = await fresh();
        const bytes = randomBytes(50_000);
        const hex = sha256(bytes);
        const staged = await store.stage(body(bytes), { maxBytes: 1e6 });
        expect(staged).toMatchObject({ sha256: hex, sizeBytes: bytes.length });
        expect(await store.hasBlob(hex)).toBe(false);
        await expect(store.openBlob(hex)).rejects.toMatchObject({ code: 'not_found' });
        expect(await probe.read(blobName(hex))).toBeUndefined();
        await staged.discard();
        await staged.discard();
        expect(await probe.list('tmp')).toEqual([]);
        expect(await store.hasBlob(hex)).toBe(false);

        const one = await store.stage(body(bytes), { maxBytes: 1e6 });
        const two = await store.stage(body(bytes), { maxBytes: 1e6 });
        await one.commit();
        expect(await store.hasBlob(hex)).toBe(true);
        await two.commit();
        await Promise.all([one.discard(), two.discard()]);
        expectBytes(await probe.read(blobName(hex)), bytes);
        expect(await probe.list('tmp')).toEqual([]);
        expect(store.uploadStats()).toEqual({ committed: 2, discarded: 1, failed: 0 });
      });

      it('should put the verified bytes in place of damaged ones already under the blob name (other bytes of the same size, a cut file)', async () => {
        const { probe, store, publish } = await fresh();
        const bytes = randomBytes(70_000);
        const hex = sha256(bytes);
        for (const [name, planted] of damagesOf(bytes)) {
          await probe.write(blobName(hex), planted);
          expect((await publish(name, bytes)).outcome).toBe('created');
          await expectBlobHolds(probe, store, hex, bytes);
        }
        // The same bytes once more find the verified blob and replace it with its equal.
        await publish('again', bytes);
        expectBytes(await probe.read(blobName(hex)), bytes);
        expect(await probe.list('tmp')).toEqual([]);
      });

      it('should put the same bytes published again under their name in place of a damaged blob, answering unchanged', async () => {
        const { probe, store, catalog, key, publish } = await fresh();
        const bytes = randomBytes(70_000);
        const hex = sha256(bytes);
        const first = await publish('a', bytes);
        expect(first.outcome).toBe('created');
        for (const [how, planted] of damagesOf(bytes)) {
          await probe.write(blobName(hex), planted);
          const again = await publish('a', bytes);
          expect({ how, outcome: again.outcome, entry: again.entry }).toEqual({
            how,
            outcome: 'unchanged',
            entry: first.entry,
          });
          await expectBlobHolds(probe, store, hex, bytes);
        }
        // The row is the first publish's, untouched; nothing is left staged.
        expect(await catalog.get(key('a'))).toEqual(first.entry);
        expect(await probe.list('tmp')).toEqual([]);
        expect(store.uploadStats()).toEqual({ committed: 3, discarded: 0, failed: 0 });
      });

      it('should refuse with unavailable a commit whose temporary was removed meanwhile (gc beside a fenced gateway), publishing nothing', async () => {
        const { probe, store } = await fresh();
        const bytes = randomBytes(50_000);
        const staged = await store.stage(body(bytes), { maxBytes: 1e6 });
        const temporaries = await store.tree.list('tmp');
        expect(temporaries).toHaveLength(1);
        await store.tree.remove(`tmp/${temporaries[0]!.name}`);
        await expect(staged.commit()).rejects.toMatchObject({ code: 'unavailable' });
        await staged.discard();
        expect(await probe.read(blobName(sha256(bytes)))).toBeUndefined();
        expect(await store.hasBlob(sha256(bytes))).toBe(false);
      });

      it(`should ${entry.capabilities.freesOwnedChunks ? 'free' : 'leave alone'} chunks declared owned once used, and never touch others`, async () => {
        const { probe, store, catalog, key } = await fresh();
        const bytes = randomBytes(300_000);
        // Each chunk its own allocation, as a request body's chunks are.
        const fresh2 = () => [Buffer.from(bytes.subarray(0, 100_000)), Buffer.from(bytes.subarray(100_000))];
        const kept = fresh2();
        await publishArtifact(
          { store, catalog },
          {
            key: key('kept'),
            body: Readable.from(kept),
            contentType: 'a/b',
            publishedBy: null,
            stage: { maxBytes: 1e6 },
          },
        );
        expectBytes(Buffer.concat(kept), bytes);
        const owned = fresh2();
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
        const freed = entry.capabilities.freesOwnedChunks;
        expect(owned.map((c) => c.buffer.detached)).toEqual([freed, freed]);
        expectBytes(await probe.read(blobName(sha256(bytes))), bytes);
      });

      it('should charge an upload meter in quanta before accepting bytes', async () => {
        const { publish } = await fresh();
        const taken: number[] = [];
        const meter = { quantumBytes: 4096, take: async (n: number) => void taken.push(n) };
        await publish('m', randomBytes(10_000), { maxBytes: 1e6, meter });
        expect(taken.reduce((a, b) => a + b, 0)).toBe(10_000);
        expect(Math.max(...taken)).toBeLessThanOrEqual(4096);
      });
    });

    describe('read ranges', () => {
      it('should read back any byte range of a published blob byte-exact, several through one reader', async () => {
        const { store, publish } = await fresh();
        const bytes = randomBytes(300_000);
        await publish('r', bytes);
        const ranges = [
          { start: 0, end: 0 },
          { start: 1000, end: 200_000 },
          { start: 299_999, end: 299_999 },
        ];
        const reader = await store.openBlob(sha256(bytes), ranges);
        try {
          expect(reader.sizeBytes).toBe(300_000);
          for (const range of ranges)
            expect((await readRange(reader, range)).equals(bytes.subarray(range.start, range.end + 1))).toBe(true);
        } finally {
          await reader.close();
        }
      });

      it.each([
        ['a single range', 'bytes=1000-1999', { start: 1000, end: 1999 }],
        ['a range to the end', 'bytes=250000-', { start: 250_000, end: 299_999 }],
        ['a suffix range', 'bytes=-777', { start: 299_223, end: 299_999 }],
        ['the whole blob as a range', 'bytes=0-', { start: 0, end: 299_999 }],
      ])('should read %s as decideRange resolves it, byte-exact', async (_name, header, expected) => {
        const { store, publish } = await fresh();
        const bytes = randomBytes(300_000);
        await publish('r', bytes);
        const decision = decideRange(header, bytes.length);
        expect(decision).toEqual({ kind: 'partial', ranges: [expected] });
        const [read] = await readRanges(store, sha256(bytes), [expected]);
        expect(read!.equals(bytes.subarray(expected.start, expected.end + 1))).toBe(true);
        // Opened without ranges (a HEAD, or ranges decided later): the same bytes.
        const reader = await store.openBlob(sha256(bytes));
        try {
          expect(reader.sizeBytes).toBe(bytes.length);
          expect((await readRange(reader, expected)).equals(read!)).toBe(true);
        } finally {
          await reader.close();
        }
      });

      it('should hand over the same bytes through chunks() as through read(), when it offers chunks', async () => {
        const { store, publish } = await fresh();
        const bytes = randomBytes(200_000);
        await publish('c', bytes);
        const range = { start: 17, end: 150_016 };
        const reader = await store.openBlob(sha256(bytes), [range]);
        try {
          const got = reader.chunks
            ? await collect(reader.chunks(range, AbortSignal.timeout(30_000)))
            : await readRange(reader, range);
          expect(got.equals(bytes.subarray(range.start, range.end + 1))).toBe(true);
        } finally {
          await reader.close();
        }
      });

      it('should answer not_found for an absent blob, with ranges or without', async () => {
        const { store } = await fresh();
        await expect(store.openBlob('0'.repeat(64), [{ start: 0, end: 0 }])).rejects.toMatchObject({
          code: 'not_found',
        });
        await expect(store.openBlob('0'.repeat(64))).rejects.toMatchObject({ code: 'not_found' });
        await expect(store.openBlob('not-a-digest')).rejects.toMatchObject({ code: 'not_found' });
        expect(await store.hasBlob('0'.repeat(64))).toBe(false);
      });
    });

    describe('refuse a wrong digest or size', () => {
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
      ] as const)('should refuse %s, publishing nothing and leaving tmp/ empty', async (_name, options, code) => {
        const { probe, store, catalog, key, publish } = await fresh();
        const bytes = randomBytes(5000);
        await expect(publish('x', bytes, { maxBytes: 1e6, ...options })).rejects.toMatchObject({ code });
        expect(await catalog.get(key('x'))).toBeUndefined();
        expect(await store.hasBlob(sha256(bytes))).toBe(false);
        expect(await probe.list('tmp')).toEqual([]);
        expect(store.uploadStats().failed).toBe(1);
      });

      // Several times round the directory store's write ring (4 × 1 MiB slots).
      it.each([
        ['declared', true],
        ['of unknown length', false],
      ])(
        'should check a body of several MiB, its length %s, against its digest before anything is kept',
        async (name, declared) => {
          const { probe, store, catalog, key } = await fresh();
          const bytes = randomBytes(5 * MiB + 3);
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
    });

    describe('survive a cut upload', () => {
      // 6 MiB declared: the directory store writes it with direct I/O, several slots in flight at the cut.
      it.each([
        ['a small body', 100_000, undefined],
        ['a large body, its length declared', 6 * MiB, 6 * MiB + 1],
      ])('should publish nothing from a body cut mid-way (%s)', async (_name, sent, expectedLength) => {
        const { probe, store, catalog, key } = await fresh();
        await expect(
          publishArtifact(
            { store, catalog },
            {
              key: key('y'),
              body: cutAfter(sent),
              contentType: 'a/b',
              publishedBy: null,
              stage: { maxBytes: 1e8, expectedLength, chunksOwned: true },
            },
          ),
        ).rejects.toThrow('aborted');
        expect(await catalog.get(key('y'))).toBeUndefined();
        expect(await probe.list('tmp')).toEqual([]);
        expect(await probe.list('blobs/sha256')).toEqual([]);
        expect((await store.tree.incompleteUploads?.()) ?? []).toEqual([]);
      });

      it('should stop at an aborted signal and keep nothing', async () => {
        const { probe, store } = await fresh();
        const controller = new AbortController();
        async function* slow() {
          yield randomBytes(100_000);
          controller.abort(new Error('the client went away'));
          yield randomBytes(100_000);
        }
        await expect(store.stage(slow(), { maxBytes: 1e6, signal: controller.signal })).rejects.toThrow(
          'the client went away',
        );
        expect(await probe.list('tmp')).toEqual([]);
        expect(await probe.list('blobs/sha256')).toEqual([]);
      });

      it('should stay usable after a cut: the next upload publishes and reads back byte-exact', async () => {
        const { probe, store, catalog, key, publish } = await fresh();
        await expect(
          publishArtifact(
            { store, catalog },
            {
              key: key('cut'),
              body: cutAfter(200_000),
              contentType: 'a/b',
              publishedBy: null,
              stage: { maxBytes: 1e8 },
            },
          ),
        ).rejects.toThrow('aborted');
        const bytes = randomBytes(200_000);
        expect((await publish('cut', bytes)).outcome).toBe('created');
        const [read] = await readRanges(store, sha256(bytes), [{ start: 0, end: bytes.length - 1 }]);
        expect(read!.equals(bytes)).toBe(true);
        expect(await probe.list('tmp')).toEqual([]);
        expect(store.uploadStats()).toEqual({ committed: 1, discarded: 0, failed: 1 });
      });
    });

    describe('list', () => {
      it('should list published blobs by directory level with their sizes, and read them through the tree', async () => {
        const { store, publish } = await fresh();
        const bodies = [randomBytes(1), randomBytes(4096), randomBytes(100_000)];
        for (const [i, b] of bodies.entries()) await publish(`l${i}`, b);
        expect(await filesUnder(store.tree, 'blobs/sha256')).toEqual(
          bodies
            .map((b): [string, number] => [blobName(sha256(b)), b.length])
            .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        );
        const levels = await store.tree.list('blobs/sha256');
        expect(levels.every((e) => e.isDirectory)).toBe(true);
        expect(levels.map((e) => e.name).sort()).toEqual([...new Set(bodies.map((b) => sha256(b).slice(0, 2)))].sort());
        for (const b of bodies) expect((await collect(store.tree.read(blobName(sha256(b))))).equals(b)).toBe(true);
        expect(await store.tree.list('no-such-directory')).toEqual([]);
        expect(await store.tree.list('tmp')).toEqual([]);
      });

      it('should move a file within the tree', async () => {
        const { probe, store, publish } = await fresh();
        const bytes = randomBytes(3000);
        await publish('mv', bytes);
        await store.tree.move(blobName(sha256(bytes)), 'quarantine/moved');
        expectBytes(await probe.read('quarantine/moved'), bytes);
        expect(await probe.read(blobName(sha256(bytes)))).toBeUndefined();
        expect(await store.hasBlob(sha256(bytes))).toBe(false);
      });
    });

    describe('delete', () => {
      it('should delete a blob no row references (gc), leaving the referenced ones byte-exact', async () => {
        const { probe, store, catalog, key, publish, pool } = await fresh();
        const gone = randomBytes(20_000);
        const kept = randomBytes(30_000);
        await publish('gone', gone);
        await publish('kept', kept);
        expect(await catalog.remove(key('gone'))).toBe(true);
        // Rows of other tests' stores stay referenced in this database; this store holds only its own blobs.
        const dry = await collectGarbage(store.tree, pool, { dryRun: true });
        expect(dry.orphanBlobs).toEqual([sha256(gone)]);
        expect(await store.hasBlob(sha256(gone))).toBe(true);
        const report = await collectGarbage(store.tree, pool, { dryRun: false });
        expect(report).toMatchObject({ orphanBlobs: [sha256(gone)], keptBlobs: 1, bytesFreed: gone.length });
        expect(await store.hasBlob(sha256(gone))).toBe(false);
        await expect(store.openBlob(sha256(gone))).rejects.toMatchObject({ code: 'not_found' });
        expect(await probe.read(blobName(sha256(gone)))).toBeUndefined();
        const [read] = await readRanges(store, sha256(kept), [{ start: 0, end: kept.length - 1 }]);
        expect(read!.equals(kept)).toBe(true);
      });

      it('should remove a file or a whole directory; a missing one is fine', async () => {
        const { probe, store, publish } = await fresh();
        const bytes = randomBytes(1000);
        await publish('rm', bytes);
        await store.tree.remove(blobName(sha256(bytes)));
        expect(await store.hasBlob(sha256(bytes))).toBe(false);
        await store.tree.remove(blobName(sha256(bytes)));
        await store.tree.remove('no-such-directory');
        await probe.write('quarantine/a/one', 'x');
        await probe.write('quarantine/a/two', 'y');
        await store.tree.remove('quarantine/a');
        expect(await probe.list('quarantine/a')).toEqual([]);
        expect(await probe.read('quarantine/a/one')).toBeUndefined();
      });
    });

    describe('identity', () => {
      it('should refuse a reader on a store no writer has bound', async () => {
        await db.pool.query('DELETE FROM arkvory_storage');
        await expect(backing.openAt(`unbound${++places}`, 'reader', db.pool)).rejects.toMatchObject({
          code: 'storage_mismatch',
        });
      });

      it('should bind a fresh store: the storage-id object and the row hold its id; later writers and readers verify it', async () => {
        const { store, probe, place } = await fresh();
        const objectId = (await probe.read('storage-id'))?.toString().trim();
        expect(store.storageId).toMatch(/^[0-9a-f-]{36}$/);
        expect(objectId).toBe(store.storageId);
        expect((await db.pool.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage')).rows).toEqual([
          { id: store.storageId },
        ]);
        const again = await backing.openAt(place, 'writer', db.pool);
        expect(again.storageId).toBe(store.storageId);
        expect((await again.identity.read())?.trim()).toBe(store.storageId);
        const reader = await backing.openAt(place, 'reader', db.pool);
        expect(reader.storageId).toBe(store.storageId);
        expect(reader.writable).toBe(false);
        await Promise.all([again.close(), reader.close()]);
      });

      it('should refuse another, empty store on the same database, naming the variable to fix, and write nothing there', async () => {
        const { store } = await fresh();
        const other = `other${++places}`;
        await expect(backing.openAt(other, 'writer', db.pool)).rejects.toMatchObject({
          code: 'storage_mismatch',
          message: expect.stringContaining(store.identity.variable),
        });
        expect(await backing.probeAt(other).list('')).toEqual([]);
        await expect(backing.openAt(other, 'reader', db.pool)).rejects.toMatchObject({ code: 'storage_mismatch' });
      });

      it('should refuse a storage-id that differs from the row, or that is not a UUID', async () => {
        const { probe, place } = await fresh();
        await probe.write('storage-id', '00000000-0000-4000-8000-000000000000\n');
        await expect(backing.openAt(place, 'writer', db.pool)).rejects.toMatchObject({
          code: 'storage_mismatch',
          message: expect.stringContaining('different installations'),
        });
        await expect(backing.openAt(place, 'reader', db.pool)).rejects.toMatchObject({ code: 'storage_mismatch' });
        await probe.write('storage-id', 'garbage\n');
        await expect(backing.openAt(place, 'writer', db.pool)).rejects.toMatchObject({ code: 'storage_mismatch' });
      });

      it('should refuse a store bound to another database, binding nothing there', async () => {
        const other = await createTestDatabase();
        try {
          const { place } = await fresh();
          await expect(backing.openAt(place, 'writer', other.pool)).rejects.toMatchObject({
            code: 'storage_mismatch',
            message: expect.stringContaining('ARKVORY_DATABASE_URL'),
          });
          expect((await other.pool.query('SELECT id FROM arkvory_storage')).rows).toEqual([]);
        } finally {
          await other.drop();
        }
      });

      it('should open a restore target without reading or writing its storage-id, and write it when told', async () => {
        const place = `restore${++places}`;
        const id = randomUUID();
        const target = await backing.openAt(place, 'writer', db.pool, { restoreAs: id });
        expect(target.storageId).toBe(id);
        const probe = backing.probeAt(place);
        expect(await probe.read('storage-id')).toBeUndefined();
        expect(await target.identity.read()).toBeUndefined();
        await target.identity.write(id);
        expect((await probe.read('storage-id'))?.toString().trim()).toBe(id);
        expect((await target.identity.read())?.trim()).toBe(id);
        await expect(backing.openAt(place, 'reader', db.pool, { restoreAs: id })).rejects.toThrow('writer');
      });
    });

    describe('multipart parts', () => {
      const scope = { repository: REPOSITORY, principalId: null };

      /** The job `complete` queued for the session, as the completion worker takes it. */
      async function queuedJob(pool: pg.Pool, sessionId: string) {
        const { rows } = await pool.query<{ id: string; parts: ReceivedPart[] }>(
          'SELECT id::text AS id, parts FROM arkvory_upload_jobs WHERE session_id = $1',
          [sessionId],
        );
        expect(rows).toHaveLength(1);
        return { id: rows[0]!.id, sessionId, parts: rows[0]!.parts, attempts: 0 };
      }

      it('should put, read, list, move and remove part objects under uploads/<session>/', async () => {
        const { probe, store } = await fresh();
        const session = '00000000-0000-4000-8000-000000000001';
        const part = randomBytes(100_000);
        await store.parts.write(session, '00001-a.part', Readable.from([part]));
        await store.parts.write(session, '00002-b.part', Readable.from([Buffer.from('x')]));
        expect((await collect(store.parts.read(session, '00001-a.part'))).equals(part)).toBe(true);
        expect(await store.parts.has(session, '00001-a.part')).toBe(true);
        expect(await store.parts.has(session, '00009-z.part')).toBe(false);
        expect((await store.tree.list('uploads')).map((e) => [e.name, e.isDirectory])).toEqual([[session, true]]);
        expect((await store.tree.list(`uploads/${session}`)).map((e) => [e.name, e.sizeBytes]).sort()).toEqual([
          ['00001-a.part', 100_000],
          ['00002-b.part', 1],
        ]);
        await store.tree.move(`uploads/${session}/00002-b.part`, 'quarantine/b');
        expect(await probe.read('quarantine/b')).toEqual(Buffer.from('x'));
        await store.parts.remove(session, '00001-a.part');
        expect(await store.parts.has(session, '00001-a.part')).toBe(false);
        expect(await store.tree.list(`uploads/${session}`)).toEqual([]);
        await store.parts.write(session, '00003-c.part', Readable.from([Buffer.from('y')]));
        await store.parts.removeSession(session);
        expect(await probe.list('uploads')).toEqual([]);
        await expect(collect(store.parts.read(session, '00003-c.part'))).rejects.toMatchObject({ code: 'not_found' });
      });

      it('should keep no part whose body fails', async () => {
        const { probe, store } = await fresh();
        const session = '00000000-0000-4000-8000-000000000002';
        await expect(store.parts.write(session, '00001-a.part', cutAfter(150_000))).rejects.toThrow('aborted');
        expect(await probe.list(`uploads/${session}`)).toEqual([]);
      });

      it('should take parts through a session (a re-sent part replaces the first), list them, and assemble the whole byte-exact', async () => {
        const { probe, store, catalog, key, pool } = await fresh();
        const sessions = new UploadSessions({ pool, parts: store.parts, ttlSeconds: 3600, limits: UNBOUNDED });
        const bodies = [randomBytes(70_000), randomBytes(1), randomBytes(33_333)];
        const whole = Buffer.concat(bodies);
        const session = await sessions.create(key('mp'), { contentType: 'a/b', principalId: null });
        await sessions.putPart(scope, session.id, 2, Readable.from([randomBytes(10)]), { maxBytes: 1e6 });
        for (const [i, b] of bodies.entries())
          await sessions.putPart(scope, session.id, i + 1, body(b), { maxBytes: 1e6, expectedLength: b.length });
        const listed = (await sessions.get(scope, session.id)).parts;
        expect(listed).toEqual(bodies.map((b, i) => ({ partNumber: i + 1, sizeBytes: b.length, sha256: sha256(b) })));
        // The replaced part 2 is gone from the store: one object per part.
        expect(await probe.list(`uploads/${session.id}`)).toHaveLength(3);

        await sessions.complete(
          scope,
          session.id,
          listed.map((p) => ({ partNumber: p.partNumber, sha256: p.sha256 })),
        );
        const job = await queuedJob(pool, session.id);
        const { entry: published, assembly } = await assembleJob({ pool, store, catalog }, job);
        // Parts below the S3 copy minimum: every kind streams them through stage().
        expect(assembly).toBe('streamed');
        expect(published).toMatchObject({ sha256: sha256(whole), sizeBytes: whole.length });
        expect(await catalog.get(key('mp'))).toMatchObject({ sha256: sha256(whole) });
        const [read] = await readRanges(store, sha256(whole), [{ start: 0, end: whole.length - 1 }]);
        expect(read!.equals(whole)).toBe(true);
        expect(await probe.list('tmp')).toEqual([]);
      });

      it('should refuse to assemble a part changed on the store after it was received, publishing nothing', async () => {
        const { probe, store, catalog, key, pool } = await fresh();
        const sessions = new UploadSessions({ pool, parts: store.parts, ttlSeconds: 3600, limits: UNBOUNDED });
        const session = await sessions.create(key('changed'), { contentType: 'a/b', principalId: null });
        const bodies = [randomBytes(20_000), randomBytes(20_000)];
        for (const [i, b] of bodies.entries())
          await sessions.putPart(scope, session.id, i + 1, body(b), { maxBytes: 1e6 });
        const { rows } = await pool.query<{ file_name: string }>(
          'SELECT file_name FROM arkvory_upload_parts WHERE session_id = $1 AND part_number = 2',
          [session.id],
        );
        await probe.write(`uploads/${session.id}/${rows[0]!.file_name}`, randomBytes(20_000));
        await sessions.complete(
          scope,
          session.id,
          bodies.map((b, i) => ({ partNumber: i + 1, sha256: sha256(b) })),
        );
        await expect(assembleJob({ pool, store, catalog }, await queuedJob(pool, session.id))).rejects.toMatchObject({
          code: 'part_mismatch',
        });
        expect(await catalog.get(key('changed'))).toBeUndefined();
        expect(await probe.list('tmp')).toEqual([]);
        expect(await probe.list('blobs/sha256')).toEqual([]);
      });

      it('should abort a session: its parts are removed and it takes no more', async () => {
        const { probe, store, key, pool } = await fresh();
        const sessions = new UploadSessions({ pool, parts: store.parts, ttlSeconds: 3600, limits: UNBOUNDED });
        const session = await sessions.create(key('aborted'), { contentType: 'a/b', principalId: null });
        for (const n of [1, 2])
          await sessions.putPart(scope, session.id, n, body(randomBytes(5000)), { maxBytes: 1e6 });
        expect(await probe.list(`uploads/${session.id}`)).toHaveLength(2);
        await sessions.abort(scope, session.id);
        expect(await probe.list(`uploads/${session.id}`)).toEqual([]);
        expect((await sessions.get(scope, session.id)).state).toBe('aborted');
        await expect(
          sessions.putPart(scope, session.id, 3, body(randomBytes(10)), { maxBytes: 1e6 }),
        ).rejects.toMatchObject({ code: 'conflict' });
      });

      if (entry.capabilities.serverSideAssembly)
        it('should assemble parts of the server minimum (5 MiB) and more on the store, byte-exact', async () => {
          const { store, catalog, key, pool } = await fresh();
          const sessions = new UploadSessions({ pool, parts: store.parts, ttlSeconds: 3600, limits: UNBOUNDED });
          const bodies = [randomBytes(5 * MiB), randomBytes(MiB + 7)];
          const whole = Buffer.concat(bodies);
          const session = await sessions.create(key('copied'), { contentType: 'a/b', principalId: null });
          for (const [i, b] of bodies.entries())
            await sessions.putPart(scope, session.id, i + 1, Readable.from([b]), { maxBytes: 1e8 });
          await sessions.complete(
            scope,
            session.id,
            bodies.map((b, i) => ({ partNumber: i + 1, sha256: sha256(b) })),
          );
          const { entry: published, assembly } = await assembleJob(
            { pool, store, catalog },
            await queuedJob(pool, session.id),
          );
          expect(assembly).toBe('server-copy');
          expect(published).toMatchObject({ sha256: sha256(whole), sizeBytes: whole.length });
          const [read] = await readRanges(store, sha256(whole), [{ start: 0, end: whole.length - 1 }]);
          expect(sha256(read!)).toBe(sha256(whole));
        });
    });

    describe('backup and restore', () => {
      it('should back up every published blob and restore it byte-exact into a fresh store of the same kind', async () => {
        const source = await createTestDatabase();
        const target = await createTestDatabase();
        const destination = await makeTempDir('arkvory-backups-');
        try {
          await createRepository(source.pool, REPOSITORY);
          const { store, key, publish } = await fresh(source.pool);
          const bodies = [randomBytes(1), randomBytes(70_000), randomBytes(2 * MiB + 11)];
          for (const [i, b] of bodies.entries()) await publish(`b${i}`, b);
          const backup = await runBackup({ destination, pool: source.pool, store, nowMs: () => Date.now() });
          expect(backup.blobs).toMatchObject({
            count: bodies.length,
            bytes: bodies.reduce((n, b) => n + b.length, 0),
          });

          const place = `restored${++places}`;
          const restored = await runRestore({
            backup: backup.backup,
            pool: target.pool,
            codeSchemaVersion: Math.max(...(await listMigrations()).map((m) => m.version)),
            openTarget: (storageId) => backing.openAt(place, 'writer', target.pool, { restoreAs: storageId }),
          });
          expect(restored).toMatchObject({
            storageId: store.storageId,
            blobs: { count: bodies.length },
            scrub: { checked: bodies.length, corrupt: [] },
          });

          const reopened = await backing.openAt(place, 'reader', target.pool);
          expect(reopened.storageId).toBe(store.storageId);
          const catalog = createCatalog(target.pool);
          for (const [i, b] of bodies.entries()) {
            expect(await catalog.get(key(`b${i}`))).toMatchObject({ sha256: sha256(b), sizeBytes: b.length });
            const [read] = await readRanges(reopened, sha256(b), [{ start: 0, end: b.length - 1 }]);
            expect(read!.equals(b)).toBe(true);
          }
          expect(await backing.probeAt(place).list('tmp')).toEqual([]);
        } finally {
          await Promise.all([source.drop(), target.drop(), rm(destination, { recursive: true, force: true })]);
        }
      });
    });
  });
}
