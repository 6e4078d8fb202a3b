/**
 * The S3 client reads answers whole only under their caps and within the storage timeout, against a
 * real nginx where the S3 server would be (test/support/misbehaving-store.ts): a listing page or an
 * error body of 64 MiB is 502 `upstream_unreachable` naming the cap, one trickled past the timeout
 * 504 `upstream_timeout`, and a socket PUT's trickled answer 504 too; each connection is closed at
 * once (nginx ends the request well short of the body).
 */
import { describe, expect, it } from 'vitest';
import {
  FOREIGN_KEY,
  HUGE_BYTES,
  SLOW_BYTES,
  storageFailureOf,
  useMisbehavingStore,
} from '../../test/support/misbehaving-store.ts';
import { STORAGE_ERRORS } from '../errors.ts';
import { BODY_CAPS } from '../streaming/bounded-body.ts';
import { createS3Client } from './s3-client.ts';
import { putOverSocket } from './s3-socket-write.ts';
import { S3_DEFAULT_LIMITS, uploadObject } from './s3-transfer.ts';
import { removeTree, s3Tree, type S3Bucket } from './s3-tree.ts';

const store = useMisbehavingStore();
const client = (bucket: string, timeoutMs: number) =>
  createS3Client({
    connectTimeoutMs: 5000,
    timeoutMs,
    endpoint: store.base,
    region: 'us-east-1',
    bucket,
    credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
  });

describe('S3 answers read whole (real nginx answering 64 MiB, or trickling)', () => {
  it('a listing page past its cap is 502 upstream_unreachable and its connection is closed', async () => {
    const s3 = client('bucket', 30_000);
    try {
      const err = await storageFailureOf(async () => {
        for await (const _ of s3.list('listing-prefix/')) void _;
      });
      expect(err.code).toBe('upstream_unreachable');
      expect(STORAGE_ERRORS.entries.upstream_unreachable.status).toBe(502);
      expect(err.message).toContain(`over ${BODY_CAPS.s3Page} bytes`);
      expect(await store.sentFor('listing-prefix')).toBeLessThan(HUGE_BYTES / 2);
    } finally {
      await s3.close();
    }
  });

  it('an error body past its cap is 502 upstream_unreachable naming the status, its connection closed', async () => {
    const s3 = client('bucket', 30_000);
    try {
      const err = await storageFailureOf(() => s3.delete('error-object'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('(503)');
      expect(err.message).toContain(`over ${BODY_CAPS.small} bytes`);
      expect(await store.sentFor('error-object')).toBeLessThan(HUGE_BYTES / 2);
    } finally {
      await s3.close();
    }
  });

  it('a listing or error body under its cap that does not end within the storage timeout is 504 upstream_timeout, its connection closed', async () => {
    const timeoutMs = 2000;
    const s3 = client('slow-bucket', timeoutMs);
    try {
      const listing = await storageFailureOf(async () => {
        for await (const _ of s3.list('slow-listing/')) void _;
      });
      expect(listing.code).toBe('upstream_timeout');
      expect(listing.message).toContain(`within ${timeoutMs} ms`);
      expect(await store.sentFor('slow-listing')).toBeLessThan(SLOW_BYTES);
      const error = await storageFailureOf(() => s3.delete('slow-error-object'));
      expect(error.code).toBe('upstream_timeout');
      expect(await store.sentFor('slow-error-object')).toBeLessThan(SLOW_BYTES);
    } finally {
      await s3.close();
    }
  });

  it("a socket PUT's answer not whole within the storage timeout of the last byte is 504 upstream_timeout", async () => {
    const timeoutMs = 2000;
    const { hostname, port } = new URL(store.base);
    const length = 1000;
    const err = await storageFailureOf(() =>
      putOverSocket(
        { host: hostname, port: Number(port), connectTimeoutMs: 5000, timeoutMs },
        { path: '/slow-put/object', headers: { host: `${hostname}:${port}`, 'content-length': String(length) } },
        (async function* () {
          yield Buffer.alloc(length, 1);
        })(),
        length,
        {},
      ),
    );
    expect(err.code).toBe('upstream_timeout');
    expect(err.message).toContain(`no answer within ${timeoutMs} ms of the last byte`);
    expect(await store.sentFor('/slow-put/object')).toBeLessThan(SLOW_BYTES);
  });
});

describe('S3 listings of a broken or hostile server (real nginx answering them)', () => {
  const bucketOf = (name: string): S3Bucket => ({
    client: client(name, 30_000),
    location: { bucket: name, prefix: '' },
    limits: { singlePutBytes: 1, partBytes: 1, copyBytes: 1 },
    timeoutMs: 30_000,
    keyOf: (relative) => relative,
  });

  it('a listing with a key outside the prefix asked is 502 upstream_unreachable, and nothing listed is deleted', async () => {
    const bucket = bucketOf('foreign-bucket');
    try {
      const err = await storageFailureOf(() => removeTree(bucket, 'tmp/own'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('outside that prefix');
      expect(err.message).toContain(FOREIGN_KEY);
      expect((await store.requests()).filter((line) => line.includes('"DELETE /foreign-bucket/'))).toEqual([]);
    } finally {
      await bucket.client.close();
    }
  });

  it('a listing whose next page token was given before is 502 upstream_unreachable, not an endless listing', async () => {
    const s3 = client('loop-bucket', 30_000);
    try {
      let listed = 0;
      const err = await storageFailureOf(async () => {
        for await (const _ of s3.list('p/')) if (++listed > 10) return;
      });
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('already given');
      expect(listed).toBe(2);
    } finally {
      await s3.close();
    }
  });

  it('a truncated listing page without a next token is 502 upstream_unreachable, not a listing that ends early', async () => {
    const s3 = client('notoken-bucket', 30_000);
    try {
      let listed = 0;
      const err = await storageFailureOf(async () => {
        for await (const _ of s3.list('p/')) listed++;
      });
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('no token for the next one');
      expect(listed).toBe(1);
    } finally {
      await s3.close();
    }
  });

  it('a listing answered 200 with a page that is not a listing (HTML) is 502 upstream_unreachable, not an empty listing', async () => {
    const s3 = client('portal-bucket', 30_000);
    try {
      const err = await storageFailureOf(async () => {
        for await (const _ of s3.list('p/')) void _;
      });
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('not a ListBucketResult');
      const uploads = await storageFailureOf(async () => {
        for await (const _ of s3.listMultipartUploads('')) void _;
      });
      expect(uploads.message).toContain('not a ListMultipartUploadsResult');
    } finally {
      await s3.close();
    }
  });

  it('a HEAD answered without a Content-Length is 502 upstream_unreachable, not an object of NaN bytes', async () => {
    const s3 = client('nolength-bucket', 30_000);
    try {
      const err = await storageFailureOf(() => s3.head('object'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('without a valid Content-Length');
    } finally {
      await s3.close();
    }
  });

  it('a CompleteMultipartUpload answered 200 without a CompleteMultipartUploadResult is 502, the upload aborted, not an object', async () => {
    // S3 sends a completion's 200 head at once and its result (or an <Error>) after keep-alive
    // whitespace: a body of whitespace alone completed nothing.
    const s3 = client('complete-bucket', 30_000);
    async function* body() {
      yield Buffer.alloc(10, 'a');
      yield Buffer.alloc(10, 'b');
    }
    try {
      const err = await storageFailureOf(() =>
        uploadObject(s3, 'object', body(), { ...S3_DEFAULT_LIMITS, partBytes: 10 }, { timeoutMs: 30_000 }),
      );
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('without a CompleteMultipartUploadResult');
      expect(await store.requests()).toContainEqual(
        expect.stringContaining('"DELETE /complete-bucket/object?uploadId=u '),
      );
    } finally {
      await s3.close();
    }
  });

  it('a listed name that is not one plain path segment (`..`) is 502 upstream_unreachable', async () => {
    const bucket = bucketOf('dotdot-bucket');
    try {
      const err = await storageFailureOf(() => s3Tree(bucket, 's3://dotdot-bucket/').list('tmp'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('not a plain name ("..")');
    } finally {
      await bucket.client.close();
    }
  });
});
