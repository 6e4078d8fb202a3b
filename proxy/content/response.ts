/**
 * Pure planning of a content response: status, headers and the byte segments to send, from the
 * catalog entry and the request's Range/conditional headers. The handler only executes the plan.
 */
import {
  evaluateReadPreconditions,
  evaluateWritePreconditions,
  isIfRangeSatisfied,
  type Validators,
} from './conditional.ts';
import {
  contentRangeHeader,
  decideRange,
  rangeLength,
  unsatisfiedRangeHeader,
  type ByteRange,
} from '../../storage-adapter/range.ts';
import { formatContentDigest } from './digest.ts';
import { CONTENT_SECURITY_HEADERS, needsAttachment } from './security.ts';

export interface ContentEntry {
  readonly sha256: string;
  readonly sizeBytes: number;
  readonly contentType: string;
  readonly createdAtMs: number;
}

export interface ContentRequestHeaders {
  readonly range?: string | undefined;
  readonly ifRange?: string | undefined;
  readonly ifMatch?: string | undefined;
  readonly ifUnmodifiedSince?: string | undefined;
  readonly ifNoneMatch?: string | undefined;
  readonly ifModifiedSince?: string | undefined;
}

/** A literal piece of the body (multipart framing) or a byte range of the blob. */
export type Segment =
  | { readonly kind: 'bytes'; readonly data: Buffer }
  | { readonly kind: 'range'; readonly range: ByteRange };

export type ContentPlan =
  | { readonly status: 304; readonly headers: Readonly<Record<string, string>> }
  | { readonly status: 412; readonly headers: Readonly<Record<string, string>> }
  | { readonly status: 416; readonly headers: Readonly<Record<string, string>> }
  | {
      readonly status: 200 | 206;
      readonly headers: Readonly<Record<string, string>>;
      readonly segments: readonly Segment[];
    };

export function etagOf(sha256: string): string {
  return `"${sha256}"`;
}

export function validatorsOf(entry: ContentEntry): Validators {
  return { etag: etagOf(entry.sha256), lastModifiedMs: entry.createdAtMs };
}

/**
 * The metadata answer's strong ETag: the sha256, the JSON's format (`m1`) and the publish time in
 * ms. Not the bytes' tag: the JSON changes when a name is deleted and published again with the same
 * bytes (its `createdAt`, `publishedBy`, `contentType`), and a strong tag must change with it (RFC
 * 9110 §8.8.1), or a client's `If-None-Match` would be answered 304 on the old version's JSON. Every
 * version of a name has a later publish time than the ones before it (migrations/0075).
 */
export function metadataEtagOf(entry: ContentEntry): string {
  return `"${entry.sha256}.m1.${entry.createdAtMs}"`;
}

/**
 * A write's validators of the name's current version (`PUT`, `DELETE` on its base path): the bytes'
 * tag, which uploads answer with and content answers carry, and the tag of the path's own `GET`,
 * the metadata answer (metadataEtagOf); an `If-Match` with either names that version.
 */
export function writeValidatorsOf(entry: ContentEntry): Validators {
  return { ...validatorsOf(entry), alsoEtag: metadataEtagOf(entry) };
}

export interface MetadataRequestHeaders {
  readonly ifMatch?: string | undefined;
  readonly ifUnmodifiedSince?: string | undefined;
  readonly ifNoneMatch?: string | undefined;
  readonly ifModifiedSince?: string | undefined;
}

/**
 * The metadata route's answer to a `GET` or `HEAD` (RFC 9110 §13.2.2, as for content): 412 when
 * `If-Match` (strong, against metadataEtagOf) or, without it, `If-Unmodified-Since` fails; 304 when
 * `If-None-Match` or, without it, `If-Modified-Since` says the client's copy is current; else 200.
 * The 200 and 412 carry `ETag` and `Last-Modified` (the publish time, never later than `nowMs`, the
 * answer's time); a 304 only `ETag` (§15.4.5; the caller adds its Cache-Control).
 */
export function planMetadataResponse(
  entry: ContentEntry,
  request: MetadataRequestHeaders,
  nowMs: number,
): { readonly status: 200 | 304 | 412; readonly headers: Readonly<Record<string, string>> } {
  const validators: Validators = { etag: metadataEtagOf(entry), lastModifiedMs: entry.createdAtMs };
  const headers = {
    etag: validators.etag,
    'last-modified': new Date(Math.min(entry.createdAtMs, nowMs)).toUTCString(),
  };
  const write = { ifMatch: request.ifMatch, ifUnmodifiedSince: request.ifUnmodifiedSince };
  if (evaluateWritePreconditions(write, validators, nowMs) === 'precondition_failed') return { status: 412, headers };
  const read = { ifNoneMatch: request.ifNoneMatch, ifModifiedSince: request.ifModifiedSince };
  if (evaluateReadPreconditions(read, validators, nowMs) === 'not_modified')
    return { status: 304, headers: { etag: validators.etag } };
  return { status: 200, headers };
}

interface EntryHeaders {
  readonly validators: Validators;
  readonly lastModified: string;
  readonly reprDigest: string;
  /** The headers of every 200 and 206 about this entry. */
  readonly common: Readonly<Record<string, string>>;
  /**
   * A 412's and a 416's (with the 416's Content-Range): `common` without `Content-Disposition`,
   * which is about the answer's content (RFC 6266 §4), here the JSON error body and not the bytes.
   * The validators stay: they describe the selected representation whatever the content (RFC 9110
   * §8.8), so a client learns the version it failed against.
   */
  readonly failed: Readonly<Record<string, string>>;
  /** The whole-body 200's headers, the common case: built once, never copied per request. */
  readonly full: Readonly<Record<string, string>>;
  /** A 304's headers (notModifiedHeaders). */
  readonly notModified: Readonly<Record<string, string>>;
}

/**
 * RFC 9110 §15.4.5: a 304 carries those of Content-Location, Date, ETag, Vary, Cache-Control and
 * Expires a 200 would (here ETag and Cache-Control; Node adds Date), and no other representation
 * metadata: no Last-Modified (there is an ETag), Content-Disposition, Content-Type or Content-Length,
 * and no Accept-Ranges, which is about a body a 304 does not have. A cache updates its stored
 * response with the 304's fields (RFC 9111 §4.3.4), so those left out keep the 200's values. The
 * security fields are no representation metadata and stay: whatever a browser renders from its
 * cache after this answer is still sandboxed.
 */
function notModifiedHeaders(etag: string, cacheControl: string): Readonly<Record<string, string>> {
  return Object.freeze({ etag, 'cache-control': cacheControl, ...CONTENT_SECURITY_HEADERS });
}

/** A shared cache must ask again: the key may have lost its grant. */
const CONTENT_CACHE_CONTROL = 'private, no-cache';

/** Header values that depend only on the (immutable) entry, formatted once per cached entry. */
const entryHeaders = new WeakMap<ContentEntry, EntryHeaders>();

function headersOf(entry: ContentEntry): EntryHeaders {
  let h = entryHeaders.get(entry);
  if (!h) {
    const validators = validatorsOf(entry);
    const lastModified = new Date(entry.createdAtMs).toUTCString();
    const reprDigest = formatContentDigest(entry.sha256);
    const failed: Record<string, string> = {
      'accept-ranges': 'bytes',
      etag: validators.etag,
      'last-modified': lastModified,
      'cache-control': CONTENT_CACHE_CONTROL,
      ...CONTENT_SECURITY_HEADERS,
    };
    const common = needsAttachment(entry.contentType) ? { ...failed, 'content-disposition': 'attachment' } : failed;
    const full = {
      ...common,
      'content-type': entry.contentType,
      'content-length': String(entry.sizeBytes),
      'repr-digest': reprDigest,
    };
    h = {
      validators,
      lastModified,
      reprDigest,
      common: Object.freeze(common),
      failed: Object.freeze(failed),
      full: Object.freeze(full),
      notModified: notModifiedHeaders(validators.etag, CONTENT_CACHE_CONTROL),
    };
    entryHeaders.set(entry, h);
  }
  return h;
}

/**
 * The entry's headers with `Last-Modified` no later than `nowMs`: RFC 9110 §8.8.2.1 forbids a date
 * after the answer's own. A version published again within its predecessor's second is dated a
 * second on (migration 0075), so for up to that second it is ahead of the clock (or a database's
 * clock is ahead of ours). Preconditions still compare the stored time (`validators`).
 */
function headersAt(entry: ContentEntry, nowMs: number | undefined): EntryHeaders {
  const h = headersOf(entry);
  if (nowMs === undefined || entry.createdAtMs <= nowMs) return h;
  const lastModified = new Date(nowMs).toUTCString();
  return {
    ...h,
    lastModified,
    common: { ...h.common, 'last-modified': lastModified },
    failed: { ...h.failed, 'last-modified': lastModified },
    full: { ...h.full, 'last-modified': lastModified },
  };
}

/**
 * Decides 200, 206 (one range, or multipart/byteranges for several), 304, 412 or 416 and the exact
 * headers. `boundary` is passed in so the function stays deterministic; as a function it is called
 * only when a multipart answer is planned (random bytes cost more than a small response's headers).
 * `nowMs` is the answer's time: `Last-Modified` is never later, and a date with a two-digit year is
 * read against it (without it, against the publish time: the answer is no earlier).
 */
export function planContentResponse(
  entry: ContentEntry,
  request: ContentRequestHeaders,
  makeBoundary: string | (() => string),
  nowMs?: number,
): ContentPlan {
  const { validators, reprDigest, common, failed, full: fullHeaders, notModified } = headersAt(entry, nowMs);
  const readAtMs = nowMs ?? entry.createdAtMs;
  // RFC 9110 §13.2.2 steps 1 and 2, as for a write (strong If-Match, then If-Unmodified-Since): a
  // client resuming on the ETag of a version the name no longer holds must not get this one's bytes.
  if (
    (request.ifMatch !== undefined || request.ifUnmodifiedSince !== undefined) &&
    evaluateWritePreconditions(
      { ifMatch: request.ifMatch, ifUnmodifiedSince: request.ifUnmodifiedSince },
      validators,
      readAtMs,
    ) === 'precondition_failed'
  ) {
    return { status: 412, headers: failed };
  }
  if (
    evaluateReadPreconditions(
      { ifNoneMatch: request.ifNoneMatch, ifModifiedSince: request.ifModifiedSince },
      validators,
      readAtMs,
    ) === 'not_modified'
  ) {
    return { status: 304, headers: notModified };
  }
  const size = entry.sizeBytes;
  const full: ContentPlan = {
    status: 200,
    headers: fullHeaders,
    segments: size > 0 ? [{ kind: 'range', range: { start: 0, end: size - 1 } }] : [],
  };
  // Stryker disable next-line ConditionalExpression: equivalent: decideRange answers `full` to no Range too; the check only spares the If-Range test
  if (request.range === undefined || !isIfRangeSatisfied(request.ifRange, validators)) return full;
  const decision = decideRange(request.range, size);
  if (decision.kind === 'full') return full;
  if (decision.kind === 'unsatisfiable')
    return { status: 416, headers: { ...failed, 'content-range': unsatisfiedRangeHeader(size) } };
  const ranges = decision.ranges;
  if (ranges.length === 1) {
    const range = ranges[0]!;
    return {
      status: 206,
      headers: {
        ...common,
        'content-type': entry.contentType,
        'content-length': String(rangeLength(range)),
        'content-range': contentRangeHeader(range, size),
        'repr-digest': reprDigest,
      },
      segments: [{ kind: 'range', range }],
    };
  }
  const boundary = typeof makeBoundary === 'string' ? makeBoundary : makeBoundary();
  const segments: Segment[] = [];
  let length = 0;
  ranges.forEach((range, i) => {
    const head = Buffer.from(
      `${i === 0 ? '' : '\r\n'}--${boundary}\r\ncontent-type: ${entry.contentType}\r\ncontent-range: ${contentRangeHeader(range, size)}\r\n\r\n`,
      'latin1',
    );
    segments.push({ kind: 'bytes', data: head }, { kind: 'range', range });
    length += head.length + rangeLength(range);
  });
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`, 'latin1');
  segments.push({ kind: 'bytes', data: tail });
  length += tail.length;
  return {
    status: 206,
    headers: {
      ...common,
      'content-type': `multipart/byteranges; boundary=${boundary}`,
      'content-length': String(length),
      'repr-digest': reprDigest,
    },
    segments,
  };
}
