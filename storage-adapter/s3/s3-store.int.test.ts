/**
 * What only the S3 store does, on each real S3 server (SeaweedFS, MinIO): reads and PUTs over
 * sockets of their own, multipart upload of a body of unknown length, multipart copy above the
 * single-copy limit, server-side assembly and its fallback, abandoned multipart uploads found and
 * aborted by gc, and the identity refusals (missing bucket, wrong credentials, server down). What
 * every store must do, this one included, is the conformance suite (test/conformance/artifact-store.ts).
 * Each server kind is the run's shared server on a fresh bucket (test/support/shared-s3.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { listKeys, type S3Server } from '../../test/support/s3-server.ts';
import { S3_STORE_KINDS, s3Probe, startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { createCatalog, type ArtifactKey } from '../catalog/catalog.ts';
import { collectGarbage } from '../maintenance/gc.ts';
import { scrubBlobs } from '../maintenance/scrub.ts';
import type { StoreTree } from '../store.ts';
import { s3Tree } from './s3-tree.ts';
import { publishArtifact } from '../catalog/publish.ts';
import { openS3Store, type S3Store } from './s3-store.ts';
import { createS3Client } from './s3-client.ts';
import { abortMultipart, createMultipart, S3_DEFAULT_LIMITS, uploadObject, uploadPartCopy } from './s3-transfer.ts';
import { freeLoopbackPort, startProcess, waitForHttp, writeNginxConf } from '../../test/harness/index.ts';
import { makeTempDir } from '../../test/support/gateway.ts';
import { checkedUpload } from '../streaming/checked-upload.ts';

const MiB = 1024 * 1024;
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const blobName = (hex: string) => `blobs/sha256/${hex.slice(0, 2)}/${hex.slice(2, 4)}/${hex}`;
/** A body in 1 MiB chunks, of no declared length. */
const chunked = (b: Buffer) =>
  Readable.from(Array.from({ length: Math.ceil(b.length / MiB) }, (_, i) => b.subarray(i * MiB, (i + 1) * MiB)));

describe.each(S3_STORE_KINDS)('S3 store on %s', (kind) => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let server: S3Server;
  const key = (name: string): ArtifactKey => ({
    repository: 's3-test',
    kind: 'artifact',
    name,
    version: '',
    asset: '',
  });
  beforeAll(async () => {
    backing = await startStoreBacking(kind);
    server = backing.s3!;
    await createRepository(db.pool, 's3-test');
  });
  afterAll(async () => {
    await backing?.stop();
  });

  async function writer(limits = {}): Promise<S3Store> {
    await db.pool.query('DELETE FROM arkvory_storage');
    await backing.reset();
    return (await backing.open('writer', db.pool, { limits })) as S3Store;
  }

  it('ranges of 1 MiB and more are read over a socket of their own (byte-exact, slow reader, several ranges), shorter ones and answers other than 206 through the pool', async () => {
    const store = await writer();
    const catalog = createCatalog(db.pool);
    const bytes = randomBytes(3 * MiB + 5);
    const hex = sha256(bytes);
    await publishArtifact(
      { store, catalog },
      {
        key: key('ranged'),
        body: chunked(bytes),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e9, expectedLength: bytes.length, expectedSha256: hex },
      },
    );
    const pooled = (await backing.open('reader', db.pool, { socketReads: false })) as S3Store;
    /** Reads `ranges` as stream.ts does (read() into one reused 128 KiB buffer), pausing when asked. */
    const readRanges = async (s: S3Store, ranges: Array<{ start: number; end: number }>, pauseMs = 0) => {
      const reader = await s.openBlob(hex, ranges);
      // Socket streams read into a reused buffer: their reader copies out (read()), never lends chunks.
      expect(reader.chunks === undefined).toBe(s === store);
      const buffer = Buffer.alloc(128 * 1024);
      const out: Buffer[] = [];
      try {
        for (const { start, end } of ranges) {
          for (let position = start; position <= end; ) {
            const { bytesRead } = await reader.read(buffer, 0, Math.min(buffer.length, end - position + 1), position);
            expect(bytesRead).toBeGreaterThan(0);
            out.push(Buffer.from(buffer.subarray(0, bytesRead)));
            position += bytesRead;
            if (pauseMs) await new Promise((r) => setTimeout(r, pauseMs));
          }
        }
      } finally {
        await reader.close();
      }
      return Buffer.concat(out);
    };
    const whole = [{ start: 0, end: bytes.length - 1 }];
    const inner = [{ start: MiB + 7, end: 2 * MiB + 9 }];
    const several = [
      { start: 3, end: 4098 },
      { start: MiB, end: 3 * MiB + 4 },
    ];
    try {
      for (const ranges of [whole, inner, several]) {
        const expected = Buffer.concat(ranges.map((r) => bytes.subarray(r.start, r.end + 1)));
        expect(sha256(await readRanges(store, ranges))).toBe(sha256(expected));
        expect(sha256(await readRanges(pooled, ranges))).toBe(sha256(expected));
      }
      // 3 large ranges on the socket; the 4 KiB one through the pool.
      expect(store.reads).toEqual({ socket: 3, pool: 1 });
      expect(pooled.reads.socket).toBe(0);
      // A reader that stops between chunks: the socket pauses and resumes, the bytes stay exact.
      expect(sha256(await readRanges(store, inner, 2))).toBe(sha256(bytes.subarray(MiB + 7, 2 * MiB + 10)));
      // A missing blob answers 404: the socket path leaves the answer to the pool, which maps it.
      const missing = 'ab'.repeat(32);
      await expect(store.openBlob(missing, whole)).rejects.toMatchObject({ code: 'not_found' });
      expect(store.reads).toEqual({ socket: 4, pool: 2 });
    } finally {
      await pooled.close();
    }
  });

  it('a blob replaced on the server between two ranges of one read is upstream_unreachable, never the other bytes', async () => {
    const store = await writer();
    const pooled = (await backing.open('reader', db.pool, { socketReads: false })) as S3Store;
    try {
      const bytes = randomBytes(3 * MiB);
      const hex = sha256(bytes);
      const staged = await store.stage(chunked(bytes), { maxBytes: 1e9, expectedLength: bytes.length });
      await staged.commit();
      await staged.discard();
      // A later range of 1 MiB and more goes over a socket of its own (the store); the pool's reads too.
      const ranges = [
        { start: 0, end: 99 },
        { start: MiB, end: 2 * MiB },
      ];
      const buffer = Buffer.alloc(128 * 1024);
      const readRange = async (reader: Awaited<ReturnType<S3Store['openBlob']>>, index: number) => {
        const { start, end } = ranges[index]!;
        for (let position = start; position <= end; ) {
          const { bytesRead } = await reader.read(buffer, 0, Math.min(buffer.length, end - position + 1), position);
          if (bytesRead === 0) throw new Error(`ended at ${position}`);
          position += bytesRead;
        }
      };
      for (const s of [store, pooled]) {
        for (const size of [bytes.length + 1, bytes.length]) {
          for (const opened of [() => s.openBlob(hex, ranges), () => s.openBlob(hex)]) {
            await s3Probe(server).write(blobName(hex), bytes);
            const reader = await opened();
            try {
              await readRange(reader, 0);
              // Replaced on the server (by hand, a restore): other bytes, of another size or the same.
              await s3Probe(server).write(blobName(hex), randomBytes(size));
              await expect(readRange(reader, 1)).rejects.toMatchObject({
                code: 'upstream_unreachable',
                message: expect.stringContaining('changed'),
              });
            } finally {
              await reader.close();
            }
          }
        }
      }
      expect(store.reads.socket).toBeGreaterThan(0);

      // Left as they are, the ranges of a blob the server assembled from parts (its ETag `…-N`) read
      // through, If-Match and all: uploaded in parts, then copied into place in parts.
      const partsStore = await writer({ partBytes: 5 * MiB, copyBytes: 5 * MiB });
      try {
        const large = randomBytes(11 * MiB);
        const published = await partsStore.stage(chunked(large), { maxBytes: 1e9 });
        await published.commit();
        await published.discard();
        expect(partsStore.commits['multipart-copy']).toBe(1);
        const spread = [
          { start: 5, end: 104 },
          { start: 6 * MiB, end: 8 * MiB },
        ];
        for (const s of [partsStore, pooled]) {
          for (const opened of [() => s.openBlob(sha256(large), spread), () => s.openBlob(sha256(large))]) {
            const reader = await opened();
            try {
              const got: Buffer[] = [];
              for (const { start, end } of spread) {
                for (let position = start; position <= end; ) {
                  const n = Math.min(buffer.length, end - position + 1);
                  const { bytesRead } = await reader.read(buffer, 0, n, position);
                  expect(bytesRead).toBeGreaterThan(0);
                  got.push(Buffer.from(buffer.subarray(0, bytesRead)));
                  position += bytesRead;
                }
              }
              const expected = Buffer.concat(spread.map((r) => large.subarray(r.start, r.end + 1)));
              expect(sha256(Buffer.concat(got))).toBe(sha256(expected));
            } finally {
              await reader.close();
            }
          }
        }
      } finally {
        await partsStore.close();
      }
    } finally {
      await pooled.close();
    }
  });

  it('a body of unknown length goes up as a multipart upload, and is copied into blobs/ with multipart copy above the copy limit', async () => {
    const store = await writer({ partBytes: 5 * MiB, copyBytes: 5 * MiB });
    const catalog = createCatalog(db.pool);
    const bytes = randomBytes(12 * MiB + 123);
    const result = await publishArtifact(
      { store, catalog },
      { key: key('big'), body: chunked(bytes), contentType: 'a/b', publishedBy: null, stage: { maxBytes: 1e9 } },
    );
    expect(result.entry).toMatchObject({ sha256: sha256(bytes), sizeBytes: bytes.length });
    expect(store.commits).toMatchObject({ 'multipart-copy': 1, copy: 0, streamed: 0 });
    // Compared by digest: a deep equality over 12 MiB takes minutes on a loaded machine.
    expect(sha256((await s3Probe(server).read(blobName(sha256(bytes))))!)).toBe(sha256(bytes));
    expect(await listKeys(server, 'tmp/')).toEqual([]);
    // Published again under another name: the blob is there already, nothing is copied.
    await publishArtifact(
      { store, catalog },
      { key: key('big-2'), body: chunked(bytes), contentType: 'a/b', publishedBy: null, stage: { maxBytes: 1e9 } },
    );
    expect(store.commits).toMatchObject({ 'multipart-copy': 1, existing: 1 });
    const uploads = await store.tree.incompleteUploads!();
    expect(uploads).toEqual([]);
  });

  it('single PUTs go over a socket of their own (byte-exact, as through undici); a body failing its checks completes no object; a refusal before the body is mapped', async () => {
    const store = await writer();
    const pooled = (await backing.open('writer', db.pool, { socketWrites: false })) as S3Store;
    const catalog = createCatalog(db.pool);
    const publish = (s: S3Store, name: string, body: AsyncIterable<Buffer>, expectedLength: number, digest: string) =>
      publishArtifact(
        { store: s, catalog },
        {
          key: key(name),
          body,
          contentType: 'a/b',
          publishedBy: null,
          stage: { maxBytes: 1e9, expectedLength, expectedSha256: digest },
        },
      );
    /** `bytes` in chunks of 64 KiB (as the request parser hands them over), pausing now and then. */
    async function* slow(bytes: Buffer) {
      for (let i = 0; i < bytes.length; i += 64 * 1024) {
        if (i % MiB === 0) await new Promise((r) => setTimeout(r, 5));
        yield Buffer.from(bytes.subarray(i, i + 64 * 1024));
      }
    }
    try {
      for (const s of [store, pooled]) {
        for (const size of [3 * MiB + 5, 0, 1]) {
          const bytes = randomBytes(size);
          await publish(s, `put-${s === store ? 'socket' : 'pool'}-${size}`, slow(bytes), size, sha256(bytes));
          expect(sha256((await s3Probe(server).read(blobName(sha256(bytes))))!)).toBe(sha256(bytes));
        }
      }
      expect(store.puts).toEqual({ socket: 3, pool: 0 });
      expect(pooled.puts).toEqual({ socket: 0, pool: 3 });

      // Bodies that fail their checks: refused, and no object under the claimed blob name nor in tmp/.
      const claimed = randomBytes(2 * MiB);
      const other = randomBytes(2 * MiB);
      async function* broken() {
        yield* slow(other.subarray(0, MiB));
        throw Object.assign(new Error('client went away'), { code: 'ECONNRESET' });
      }
      for (const [body, length, error] of [
        [slow(other), other.length, { code: 'invalid_request' }],
        [slow(claimed.subarray(0, MiB)), claimed.length, { code: 'invalid_request' }],
        [slow(claimed), claimed.length - 1, { code: 'invalid_request' }],
        [broken(), other.length, { message: 'client went away' }],
      ] as const) {
        await expect(publish(store, 'refused', body, length, sha256(claimed))).rejects.toMatchObject(error);
        expect(await s3Probe(server).read(blobName(sha256(claimed)))).toBeUndefined();
      }
      expect(await listKeys(server, 'tmp/')).toEqual([]);
      expect(await catalog.get(key('refused'))).toBeUndefined();

      // Wrong credentials: the server refuses before taking the body; the answer is read and mapped.
      const wrong = createS3Client({
        endpoint: server.endpoint,
        region: server.region,
        bucket: backing.s3!.bucket,
        credentials: { accessKeyId: server.accessKeyId, secretAccessKey: 'wrong-secret-key' },
        connectTimeoutMs: 2000,
        timeoutMs: 30_000,
      });
      try {
        const endpoint = new URL(server.endpoint);
        await expect(
          uploadObject(wrong, 'refused-put', slow(other), S3_DEFAULT_LIMITS, {
            expectedLength: other.length,
            timeoutMs: 30_000,
            socket: { host: endpoint.hostname, port: Number(endpoint.port), connectTimeoutMs: 2000, timeoutMs: 30_000 },
          }),
        ).rejects.toMatchObject({
          code: 'upstream_unreachable',
          message: expect.stringMatching(/refused our credentials/),
        });
      } finally {
        await wrong.close();
      }
      expect(await s3Probe(server).read('refused-put')).toBeUndefined();
    } finally {
      await pooled.close();
    }
  });

  it('a declared sha256 for a free key stages straight under the blob name (no copy); other bytes claiming it leave the blob intact', async () => {
    const store = await writer();
    const catalog = createCatalog(db.pool);
    const bytes = randomBytes(3 * MiB);
    await publishArtifact(
      { store, catalog },
      {
        key: key('direct'),
        body: chunked(bytes),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e9, expectedLength: bytes.length, expectedSha256: sha256(bytes) },
      },
    );
    expect(store.commits).toMatchObject({ direct: 1, copy: 0 });
    expect(await listKeys(server, 'tmp/')).toEqual([]);
    expect(sha256((await s3Probe(server).read(blobName(sha256(bytes))))!)).toBe(sha256(bytes));
    // Other bytes claiming that digest (with and without a length): refused, the published blob intact.
    const other = randomBytes(3 * MiB);
    for (const expectedLength of [other.length, undefined]) {
      await expect(
        publishArtifact(
          { store, catalog },
          {
            key: key('liar'),
            body: chunked(other),
            contentType: 'a/b',
            publishedBy: null,
            stage: { maxBytes: 1e9, expectedLength, expectedSha256: sha256(bytes) },
          },
        ),
      ).rejects.toMatchObject({ code: 'invalid_request' });
    }
    expect(sha256((await s3Probe(server).read(blobName(sha256(bytes))))!)).toBe(sha256(bytes));
    expect(await catalog.get(key('liar'))).toBeUndefined();
    expect(await store.tree.incompleteUploads!()).toEqual([]);
    // The same key again with the same digest: the key is taken, so the temporary path (deleted after).
    await publishArtifact(
      { store, catalog },
      {
        key: key('direct'),
        body: chunked(bytes),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e9, expectedSha256: sha256(bytes) },
      },
    );
    expect(store.commits).toMatchObject({ direct: 1 });
    expect(await listKeys(server, 'tmp/')).toEqual([]);
  });

  it("a zero-length body claiming another blob's sha256 plants nothing under that name (its end delayed, or an empty chunk read)", async () => {
    const store = await writer();
    const pooled = (await backing.open('writer', db.pool, { socketWrites: false })) as S3Store;
    const claimed = sha256(Buffer.from('the real release, published later by someone else'));
    const later = (yieldEmpty: boolean) =>
      (async function* () {
        await new Promise((r) => setTimeout(r, 300));
        if (yieldEmpty) yield Buffer.alloc(0);
      })();
    // The transfer itself, straight to a blob name (as a direct stage would): nothing there after.
    const client = server.client();
    const endpoint = new URL(server.endpoint);
    const socket = { host: endpoint.hostname, port: Number(endpoint.port), connectTimeoutMs: 2000, timeoutMs: 30_000 };
    for (const via of [socket, undefined]) {
      for (const yieldEmpty of [false, true]) {
        const upload = checkedUpload(later(yieldEmpty), { maxBytes: 1e9, expectedLength: 0, expectedSha256: claimed });
        await expect(
          uploadObject(client, blobName(claimed), upload.chunks, S3_DEFAULT_LIMITS, {
            expectedLength: 0,
            timeoutMs: 30_000,
            socket: via,
          }),
        ).rejects.toMatchObject({ code: 'invalid_request' });
        expect(await client.head(blobName(claimed))).toBeUndefined();
      }
    }
    try {
      for (const s of [store, pooled]) {
        for (const yieldEmpty of [false, true]) {
          await expect(
            s.stage(later(yieldEmpty), {
              maxBytes: 1e9,
              expectedLength: 0,
              expectedSha256: claimed,
              keyWasFree: true,
            }),
          ).rejects.toMatchObject({ code: 'invalid_request' });
          expect(await s.hasBlob(claimed)).toBe(false);
        }
      }
      expect(await listKeys(server, 'tmp/')).toEqual([]);
      // A legitimate empty body (the sha256 of nothing), declared or not, stages and reads back empty.
      const empty = sha256(Buffer.alloc(0));
      for (const s of [store, pooled]) {
        for (const stage of [{ expectedSha256: empty, keyWasFree: true }, {}]) {
          const staged = await s.stage(later(true), { maxBytes: 1e9, expectedLength: 0, ...stage });
          expect(staged).toMatchObject({ sha256: empty, sizeBytes: 0 });
          await staged.commit();
          expect(await s3Probe(server).read(blobName(empty))).toEqual(Buffer.alloc(0));
        }
      }
    } finally {
      await pooled.close();
    }
  });

  it('a wrong-size object already under a blob name is not taken as that blob: a verified publish replaces it', async () => {
    const store = await writer();
    const catalog = createCatalog(db.pool);
    const bytes = randomBytes(MiB + 3);
    const hex = sha256(bytes);
    for (const [name, planted, stage] of [
      ['no-digest', Buffer.alloc(0), { expectedLength: bytes.length }],
      ['chunked', bytes.subarray(0, 10), {}],
    ] as const) {
      await s3Probe(server).write(blobName(hex), planted);
      const published = await publishArtifact(
        { store, catalog },
        {
          key: key(name),
          body: chunked(bytes),
          contentType: 'a/b',
          publishedBy: null,
          stage: { maxBytes: 1e9, ...stage },
        },
      );
      expect(published.entry).toMatchObject({ sha256: hex, sizeBytes: bytes.length });
      expect(sha256((await s3Probe(server).read(blobName(hex)))!)).toBe(hex);
      const reader = await store.openBlob(hex, [{ start: 0, end: bytes.length - 1 }]);
      expect(reader.sizeBytes).toBe(bytes.length);
      await reader.close();
    }
    expect(store.commits).toMatchObject({ existing: 0, copy: 2 });
    // The right object there: taken as it is, nothing copied.
    await publishArtifact(
      { store, catalog },
      { key: key('again'), body: chunked(bytes), contentType: 'a/b', publishedBy: null, stage: { maxBytes: 1e9 } },
    );
    expect(store.commits).toMatchObject({ existing: 1, copy: 2 });
    expect(await listKeys(server, 'tmp/')).toEqual([]);
  });

  it('an object of the same size but other bytes under a blob name is not taken as that blob: a verified publish replaces it', async () => {
    const store = await writer();
    const catalog = createCatalog(db.pool);
    const bytes = randomBytes(MiB + 3);
    const hex = sha256(bytes);
    // Damaged on the server, or written there by hand: the same length, other bytes.
    await s3Probe(server).write(blobName(hex), randomBytes(bytes.length));
    const published = await publishArtifact(
      { store, catalog },
      {
        key: key('same-size'),
        body: chunked(bytes),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e9, expectedLength: bytes.length },
      },
    );
    expect(published.entry).toMatchObject({ sha256: hex, sizeBytes: bytes.length });
    expect(store.commits).toMatchObject({ existing: 0, copy: 1 });
    expect(sha256((await s3Probe(server).read(blobName(hex)))!)).toBe(hex);
    // The blob now there is the one uploaded (the server's ETag of both): taken as it is.
    await publishArtifact(
      { store, catalog },
      {
        key: key('same-size-2'),
        body: chunked(bytes),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e9, expectedLength: bytes.length },
      },
    );
    expect(store.commits).toMatchObject({ existing: 1, copy: 1 });
  });

  it('a copy the server gives another ETag than its multipart source (MinIO) is read back before it is published', async () => {
    const store = await writer({ partBytes: 5 * MiB });
    const catalog = createCatalog(db.pool);
    const bytes = randomBytes(6 * MiB + 1);
    const published = await publishArtifact(
      { store, catalog },
      { key: key('read-back'), body: chunked(bytes), contentType: 'a/b', publishedBy: null, stage: { maxBytes: 1e9 } },
    );
    expect(published.entry).toMatchObject({ sha256: sha256(bytes), sizeBytes: bytes.length });
    // SeaweedFS keeps the multipart ETag on CopyObject; MinIO computes the copy's MD5.
    expect(store.commits).toMatchObject({ copy: 1, 'read-back': kind === 'minio' ? 1 : 0 });
    expect(sha256((await s3Probe(server).read(blobName(sha256(bytes))))!)).toBe(sha256(bytes));
  });

  it('a temporary replaced between its upload and its commit is not copied under the blob name', async () => {
    const store = await writer();
    const bytes = randomBytes(MiB + 3);
    const staged = await store.stage(chunked(bytes), { maxBytes: 1e9, expectedLength: bytes.length });
    try {
      const [temporary] = await listKeys(server, 'tmp/');
      // Another writer of the same name, or the server's own damage: same length, other bytes.
      await s3Probe(server).write(temporary!, randomBytes(bytes.length));
      await expect(staged.commit()).rejects.toMatchObject({ code: 'stored_bytes_mismatch' });
      expect(await s3Probe(server).read(blobName(staged.sha256))).toBeUndefined();
    } finally {
      await staged.discard();
    }
  });

  /**
   * A real nginx in front of the server: it passes everything through, but answers a request whose
   * "method|query|x-amz-copy-source|path" matches `match` (a regex) 200 with `body` and no ETag,
   * once it has read the request's whole body.
   */
  async function answeringFront(match: string, body: string) {
    const dir = await makeTempDir('arkvory-no-etag-proxy-');
    const port = await freeLoopbackPort();
    const conf = await writeNginxConf(dir, {
      http: `map "$request_method|$args|$http_x_amz_copy_source|$uri" $answer_200 {
  default 0;
  "~${match}" 1;
}
server {
  listen 127.0.0.1:${port};
  client_max_body_size 0;
  location / {
    if ($answer_200) { rewrite ^ /answer-200 last; }
    proxy_pass http://127.0.0.1:${server.port};
    proxy_http_version 1.1;
    proxy_set_header Host $http_host;
  }
  location = /answer-200 { proxy_pass http://127.0.0.1:${port}/bare-200; }
  location = /bare-200 { ${body === '' ? 'return 200;' : `default_type application/xml; return 200 '${body}';`} }
}`,
    });
    const front = startProcess('/usr/sbin/nginx', ['-p', dir, '-c', conf], { name: 'nginx (200, no ETag)' });
    try {
      await waitForHttp(`http://127.0.0.1:${port}/`, { process: front, isReady: (status) => status < 500 });
    } catch (err) {
      await front.stop();
      throw err;
    }
    const endpoint = `http://127.0.0.1:${port}`;
    /** A writer store on the whole bucket, reached through the front. */
    const store = (socketWrites?: boolean) =>
      openS3Store({
        location: { bucket: server.bucket, prefix: '' },
        endpoint,
        region: server.region,
        credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
        connectTimeoutMs: 2000,
        timeoutMs: 30_000,
        role: 'writer',
        pool: db.pool,
        ...(socketWrites === undefined ? {} : { socketWrites }),
      });
    return { endpoint, store, stop: () => front.stop() };
  }

  it('a PUT answered with success but without an ETag (a proxy answering 200 to anything) is a failed write: nothing staged, nothing published', async () => {
    await db.pool.query('DELETE FROM arkvory_storage');
    await backing.reset();
    // An nginx in front of the server passes everything through, but answers a PUT of an object under
    // blobs/ or tmp/ (no copy, no part) 200 without an ETag once it has read the whole body.
    const front = await answeringFront(`^PUT\\|\\|\\|/${server.bucket}/(blobs|tmp)/`, '');
    try {
      const bytes = randomBytes(MiB + 5);
      for (const socketWrites of [true, false]) {
        const store = await front.store(socketWrites);
        try {
          // Straight under the blob name (a declared sha256, a free key; one PUT, or a body of no
          // length, a PUT too at this size), and to tmp/.
          for (const stage of [
            { expectedLength: bytes.length, expectedSha256: sha256(bytes), keyWasFree: true },
            { expectedSha256: sha256(bytes), keyWasFree: true },
            { expectedLength: bytes.length },
          ]) {
            await expect(
              store.stage(chunked(bytes), { maxBytes: 1e9, ...stage }),
              JSON.stringify(stage),
            ).rejects.toMatchObject({
              code: 'upstream_unreachable',
              message: expect.stringContaining('without an ETag'),
            });
          }
          const catalog = createCatalog(db.pool);
          await expect(
            publishArtifact(
              { store, catalog },
              {
                key: key('no-etag'),
                body: chunked(bytes),
                contentType: 'a/b',
                publishedBy: null,
                stage: { maxBytes: 1e9, expectedLength: bytes.length, expectedSha256: sha256(bytes) },
              },
            ),
          ).rejects.toMatchObject({ code: 'upstream_unreachable' });
          expect(await catalog.get(key('no-etag'))).toBeUndefined();
          expect(await s3Probe(server).read(blobName(sha256(bytes)))).toBeUndefined();
        } finally {
          await store.close();
        }
      }
    } finally {
      await front.stop();
    }
  });

  it('a body that fails after some parts leaves no object and no open multipart upload', async () => {
    const store = await writer({ partBytes: 5 * MiB });
    async function* broken() {
      yield* chunked(randomBytes(11 * MiB));
      throw Object.assign(new Error('client went away'), { code: 'ECONNRESET' });
    }
    await expect(
      publishArtifact(
        { store, catalog: createCatalog(db.pool) },
        { key: key('broken'), body: broken(), contentType: 'a/b', publishedBy: null, stage: { maxBytes: 1e9 } },
      ),
    ).rejects.toThrow('client went away');
    expect(await listKeys(server)).toEqual(['storage-id']);
    expect(await store.tree.incompleteUploads!()).toEqual([]);
  });

  /** Parts written through the store's PartStore, as the multipart routes do; the assembly list for them. */
  async function writeParts(store: S3Store, session: string, bodies: Buffer[]) {
    const listed = [];
    for (const [i, body] of bodies.entries()) {
      const fileName = `${String(i + 1).padStart(5, '0')}-p.part`;
      await store.parts.write(session, fileName, Readable.from([body]));
      listed.push({ partNumber: i + 1, fileName, sizeBytes: body.length, sha256: sha256(body) });
    }
    return listed;
  }
  const openUploads = async () => {
    const open: string[] = [];
    for await (const u of server.client().listMultipartUploads('')) open.push(u.key);
    return open;
  };

  it('multipart sessions are assembled server-side (UploadPartCopy, a part above the copy limit in ranges); parts re-checked, whole sha256 computed', async () => {
    const store = await writer({ copyBytes: 6 * MiB });
    const catalog = createCatalog(db.pool);
    const session = '00000000-0000-4000-8000-0000000000a1';
    const bodies = [randomBytes(11 * MiB), randomBytes(5 * MiB), randomBytes(MiB + 7)];
    const whole = Buffer.concat(bodies);
    const parts = await writeParts(store, session, bodies);
    // Without a declared sha256: staged under tmp/ by server-side copies, then copied to its blob name.
    const result = await publishArtifact(
      { store, catalog },
      {
        key: key('assembled'),
        body: chunked(Buffer.alloc(0)),
        stager: (options) => store.assembleParts!(session, parts, options),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e9, expectedLength: whole.length },
      },
    );
    expect(result.entry).toMatchObject({ sha256: sha256(whole), sizeBytes: whole.length });
    expect(store.assemblies).toMatchObject({ 'server-copy': 1, streamed: 0 });
    // The tmp/ object (17 MiB, above the lowered 6 MiB copy limit) went to its blob name by multipart copy.
    expect(store.commits).toMatchObject({ 'multipart-copy': 1, copy: 0 });
    expect(store.uploadStats().committed).toBe(1);
    expect(sha256((await s3Probe(server).read(blobName(sha256(whole))))!)).toBe(sha256(whole));
    expect(await listKeys(server, 'tmp/')).toEqual([]);
    expect(await openUploads()).toEqual([]);

    // A declared sha256 for a free key: assembled straight under its blob name.
    const again = await writeParts(store, session, [bodies[1]!, bodies[2]!]);
    const small = Buffer.concat([bodies[1]!, bodies[2]!]);
    await publishArtifact(
      { store, catalog },
      {
        key: key('assembled-direct'),
        body: chunked(Buffer.alloc(0)),
        stager: (options) => store.assembleParts!(session, again, options),
        contentType: 'a/b',
        publishedBy: null,
        stage: { maxBytes: 1e9, expectedLength: small.length, expectedSha256: sha256(small) },
      },
    );
    expect(store.assemblies).toMatchObject({ 'server-copy': 2, streamed: 0 });
    expect(store.commits).toMatchObject({ 'multipart-copy': 1, direct: 1 });
    expect(sha256((await s3Probe(server).read(blobName(sha256(small))))!)).toBe(sha256(small));
  });

  it('assembly falls back to streaming when a part other than the last is below 5 MiB; a changed part or a wrong whole sha256 publishes nothing', async () => {
    const store = await writer();
    const session = '00000000-0000-4000-8000-0000000000a2';
    const bodies = [randomBytes(4 * MiB), randomBytes(6 * MiB)];
    const parts = await writeParts(store, session, bodies);
    expect(await store.assembleParts!(session, parts, { maxBytes: 1e9 })).toBeUndefined();
    expect(store.assemblies).toMatchObject({ 'server-copy': 0, streamed: 1 });

    // Large enough to copy, but a part changed on the store after it was received: nothing is left.
    const big = [randomBytes(5 * MiB), randomBytes(5 * MiB)];
    const listed = await writeParts(store, session, big);
    await s3Probe(server).write(`uploads/${session}/${listed[1]!.fileName}`, randomBytes(5 * MiB));
    await expect(store.assembleParts!(session, listed, { maxBytes: 1e9 })).rejects.toMatchObject({
      code: 'part_mismatch',
    });
    // A part grown on the store is refused at its first chunk past its recorded size, not read on.
    const grown = await writeParts(store, session, big);
    await s3Probe(server).write(`uploads/${session}/${grown[0]!.fileName}`, randomBytes(6 * MiB));
    await expect(store.assembleParts!(session, grown, { maxBytes: 1e9 })).rejects.toMatchObject({
      code: 'part_mismatch',
      message: expect.stringContaining('part 1 is larger on the store than the 5242880 bytes'),
    });
    // The whole's sha256 differs from the session's: refused before the object is completed.
    const fresh = await writeParts(store, session, big);
    await expect(
      store.assembleParts!(session, fresh, {
        maxBytes: 1e9,
        expectedSha256: sha256(Buffer.from('other')),
        keyWasFree: true,
      }),
    ).rejects.toMatchObject({ code: 'invalid_request' });
    expect(await listKeys(server, 'tmp/')).toEqual([]);
    expect(await listKeys(server, 'blobs/')).toEqual([]);
    expect(await openUploads()).toEqual([]);
  });

  it('an assembly completed with a CompleteMultipartUploadResult without an ETag is a failed write: the upload aborted, a same-size object under the blob name not published', async () => {
    const store = await writer();
    const session = '00000000-0000-4000-8000-0000000000a7';
    const bodies = [randomBytes(5 * MiB), randomBytes(MiB + 3)];
    const whole = Buffer.concat(bodies);
    const parts = await writeParts(store, session, bodies);
    await store.close();
    // Damaged bytes of the right size already under the blob name: only the completion's ETag says
    // the server assembled anything (the HEAD after it sees the right size either way).
    await s3Probe(server).write(blobName(sha256(whole)), randomBytes(whole.length));
    // The nginx answers the completion of an upload under blobs/ itself: a result, no ETag.
    const front = await answeringFront(
      `^POST\\|uploadId=[^|]*\\|\\|/${server.bucket}/blobs/`,
      `<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult><Bucket>${server.bucket}</Bucket><Key>${blobName(sha256(whole))}</Key></CompleteMultipartUploadResult>`,
    );
    const fronted = await front.store();
    try {
      const catalog = createCatalog(db.pool);
      await expect(
        publishArtifact(
          { store: fronted, catalog },
          {
            key: key('assembled-no-etag'),
            body: chunked(Buffer.alloc(0)),
            stager: (options) => fronted.assembleParts!(session, parts, options),
            contentType: 'a/b',
            publishedBy: null,
            stage: { maxBytes: 1e9, expectedLength: whole.length, expectedSha256: sha256(whole) },
          },
        ),
      ).rejects.toMatchObject({ code: 'upstream_unreachable', message: expect.stringContaining('without an ETag') });
      expect(fronted.assemblies).toMatchObject({ 'server-copy': 0, streamed: 0 });
      expect(await catalog.get(key('assembled-no-etag'))).toBeUndefined();
      expect(await openUploads()).toEqual([]);
    } finally {
      await fronted.close();
      await front.stop();
    }
  });

  it('a part copy that fails while the next part is read fails the assembly, and never goes unhandled (which ends the process)', async () => {
    const store = await writer();
    const session = '00000000-0000-4000-8000-0000000000a4';
    const listed = await writeParts(store, session, [
      ...Array.from({ length: 6 }, () => randomBytes(5 * MiB)),
      randomBytes(MiB),
    ]);
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    try {
      // The assembly's multipart upload ends under it (another process aborting it): a copy into it
      // fails while the assembly reads the part after the one it copies.
      const assembled = store.assembleParts!(session, listed, { maxBytes: 1e9 });
      let outcome: 'pending' | 'settled' = 'pending';
      assembled.then(
        () => (outcome = 'settled'),
        () => (outcome = 'settled'),
      );
      let aborted = 0;
      while (outcome === 'pending' && aborted === 0) {
        for await (const u of server.client().listMultipartUploads('')) {
          await abortMultipart(server.client(), u.key, u.uploadId);
          aborted++;
        }
      }
      expect(aborted).toBe(1);
      await expect(assembled).rejects.toBeInstanceOf(Error);
      // A turn of the event loop for a rejection left without a handler to be reported.
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      process.off('unhandledRejection', record);
    }
    expect(unhandled).toEqual([]);
    expect(await listKeys(server, 'tmp/')).toEqual([]);
    expect(await openUploads()).toEqual([]);
  });

  it('UploadPartCopy honours x-amz-copy-source-if-match (a part replaced between its read and its copy is refused)', async () => {
    const store = await writer();
    const client = server.client();
    await store.parts.write('00000000-0000-4000-8000-0000000000a3', 'x.part', Readable.from([randomBytes(5 * MiB)]));
    const from = 'uploads/00000000-0000-4000-8000-0000000000a3/x.part';
    const head = await client.request({ method: 'HEAD', key: from });
    await head.body.dump();
    const uploadId = await createMultipart(client, 'tmp/if-match.upload');
    try {
      await expect(
        uploadPartCopy(
          client,
          from,
          'tmp/if-match.upload',
          uploadId,
          1,
          { start: 0, end: 99 },
          '"0123456789abcdef0123456789abcdef"',
        ),
      ).rejects.toMatchObject({ code: 'part_mismatch' });
      expect(
        await uploadPartCopy(
          client,
          from,
          'tmp/if-match.upload',
          uploadId,
          1,
          { start: 0, end: 99 },
          String(head.headers.etag),
        ),
      ).toMatch(/\w/);
    } finally {
      await abortMultipart(client, 'tmp/if-match.upload', uploadId);
    }
  });

  it('scrub moves to quarantine/ only the object it read: one replaced before the copy, after it, or (with conditional DELETE) after the last HEAD stays under its name, unjudged (stored_bytes_mismatch)', async () => {
    await writer();
    // The run's shared client on the bucket: not closed here.
    const raw = server.client();
    const good = randomBytes(20_000);
    const damaged = Buffer.from(good);
    damaged[7]! ^= 1;
    const hex = sha256(good);
    const name = blobName(hex);
    const put = (bytes: Buffer) => raw.expectOk({ method: 'PUT', key: name, body: bytes }, `PUT ${name}`);
    const held = async () =>
      sha256(Buffer.from(await (await raw.request({ method: 'GET', key: name })).body.arrayBuffer()));
    /** The store's tree over `client` (a real client, some of its calls followed by a replacement of the blob). */
    const treeOver = (client: typeof raw) =>
      s3Tree(
        {
          client,
          location: { bucket: raw.bucket, prefix: '' },
          limits: S3_DEFAULT_LIMITS,
          timeoutMs: 30_000,
          keyOf: (r) => r,
        },
        's3://test/',
      );
    /** A client that puts the good bytes back under the blob name once `after` has happened. */
    const replacing = (after: 'copy' | 'last-head') => {
      let heads = 0;
      return {
        ...raw,
        async request(r: Parameters<typeof raw.request>[0]) {
          const res = await raw.request(r);
          if (after === 'copy' && r.headers?.['x-amz-copy-source']) await put(good);
          return res;
        },
        async head(key: string) {
          const found = await raw.head(key);
          // moveObject HEADs the source twice: before the copy, and right before the delete.
          if (after === 'last-head' && key === name && ++heads === 2) await put(good);
          return found;
        },
      };
    };

    // Put back (from a backup) after scrub's read, before its move: nothing is copied.
    await put(damaged);
    const direct = treeOver(raw);
    const beforeMove: StoreTree = {
      ...direct,
      async move(from, to, expected) {
        await put(good);
        return direct.move(from, to, expected);
      },
    };
    for (const tree of [beforeMove, treeOver(replacing('copy'))]) {
      await put(damaged);
      const report = await scrubBlobs(tree, { nowMs: () => 1 });
      expect(report.corrupt).toEqual([]);
      expect(report.unjudged).toEqual([{ blob: hex, code: 'stored_bytes_mismatch', message: expect.any(String) }]);
      expect(await held()).toBe(hex);
      expect(await listKeys(server, 'quarantine/')).toEqual([]);
      // A rerun judges it again: healthy now.
      expect(await scrubBlobs(direct, { nowMs: () => 2 })).toMatchObject({ checked: 1, corrupt: [], unjudged: [] });
    }

    // Put back between the HEAD before the delete and the DELETE: SeaweedFS refuses the
    // conditional DELETE; MinIO ignores If-Match on DELETE, the window the docs name.
    await put(damaged);
    const report = await scrubBlobs(treeOver(replacing('last-head')), { nowMs: () => 3 });
    if (kind === 'seaweedfs') {
      expect(report.unjudged).toEqual([{ blob: hex, code: 'stored_bytes_mismatch', message: expect.any(String) }]);
      expect(await held()).toBe(hex);
      expect(await listKeys(server, 'quarantine/')).toEqual([]);
    } else {
      expect(report.corrupt).toEqual([
        { blob: hex, actualSha256: sha256(damaged), quarantinedAs: `quarantine/${hex}.3` },
      ]);
      expect(await raw.head(name)).toBeUndefined();
    }

    // Nothing changing meanwhile: the damaged object is quarantined and its name emptied.
    await raw.delete(`quarantine/${hex}.3`);
    await put(damaged);
    expect((await scrubBlobs(direct, { nowMs: () => 4 })).corrupt).toEqual([
      { blob: hex, actualSha256: sha256(damaged), quarantinedAs: `quarantine/${hex}.4` },
    ]);
    expect(await raw.head(name)).toBeUndefined();
    expect(await listKeys(server, 'quarantine/')).toEqual([`quarantine/${hex}.4`]);
  });

  it('gc aborts a multipart upload left open (a writer that died mid-upload)', async () => {
    const store = await writer();
    const client = server.client();
    const res = await client.request({ method: 'POST', key: 'tmp/abandoned.upload', query: { uploads: '' } });
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    expect((await store.tree.incompleteUploads!()).map((u) => u.name)).toEqual(['tmp/abandoned.upload']);
    const dry = await collectGarbage(store.tree, db.pool, { dryRun: true });
    expect(dry.incompleteUploads).toEqual(['tmp/abandoned.upload']);
    expect((await store.tree.incompleteUploads!()).length).toBe(1);
    const report = await collectGarbage(store.tree, db.pool, { dryRun: false });
    expect(report.incompleteUploads).toEqual(['tmp/abandoned.upload']);
    expect(await store.tree.incompleteUploads!()).toEqual([]);
  });

  it('identity: a prefix is its own store; a missing bucket, wrong credentials and a stopped server refuse with the fix', async () => {
    await writer();
    const env = server.env();
    const base = {
      endpoint: env.ARKVORY_S3_ENDPOINT!,
      region: server.region,
      credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
      pool: db.pool,
      connectTimeoutMs: 1000,
      timeoutMs: 5000,
    };
    const reader = await openS3Store({ ...base, location: { bucket: server.bucket, prefix: '' }, role: 'reader' });
    expect(reader.writable).toBe(false);
    await reader.close();
    // Another prefix of the same bucket is another (empty) store: refused, naming the variable.
    await expect(
      openS3Store({ ...base, location: { bucket: server.bucket, prefix: 'other/' }, role: 'writer' }),
    ).rejects.toMatchObject({ code: 'storage_mismatch', message: expect.stringContaining('ARKVORY_STORAGE_URL') });
    await expect(
      openS3Store({ ...base, location: { bucket: 'no-such-bucket', prefix: '' }, role: 'writer' }),
    ).rejects.toMatchObject({
      code: 'storage_mismatch',
      message: expect.stringMatching(/bucket "no-such-bucket" does not exist.*create it/),
    });
    await expect(
      openS3Store({
        ...base,
        credentials: { accessKeyId: server.accessKeyId, secretAccessKey: 'wrong-secret-key' },
        location: { bucket: server.bucket, prefix: '' },
        role: 'reader',
      }),
    ).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringContaining('AWS_SECRET_ACCESS_KEY'),
    });
    // A stopped server, as the store sees it: nothing listens on the endpoint's port (the run's
    // server is shared, so it is not stopped; chaos/s3-link.chaos.test.ts cuts a live link).
    await expect(
      openS3Store({
        ...base,
        endpoint: `http://127.0.0.1:${await freeLoopbackPort()}`,
        location: { bucket: server.bucket, prefix: '' },
        role: 'reader',
      }),
    ).rejects.toMatchObject({ code: 'upstream_unreachable' });
  });
});
