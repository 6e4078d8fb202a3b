import { describe, expect, it } from 'vitest';
import { isTransientS3Answer, type S3Client } from './s3-client.ts';
import {
  copyResultEtag,
  multipartPartBytes,
  planPartCopies,
  S3_MAX_MULTIPART_BYTES,
  S3_MAX_PART_BYTES,
  S3_MAX_PARTS,
  uploadObject,
} from './s3-transfer.ts';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

describe('planPartCopies (server-side assembly of multipart sessions)', () => {
  it('one UploadPartCopy per part when every part but the last has at least 5 MiB', () => {
    expect(planPartCopies([5 * MiB, 8 * MiB, 3], 5 * 1024 * MiB)).toEqual([
      { source: 0, start: 0, end: 5 * MiB - 1 },
      { source: 1, start: 0, end: 8 * MiB - 1 },
      { source: 2, start: 0, end: 2 },
    ]);
  });

  it('declines a part below 5 MiB that is not the last (S3 would refuse the completion)', () => {
    expect(planPartCopies([4 * MiB, 8 * MiB], 5 * 1024 * MiB)).toBeUndefined();
    expect(planPartCopies([8 * MiB, 4 * MiB], 5 * 1024 * MiB)).toHaveLength(2);
  });

  it('splits a part above the copy limit into equal ranges, and declines when they would be too small', () => {
    expect(planPartCopies([11 * MiB, MiB], 6 * MiB)).toEqual([
      { source: 0, start: 0, end: 5.5 * MiB - 1 },
      { source: 0, start: 5.5 * MiB, end: 11 * MiB - 1 },
      { source: 1, start: 0, end: MiB - 1 },
    ]);
    // 12 MiB in ranges of at most 5 MiB: three of 4 MiB, below the minimum.
    expect(planPartCopies([12 * MiB, MiB], 5 * MiB)).toBeUndefined();
  });

  it('skips empty parts; declines an empty whole and more than 10 000 ranges', () => {
    expect(planPartCopies([6 * MiB, 0, 1], 5 * 1024 * MiB)).toEqual([
      { source: 0, start: 0, end: 6 * MiB - 1 },
      { source: 2, start: 0, end: 0 },
    ]);
    expect(planPartCopies([0, 0], 5 * 1024 * MiB)).toBeUndefined();
    expect(planPartCopies(new Array(S3_MAX_PARTS + 1).fill(5 * MiB), 5 * 1024 * MiB)).toBeUndefined();
    expect(planPartCopies(new Array(S3_MAX_PARTS).fill(5 * MiB), 5 * 1024 * MiB)).toHaveLength(S3_MAX_PARTS);
  });
});

describe("multipartPartBytes (multipart uploads within S3's 10 000 parts)", () => {
  const parts = (length: number, part: number) => Math.ceil(length / part);

  it('keeps the configured part size up to 10 000 parts of it, and grows it just enough past that', () => {
    for (const length of [1, 10_000 * 8 * MiB - 1, 10_000 * 8 * MiB])
      expect(multipartPartBytes(8 * MiB, length, undefined)).toBe(8 * MiB);
    expect(multipartPartBytes(8 * MiB, 10_000 * 8 * MiB + 1, undefined)).toBe(8 * MiB + 1);
    for (const length of [
      10_000 * 8 * MiB + 1,
      10_000 * 8 * MiB + 9_999,
      100 * GiB,
      5 * 1024 * GiB,
      S3_MAX_MULTIPART_BYTES,
    ]) {
      const part = multipartPartBytes(8 * MiB, length, undefined)!;
      expect(parts(length, part), `${length}`).toBeLessThanOrEqual(S3_MAX_PARTS);
      expect(parts(length, part - 1), `${length}`).toBeGreaterThan(S3_MAX_PARTS);
      expect(part).toBeLessThanOrEqual(S3_MAX_PART_BYTES);
    }
  });

  it('sizes a body of unknown length by the upload limit; nothing past 10 000 parts of 5 GiB, nor without a bound', () => {
    expect(multipartPartBytes(8 * MiB, undefined, 10 * GiB)).toBe(8 * MiB);
    expect(multipartPartBytes(8 * MiB, undefined, 1024 * GiB)).toBe(Math.ceil((1024 * GiB) / S3_MAX_PARTS));
    // A known length wins over the limit.
    expect(multipartPartBytes(8 * MiB, 100 * MiB, 1024 * GiB)).toBe(8 * MiB);
    expect(multipartPartBytes(8 * MiB, S3_MAX_MULTIPART_BYTES, undefined)).toBe(S3_MAX_PART_BYTES);
    expect(multipartPartBytes(8 * MiB, S3_MAX_MULTIPART_BYTES + 1, undefined)).toBeUndefined();
    expect(multipartPartBytes(8 * MiB, undefined, S3_MAX_MULTIPART_BYTES + 1)).toBeUndefined();
    expect(multipartPartBytes(8 * MiB, undefined, undefined)).toBeUndefined();
  });
});

describe('uploadObject in parts (against a recording stand-in for the S3 client)', () => {
  /** Answers CreateMultipartUpload, UploadPart and CompleteMultipartUpload; records the part sizes. */
  function recorder() {
    const calls = { parts: [] as number[], completed: 0, aborted: 0, puts: 0 };
    const client = {
      bucket: 'b',
      async expectOk(r: { query?: Record<string, string>; body?: Buffer }) {
        if (r.query?.uploads !== undefined)
          return {
            text: '<InitiateMultipartUploadResult><UploadId>u</UploadId></InitiateMultipartUploadResult>',
            headers: {},
          };
        if (r.query?.partNumber !== undefined) {
          calls.parts.push(r.body!.length);
          return { text: '', headers: { etag: `"${r.query.partNumber}"` } };
        }
        if (r.query?.uploadId !== undefined) {
          calls.completed++;
          return {
            text: '<CompleteMultipartUploadResult><ETag>"c"</ETag></CompleteMultipartUploadResult>',
            headers: {},
          };
        }
        calls.puts++;
        return { text: '', headers: {} };
      },
      async request() {
        calls.aborted++;
        return { statusCode: 204, body: { dump: async () => {} } };
      },
    };
    return { calls, client: client as unknown as S3Client };
  }
  async function* bytes(n: number) {
    for (let i = 0; i < n; i++) yield Buffer.from('x');
  }
  const limits = { singlePutBytes: 0, partBytes: 1, copyBytes: 5 * GiB };

  it('a known length past 10 000 parts of the configured size goes in larger parts', async () => {
    const { calls, client } = recorder();
    await uploadObject(client, 'k', bytes(10_001), limits, { expectedLength: 10_001, timeoutMs: 1000 });
    expect(calls.parts.length).toBe(5001);
    expect(calls.parts.slice(0, -1).every((n) => n === 2)).toBe(true);
    expect(calls.completed).toBe(1);
  });

  it('a body of unknown length goes in parts sized by the upload limit', async () => {
    const { calls, client } = recorder();
    await uploadObject(client, 'k', bytes(10_001), limits, { maxBytes: 20_002, timeoutMs: 1000 });
    expect(calls.parts.length).toBe(3334);
    expect(calls.completed).toBe(1);
  });

  it("refuses a length past S3's largest multipart upload before reading a byte, and part 10 001 before sending it", async () => {
    const { calls, client } = recorder();
    let read = 0;
    async function* counted() {
      read++;
      yield Buffer.from('x');
    }
    await expect(
      uploadObject(client, 'k', counted(), limits, { expectedLength: S3_MAX_MULTIPART_BYTES + 1, timeoutMs: 1000 }),
    ).rejects.toMatchObject({ code: 'payload_too_large' });
    expect(read).toBe(0);
    await expect(uploadObject(client, 'k', bytes(10_001), limits, { timeoutMs: 1000 })).rejects.toMatchObject({
      code: 'payload_too_large',
    });
    expect(calls.parts.length).toBe(S3_MAX_PARTS);
    expect(calls).toMatchObject({ completed: 0, aborted: 1 });
  });
});

describe('copyResultEtag (what a 200 answer to a copy must hold)', () => {
  const etagOf = (body: string) => () => copyResultEtag(body, 'CopyObjectResult', 'CopyObject a → b', 'bucket');

  it('is the ETag the server gave the copy, unquoted', () => {
    expect(etagOf('<?xml version="1.0"?><CopyObjectResult><ETag>&#34;abc123&#34;</ETag></CopyObjectResult>')()).toBe(
      'abc123',
    );
  });

  it('a 200 that is not a completed copy is refused: an error in the body, no CopyObjectResult, an empty body', () => {
    expect(
      etagOf(
        '<?xml version="1.0"?><Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>',
      ),
    ).toThrow(expect.objectContaining({ code: 'upstream_unreachable' }));
    for (const body of ['<?xml version="1.0"?><Other/>', '', '<?xml version="1.0"?><CopyObjectResult/>'])
      expect(etagOf(body), body).toThrow(expect.objectContaining({ code: 'upstream_unreachable' }));
  });
});

describe('isTransientS3Answer (a copy the server asks to be sent again)', () => {
  it('is a 500 InternalError or a 503 SlowDown / ServiceUnavailable, also in the body of a 200', () => {
    expect(isTransientS3Answer(500, 'InternalError')).toBe(true);
    expect(isTransientS3Answer(503, 'SlowDown')).toBe(true);
    expect(isTransientS3Answer(503, 'ServiceUnavailable')).toBe(true);
    expect(isTransientS3Answer(500, undefined)).toBe(true);
    expect(isTransientS3Answer(503, '')).toBe(true);
  });

  it('is not a refusal that would only be refused again', () => {
    for (const [status, code] of [
      [403, 'AccessDenied'],
      [404, 'NoSuchKey'],
      [404, 'NoSuchBucket'],
      [400, 'EntityTooLarge'],
      [500, 'XMinioStorageFull'],
      [502, undefined],
      [404, undefined],
    ] as const)
      expect(isTransientS3Answer(status, code), `${status} ${code}`).toBe(false);
  });
});
