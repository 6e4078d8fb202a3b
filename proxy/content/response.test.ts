import { describe, expect, it } from 'vitest';
import {
  metadataEtagOf,
  planContentResponse,
  planMetadataResponse,
  writeValidatorsOf,
  type ContentEntry,
} from './response.ts';

const entry: ContentEntry = {
  sha256: 'a'.repeat(64),
  sizeBytes: 1000,
  contentType: 'application/x-test',
  createdAtMs: Date.parse('Sun, 29 Nov 2026 10:00:00 GMT'),
};
const etag = `"${'a'.repeat(64)}"`;

describe('planContentResponse', () => {
  it('200 with validators and the whole body', () => {
    const plan = planContentResponse(entry, {}, 'B');
    expect(plan).toMatchObject({
      status: 200,
      headers: {
        'accept-ranges': 'bytes',
        etag,
        'last-modified': 'Sun, 29 Nov 2026 10:00:00 GMT',
        'content-length': '1000',
        'content-type': 'application/x-test',
      },
      segments: [{ kind: 'range', range: { start: 0, end: 999 } }],
    });
  });

  it('an empty blob has no segments', () => {
    expect(planContentResponse({ ...entry, sizeBytes: 0 }, {}, 'B')).toMatchObject({
      status: 200,
      headers: { 'content-length': '0' },
      segments: [],
    });
  });

  it('412 when If-Match names another version or If-Unmodified-Since is before it, before If-None-Match and Range', () => {
    const earlier = 'Sun, 29 Nov 2026 09:59:59 GMT';
    for (const request of [
      { ifMatch: '"other"', ifNoneMatch: etag, range: 'bytes=0-1' },
      { ifMatch: `W/${etag}` },
      { ifMatch: 'not a list' },
      { ifUnmodifiedSince: earlier, range: 'bytes=0-1' },
    ])
      expect(planContentResponse(entry, request, 'B'), JSON.stringify(request)).toMatchObject({
        status: 412,
        headers: { etag },
      });
    for (const request of [
      { ifMatch: etag, range: 'bytes=0-1' },
      { ifMatch: '*', range: 'bytes=0-1' },
      { ifMatch: etag, ifUnmodifiedSince: earlier, range: 'bytes=0-1' },
      { ifUnmodifiedSince: 'Sun, 29 Nov 2026 10:00:00 GMT', range: 'bytes=0-1' },
    ])
      expect(planContentResponse(entry, request, 'B').status, JSON.stringify(request)).toBe(206);
  });

  it('304 on a matching If-None-Match, even with a Range', () => {
    expect(planContentResponse(entry, { ifNoneMatch: etag, range: 'bytes=0-1' }, 'B')).toMatchObject({
      status: 304,
      headers: { etag },
    });
  });

  it('a 304 carries ETag and Cache-Control, no other representation metadata (RFC 9110 §15.4.5)', () => {
    // An attachment type, and a Last-Modified ahead of the clock: neither adds a field to a 304.
    const html = { ...entry, contentType: 'text/html' };
    for (const [request, nowMs] of [
      [{ ifNoneMatch: etag }, undefined],
      [{ ifModifiedSince: 'Sun, 29 Nov 2026 10:00:00 GMT', range: 'bytes=0-1' }, undefined],
      [{ ifNoneMatch: '*' }, entry.createdAtMs - 400],
    ] as const)
      expect(planContentResponse(html, request, 'B', nowMs), JSON.stringify(request)).toEqual({
        status: 304,
        headers: {
          etag,
          'cache-control': 'private, no-cache',
          'x-content-type-options': 'nosniff',
          'content-security-policy': 'sandbox',
        },
      });
  });

  it('206 for one range', () => {
    expect(planContentResponse(entry, { range: 'bytes=10-19' }, 'B')).toMatchObject({
      status: 206,
      headers: { 'content-range': 'bytes 10-19/1000', 'content-length': '10' },
      segments: [{ kind: 'range', range: { start: 10, end: 19 } }],
    });
  });

  it('416 with bytes */size', () => {
    expect(planContentResponse(entry, { range: 'bytes=1000-' }, 'B')).toMatchObject({
      status: 416,
      headers: { 'content-range': 'bytes */1000' },
    });
  });

  it('a 412 and a 416 carry the validators, never Content-Disposition: their content is the JSON error', () => {
    // An attachment type, and a publish time ahead of the clock: Last-Modified is the clock's.
    const html = { ...entry, contentType: 'text/html' };
    const nowMs = entry.createdAtMs - 1000;
    const fields = {
      'accept-ranges': 'bytes',
      etag,
      'last-modified': 'Sun, 29 Nov 2026 09:59:59 GMT',
      'cache-control': 'private, no-cache',
      'x-content-type-options': 'nosniff',
      'content-security-policy': 'sandbox',
    };
    expect(planContentResponse(html, { ifMatch: '"other"' }, 'B', nowMs)).toEqual({ status: 412, headers: fields });
    expect(planContentResponse(html, { range: 'bytes=1000-' }, 'B', nowMs)).toEqual({
      status: 416,
      headers: { ...fields, 'content-range': 'bytes */1000' },
    });
    // The same entry's 200 is still an attachment.
    expect(planContentResponse(html, {}, 'B', nowMs).headers['content-disposition']).toBe('attachment');
  });

  it('If-Range with another etag sends the whole body', () => {
    expect(planContentResponse(entry, { range: 'bytes=0-1', ifRange: '"old"' }, 'B').status).toBe(200);
    expect(planContentResponse(entry, { range: 'bytes=0-1', ifRange: etag }, 'B').status).toBe(206);
  });

  it('multipart/byteranges frames each part and counts the length exactly', () => {
    const plan = planContentResponse(entry, { range: 'bytes=0-9,500-509' }, 'XYZ');
    if (plan.status !== 206) throw new Error('expected 206');
    expect(plan.headers['content-type']).toBe('multipart/byteranges; boundary=XYZ');
    const text = plan.segments
      .map((s) => (s.kind === 'bytes' ? s.data.toString('latin1') : '#'.repeat(s.range.end - s.range.start + 1)))
      .join('');
    expect(text).toBe(
      '--XYZ\r\ncontent-type: application/x-test\r\ncontent-range: bytes 0-9/1000\r\n\r\n##########' +
        '\r\n--XYZ\r\ncontent-type: application/x-test\r\ncontent-range: bytes 500-509/1000\r\n\r\n##########' +
        '\r\n--XYZ--\r\n',
    );
    expect(Number(plan.headers['content-length'])).toBe(Buffer.byteLength(text, 'latin1'));
  });

  it('every answer carries nosniff and a sandbox CSP; types a browser renders or runs are attachments', () => {
    for (const plan of [
      planContentResponse(entry, {}, 'B'),
      planContentResponse(entry, { range: 'bytes=0-1' }, 'B'),
      planContentResponse(entry, { range: 'bytes=1000-' }, 'B'),
      planContentResponse(entry, { ifNoneMatch: etag }, 'B'),
    ]) {
      expect(plan.headers).toMatchObject({ 'x-content-type-options': 'nosniff', 'content-security-policy': 'sandbox' });
    }
    const disposition = (contentType: string) =>
      planContentResponse({ ...entry, contentType }, {}, 'B').headers['content-disposition'];
    for (const risky of [
      'text/html',
      'text/html; charset=utf-8',
      'image/svg+xml',
      'application/xhtml+xml',
      'text/xml',
      'application/javascript',
      'text/javascript',
      'application/pdf',
      'application/x-test',
      // An inert type elsewhere than at the start, or run on into another token, is not that type.
      'text/html; charset=text/plain',
      'x-text/plain',
      'text/plainx',
      'image/pngx; q=1',
    ]) {
      expect(disposition(risky), risky).toBe('attachment');
    }
    for (const inert of [
      'text/plain',
      'text/plain; charset=utf-8',
      'application/json',
      'application/octet-stream',
      'image/png',
      'image/jpeg',
      'TEXT/PLAIN',
      'text/plain ; charset=utf-8',
      'image/gif',
      'image/webp',
      'image/avif',
    ]) {
      expect(disposition(inert), inert).toBeUndefined();
    }
  });

  it('every answer says private, no-cache: a shared cache must ask again (the key may have lost its grant)', () => {
    // A new entry object: its headers are built here, not taken from another test's answer.
    const own = { ...entry };
    for (const plan of [
      planContentResponse(own, {}, 'B'),
      planContentResponse(own, { range: 'bytes=0-1' }, 'B'),
      planContentResponse(own, { range: 'bytes=0-1,5-6' }, 'B'),
      planContentResponse(own, { range: 'bytes=1000-' }, 'B'),
      planContentResponse(own, { ifNoneMatch: etag }, 'B'),
    ])
      expect(plan.headers['cache-control']).toBe('private, no-cache');
  });

  it("an entry's whole-body headers are built once and shared, not copied per request", () => {
    const first = planContentResponse(entry, {}, 'B');
    expect(planContentResponse(entry, {}, 'B').headers).toBe(first.headers);
    expect(Object.isFrozen(first.headers)).toBe(true);
    // A new entry object (another blob, or the same one read again from the catalog) gets its own.
    expect(planContentResponse({ ...entry }, {}, 'B').headers).not.toBe(first.headers);
  });

  it('Last-Modified is never later than the answer (a version dated a second on), yet preconditions use the stored time', () => {
    const stored = entry.createdAtMs;
    const before = stored - 400;
    const ahead = { ...entry };
    for (const plan of [
      planContentResponse(ahead, {}, 'B', before),
      planContentResponse(ahead, { range: 'bytes=0-1' }, 'B', before),
      planContentResponse(ahead, { range: 'bytes=1000-' }, 'B', before),
    ])
      expect(plan.headers['last-modified'], String(plan.status)).toBe(new Date(before).toUTCString());
    // The client's date for the clamped value is earlier than the stored time: modified since, 200.
    expect(planContentResponse(ahead, { ifModifiedSince: new Date(before).toUTCString() }, 'B', before).status).toBe(
      200,
    );
    expect(planContentResponse(ahead, { ifModifiedSince: new Date(stored).toUTCString() }, 'B', before).status).toBe(
      304,
    );
    // Not ahead: the stored date, and the headers built once.
    const now = planContentResponse(ahead, {}, 'B', stored + 5000);
    expect(now.headers['last-modified']).toBe(new Date(stored).toUTCString());
    expect(planContentResponse(ahead, {}, 'B', stored).headers).toBe(now.headers);
  });
});

describe('planMetadataResponse', () => {
  const metaTag = `"${'a'.repeat(64)}.m1.${entry.createdAtMs}"`;
  const lastModified = 'Sun, 29 Nov 2026 10:00:00 GMT';
  const later = entry.createdAtMs + 60_000;

  it("the metadata's tag names the version, not only its bytes: the same bytes published again get another", () => {
    expect(metadataEtagOf(entry)).toBe(metaTag);
    expect(metadataEtagOf({ ...entry, createdAtMs: entry.createdAtMs + 1000 })).not.toBe(metaTag);
    expect(writeValidatorsOf(entry)).toEqual({ etag, alsoEtag: metaTag, lastModifiedMs: entry.createdAtMs });
  });

  it('200 with the ETag and Last-Modified, never later than the answer', () => {
    expect(planMetadataResponse(entry, {}, later)).toEqual({
      status: 200,
      headers: { etag: metaTag, 'last-modified': lastModified },
    });
    expect(planMetadataResponse(entry, {}, entry.createdAtMs - 400).headers['last-modified']).toBe(
      new Date(entry.createdAtMs - 400).toUTCString(),
    );
  });

  it("304 with only the ETag when the client's copy is current (If-None-Match, else If-Modified-Since)", () => {
    for (const request of [
      { ifNoneMatch: metaTag },
      { ifNoneMatch: `W/${metaTag}` },
      { ifNoneMatch: '*' },
      { ifModifiedSince: lastModified },
    ])
      expect(planMetadataResponse(entry, request, later), JSON.stringify(request)).toEqual({
        status: 304,
        headers: { etag: metaTag },
      });
    for (const request of [
      // The bytes' tag does not name this JSON: the same bytes published again have other metadata.
      { ifNoneMatch: etag },
      { ifNoneMatch: '"other"' },
      { ifModifiedSince: 'Sun, 29 Nov 2026 09:59:59 GMT' },
      { ifNoneMatch: '"other"', ifModifiedSince: lastModified },
    ])
      expect(planMetadataResponse(entry, request, later).status, JSON.stringify(request)).toBe(200);
  });

  it('412 with the validators when If-Match or, without it, If-Unmodified-Since fails, before If-None-Match', () => {
    for (const request of [
      { ifMatch: '"other"', ifNoneMatch: metaTag },
      { ifMatch: `W/${metaTag}` },
      { ifMatch: etag },
      { ifUnmodifiedSince: 'Sun, 29 Nov 2026 09:59:59 GMT' },
    ])
      expect(planMetadataResponse(entry, request, later), JSON.stringify(request)).toEqual({
        status: 412,
        headers: { etag: metaTag, 'last-modified': lastModified },
      });
    for (const request of [
      { ifMatch: metaTag },
      { ifMatch: '*' },
      { ifMatch: metaTag, ifUnmodifiedSince: 'Sun, 29 Nov 2026 09:59:59 GMT' },
      { ifUnmodifiedSince: lastModified },
    ])
      expect(planMetadataResponse(entry, request, later).status, JSON.stringify(request)).toBe(200);
  });

  it('reads an RFC 850 date against the answer time', () => {
    // `-26` is 2026 read in 2026, 1926 read in 1975 (the 100 years up to 50 ahead).
    const rfc850 = { ifModifiedSince: 'Sunday, 29-Nov-26 10:00:00 GMT' };
    expect(planMetadataResponse(entry, rfc850, later).status).toBe(304);
    expect(planMetadataResponse(entry, rfc850, Date.UTC(1975, 0, 1)).status).toBe(200);
  });
});
