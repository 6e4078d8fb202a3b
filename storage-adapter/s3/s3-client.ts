/**
 * The S3 edge: SigV4-signed requests (the `aws4` signer, 48 KiB, no dependencies) over one keep-alive
 * undici `Pool` per store, path-style (`<endpoint>/<bucket>/<key>`), so any S3-compatible server
 * works without DNS per bucket. Bodies stream both ways; a streamed body is sent as
 * `UNSIGNED-PAYLOAD` with its Content-Length (S3 needs the length up front), small XML bodies are
 * signed with their digest. Only the operations the store needs, each a few lines; XML answers are
 * read with fast-xml-parser. See docs/storage-and-content.md for why not the AWS SDK.
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import aws4 from 'aws4';
import { XMLParser } from 'fast-xml-parser';
import type { Dispatcher, Pool } from 'undici';
import { StorageError } from '../errors.ts';
import { BODY_CAPS, drainBody, OversizedBodyError, readBoundedText } from '../streaming/bounded-body.ts';
import { createUpstreamPool, headLength, upstreamError, type UpstreamOptions } from '../streaming/http-upstream.ts';
import { encodeRfc3986, pathStyleObjectPath } from './s3-location.ts';

export interface S3Credentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string | undefined;
}

export interface S3ClientOptions extends UpstreamOptions {
  /** `http(s)://host:port` of the S3 API. */
  readonly endpoint: string;
  readonly region: string;
  readonly bucket: string;
  /** The key, or a function read as each request is signed (a rotated key reaches the next request). */
  readonly credentials: S3Credentials | (() => S3Credentials);
}

export interface S3Request {
  readonly method: Dispatcher.HttpMethod;
  /** Object key; undefined for a bucket-level request (listing). */
  readonly key?: string | undefined;
  readonly query?: Record<string, string> | undefined;
  readonly headers?: Record<string, string> | undefined;
  /** A streamed body (needs `content-length` in headers) or a small signed one. */
  readonly body?: AsyncIterable<Buffer> | Buffer | undefined;
  /** A Buffer body sent as `UNSIGNED-PAYLOAD` (multipart parts: their bytes are hashed for the content address already). */
  readonly unsignedPayload?: boolean | undefined;
  readonly signal?: AbortSignal | undefined;
  readonly headersTimeout?: number | undefined;
  readonly highWaterMark?: number | undefined;
}

export interface ListedObject {
  readonly key: string;
  readonly sizeBytes: number;
}

export interface S3Client {
  readonly bucket: string;
  readonly endpoint: string;
  /** `ARKVORY_STORAGE_TIMEOUT_SECONDS` in ms: also the longest a body read whole may take. */
  readonly timeoutMs: number;
  request(r: S3Request): Promise<Dispatcher.ResponseData>;
  /**
   * The path and signed headers (Host included) of a request the caller sends itself (s3-socket-read.ts,
   * s3-socket-write.ts): without a body, or with `unsignedPayload` a streamed one (its Content-Length in `headers`).
   */
  signedHead(
    r: Pick<S3Request, 'method' | 'key' | 'query' | 'headers'>,
    unsignedPayload?: boolean,
  ): {
    path: string;
    headers: Record<string, string>;
  };
  /**
   * Reads a failed answer's XML error (at most `BODY_CAPS.small`) and maps it to a storage error; the
   * body is consumed or destroyed. A body past the cap is itself the error.
   */
  failure(res: Dispatcher.ResponseData, what: string): Promise<StorageError>;
  /** A request whose answer must be 2xx; returns the body text (XML) or '', read up to `capBytes` (`BODY_CAPS.small`). */
  expectOk(
    r: S3Request,
    what: string,
    capBytes?: number,
  ): Promise<{ text: string; headers: Dispatcher.ResponseData['headers'] }>;
  /** Size and ETag (as `etagOf` reads it) of an object; undefined when it is absent. */
  head(key: string): Promise<{ sizeBytes: number; etag: string | undefined } | undefined>;
  /**
   * Deletes `key` (absent is fine). With `ifMatch` (an ETag as `etagOf` reads it) a server with
   * conditional DELETE deletes only that object (412 → `stored_bytes_mismatch`, nothing deleted);
   * one without (MinIO) ignores the header and deletes whatever is there.
   */
  delete(key: string, ifMatch?: string): Promise<void>;
  /** Every object under `prefix` (ListObjectsV2, paged); with `delimiter` also the common prefixes. */
  list(prefix: string, delimiter?: string): AsyncGenerator<{ object?: ListedObject; commonPrefix?: string }>;
  /** Multipart uploads begun under `prefix` and neither completed nor aborted (ListMultipartUploads, paged). */
  listMultipartUploads(prefix: string): AsyncGenerator<{ key: string; uploadId: string }>;
  close(): Promise<void>;
}

// htmlEntities: servers escape the quotes of an ETag as `&#34;` (MinIO) as well as `&quot;`.
const xml = new XMLParser({
  ignoreAttributes: true,
  parseTagValue: false,
  htmlEntities: true,
  isArray: (name) => ['Contents', 'CommonPrefixes', 'Upload'].includes(name),
});

/** Parses an XML answer; a body that is not XML is `upstream_unreachable` naming the request. */
export function parseXml(text: string, what: string): Record<string, unknown> {
  try {
    return xml.parse(text) as Record<string, unknown>;
  } catch (err) {
    throw new StorageError('upstream_unreachable', `The S3 server answered ${what} with a body that is not XML.`, {
      cause: err,
    });
  }
}

/** `<Error><Code>…` of an S3 error answer, if any. */
export function s3ErrorOf(text: string): { code: string; message: string } | undefined {
  if (!text.includes('<Error')) return undefined;
  try {
    const doc = xml.parse(text) as { Error?: { Code?: unknown; Message?: unknown } };
    if (!doc.Error) return undefined;
    return { code: String(doc.Error.Code ?? ''), message: String(doc.Error.Message ?? '') };
  } catch {
    return undefined;
  }
}

/**
 * An S3 answer the server asks to be sent again (AWS: "please try again"): a 500 InternalError or a
 * 503 SlowDown / ServiceUnavailable, also as the body of a 200 (copies and completions). SeaweedFS
 * answers a copy so now and then under load.
 */
export function isTransientS3Answer(status: number, code: string | undefined): boolean {
  if (code === 'InternalError' || code === 'SlowDown' || code === 'ServiceUnavailable') return true;
  return (status === 500 || status === 503) && (code === undefined || code === '');
}

/** Maps an S3 error answer: credentials and a missing bucket name the variable to fix. */
export function storageErrorOfS3(
  status: number,
  error: { code: string; message: string } | undefined,
  what: string,
  bucket: string,
): StorageError {
  const code = error?.code ?? '';
  const detail = error ? `${status} ${code}${error.message ? `: ${error.message}` : ''}` : String(status);
  if (code === 'NoSuchKey' || (status === 404 && code === ''))
    return new StorageError('not_found', `${what}: not on the S3 server.`);
  if (code === 'NoSuchBucket')
    return new StorageError(
      'storage_mismatch',
      `the bucket "${bucket}" does not exist on the S3 server (${what}: ${detail}); create it, or fix the bucket in ARKVORY_STORAGE_URL`,
    );
  if (['InvalidAccessKeyId', 'SignatureDoesNotMatch', 'AccessDenied', 'ExpiredToken', 'InvalidToken'].includes(code)) {
    return new StorageError(
      'upstream_unreachable',
      `The S3 server refused our credentials (${what}: ${detail}); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and ARKVORY_S3_REGION.`,
    );
  }
  // A size limit of the store's, per object or part: the upload is too large for it, the store is not full.
  if (code === 'EntityTooLarge')
    return new StorageError('object_too_large', `The S3 server refuses an object this large (${what}: ${detail}).`);
  if (code === 'QuotaExceeded' || code === 'XMinioStorageFull' || status === 507)
    return new StorageError('storage_full', `The S3 server has no space left (${what}: ${detail}).`);
  return new StorageError('upstream_unreachable', `The S3 server answered ${what} with ${detail}.`);
}

/**
 * An ETag as compared here: without quotes (servers quote it, XML answers too once unescaped) or a
 * weak prefix; undefined when the server sent none.
 */
export function etagOf(value: unknown): string | undefined {
  if (typeof value !== 'string' || value === '') return undefined;
  return value.replace(/^W\//, '').replace(/^"(.*)"$/, '$1');
}

/**
 * The `<root>` element of a listing answer. A 200 whose XML has no such element (an HTML page of a
 * proxy or a login portal parses too) is not an empty listing: taken as one, scrub would report
 * every blob missing. Refused: 502 `upstream_unreachable`.
 */
function listResult(text: string, root: string, what: string): unknown {
  const doc = parseXml(text, what)[root];
  if (doc === undefined)
    throw new StorageError('upstream_unreachable', `The S3 server answered ${what} with XML that is not a ${root}.`);
  return doc;
}

/**
 * A listed key, which must lie under the prefix asked for: callers delete what a listing gives
 * (removeTree, gc's aborts), so a server that ignores `prefix` (or a hostile one) must not steer
 * them to objects outside the store's own prefix. Refused whole: 502 `upstream_unreachable`.
 */
function underPrefix(key: string, prefix: string, what: string): string {
  if (key.startsWith(prefix)) return key;
  throw new StorageError(
    'upstream_unreachable',
    `The S3 server answered ${what} with a key outside that prefix (${JSON.stringify(key.slice(0, 200))}); nothing was done with it.`,
  );
}

/**
 * The next page's token of a truncated page, refused when there is none (the listing would end
 * early, silently: scrub would report the blobs it never saw as missing) or a page before had it (a
 * server that hands out the same token again would have the listing, and the keys its caller
 * gathers, go on forever).
 */
function nextPage(seen: Set<string>, value: unknown, what: string): string {
  const token = value === undefined || value === null ? '' : String(value);
  if (token === '')
    throw new StorageError(
      'upstream_unreachable',
      `The S3 server answered ${what} with a truncated page and no token for the next one.`,
    );
  if (seen.has(token))
    throw new StorageError(
      'upstream_unreachable',
      `The S3 server answered ${what} with a page token it had already given; the listing would not end.`,
    );
  seen.add(token);
  return token;
}

const EMPTY_SHA256 = createHash('sha256').update('').digest('hex');

export function createS3Client(options: S3ClientOptions): S3Client {
  const endpoint = new URL(options.endpoint);
  const pool: Pool = createUpstreamPool(endpoint.origin, options);
  const { bucket } = options;
  const host = endpoint.host;

  function pathOf(r: S3Request): string {
    const base = r.key === undefined ? `/${bucket}` : pathStyleObjectPath(bucket, r.key);
    const query = Object.entries(r.query ?? {})
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${encodeRfc3986(k)}=${encodeRfc3986(v)}`)
      .join('&');
    return query ? `${base}?${query}` : base;
  }

  function sign(r: Pick<S3Request, 'method' | 'key' | 'query'>, path: string, headers: Record<string, string>) {
    const { credentials } = options;
    const signed = aws4.sign(
      { service: 's3', region: options.region, method: r.method, host, path, headers },
      typeof credentials === 'function' ? credentials() : credentials,
    );
    return { path: signed.path ?? path, headers: signed.headers as Record<string, string> };
  }

  function signedHead(r: Pick<S3Request, 'method' | 'key' | 'query' | 'headers'>, unsignedPayload = false) {
    const headers: Record<string, string> = { ...r.headers };
    headers['x-amz-content-sha256'] = unsignedPayload ? 'UNSIGNED-PAYLOAD' : EMPTY_SHA256;
    return sign(r, pathOf(r), headers);
  }

  async function request(r: S3Request): Promise<Dispatcher.ResponseData> {
    const path = pathOf(r);
    const headers: Record<string, string> = { ...r.headers };
    let body: Readable | Buffer | undefined;
    if (Buffer.isBuffer(r.body)) {
      headers['x-amz-content-sha256'] = r.unsignedPayload
        ? 'UNSIGNED-PAYLOAD'
        : createHash('sha256').update(r.body).digest('hex');
      headers['content-length'] = String(r.body.length);
      body = r.body;
    } else if (r.body) {
      headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
      body = Readable.from(r.body, { objectMode: false });
    } else {
      headers['x-amz-content-sha256'] = EMPTY_SHA256;
    }
    const signed = sign(r, path, headers);
    const what = `${r.method} ${path}`;
    try {
      return await pool.request({
        method: r.method,
        path: signed.path,
        headers: signed.headers,
        body,
        signal: r.signal,
        headersTimeout: r.headersTimeout,
        highWaterMark: r.highWaterMark,
      });
    } catch (err) {
      throw upstreamError(r.signal?.aborted && r.signal.reason instanceof StorageError ? r.signal.reason : err, what);
    }
  }

  async function failure(res: Dispatcher.ResponseData, what: string): Promise<StorageError> {
    let text = '';
    try {
      text = await readBoundedText(
        res.body,
        { capBytes: BODY_CAPS.small, timeoutMs: options.timeoutMs },
        `${what} (${res.statusCode})`,
      );
    } catch (err) {
      // A body too large or too slow to read is itself what failed.
      if (err instanceof OversizedBodyError || (err instanceof StorageError && err.code === 'upstream_timeout'))
        return err;
      // A body cut short: the status alone says what failed.
    }
    return storageErrorOfS3(res.statusCode, s3ErrorOf(text), what, bucket);
  }

  async function expectOk(r: S3Request, what: string, capBytes: number = BODY_CAPS.small) {
    const res = await request(r);
    if (res.statusCode < 200 || res.statusCode > 299) throw await failure(res, what);
    const text = await readBoundedText(res.body, { capBytes, timeoutMs: options.timeoutMs }, what);
    // Copy and complete can fail after a 200 status line: the error then is the body.
    const error = s3ErrorOf(text);
    if (error) throw storageErrorOfS3(500, error, what, bucket);
    return { text, headers: res.headers };
  }

  return {
    bucket,
    endpoint: endpoint.origin,
    timeoutMs: options.timeoutMs,
    request,
    signedHead,
    failure,
    expectOk,
    async head(key) {
      const res = await request({ method: 'HEAD', key });
      await drainBody(res.body, options.timeoutMs);
      if (res.statusCode === 404) return undefined;
      if (res.statusCode !== 200) throw storageErrorOfS3(res.statusCode, undefined, `HEAD ${key}`, bucket);
      return { sizeBytes: headLength(res.headers['content-length'], `HEAD ${key}`), etag: etagOf(res.headers.etag) };
    },
    async delete(key, ifMatch) {
      const headers = ifMatch === undefined ? undefined : { 'if-match': `"${ifMatch}"` };
      const res = await request({ method: 'DELETE', key, headers });
      if (res.statusCode === 204 || res.statusCode === 200 || res.statusCode === 404) {
        await drainBody(res.body, options.timeoutMs);
        return;
      }
      if (res.statusCode === 412 && ifMatch !== undefined) {
        await drainBody(res.body, options.timeoutMs);
        throw new StorageError(
          'stored_bytes_mismatch',
          `${key} is no longer the object with ETag ${ifMatch} (DELETE: 412); nothing was deleted.`,
        );
      }
      throw await failure(res, `DELETE ${key}`);
    },
    async *list(prefix, delimiter) {
      let token: string | undefined;
      const tokens = new Set<string>();
      do {
        const query: Record<string, string> = { 'list-type': '2', prefix, 'max-keys': '1000' };
        if (delimiter) query.delimiter = delimiter;
        if (token) query['continuation-token'] = token;
        const { text } = await expectOk({ method: 'GET', query }, `ListObjectsV2 ${prefix}`, BODY_CAPS.s3Page);
        const doc = listResult(text, 'ListBucketResult', `ListObjectsV2 ${prefix}`) as
          | {
              Contents?: Array<{ Key: string; Size: string }>;
              CommonPrefixes?: Array<{ Prefix: string }>;
              IsTruncated?: string;
              NextContinuationToken?: string;
            }
          | undefined;
        const what = `ListObjectsV2 ${prefix}`;
        // Validated before any is handed out: the caller may delete what it is given (removeTree).
        const prefixes = (doc?.CommonPrefixes ?? []).map((p) => underPrefix(String(p.Prefix), prefix, what));
        const objects = (doc?.Contents ?? []).map((c) => ({
          key: underPrefix(String(c.Key), prefix, what),
          sizeBytes: Number(c.Size),
        }));
        for (const commonPrefix of prefixes) yield { commonPrefix };
        for (const object of objects) yield { object };
        token = doc?.IsTruncated === 'true' ? nextPage(tokens, doc.NextContinuationToken, what) : undefined;
      } while (token);
    },
    async *listMultipartUploads(prefix) {
      let marker: { key: string; uploadId: string } | undefined;
      const markers = new Set<string>();
      do {
        const query: Record<string, string> = { uploads: '', prefix, 'max-uploads': '1000' };
        if (marker) Object.assign(query, { 'key-marker': marker.key, 'upload-id-marker': marker.uploadId });
        const { text } = await expectOk({ method: 'GET', query }, `ListMultipartUploads ${prefix}`, BODY_CAPS.s3Page);
        const doc = listResult(text, 'ListMultipartUploadsResult', `ListMultipartUploads ${prefix}`) as
          | {
              Upload?: Array<{ Key: string; UploadId: string }>;
              IsTruncated?: string;
              NextKeyMarker?: string;
              NextUploadIdMarker?: string;
            }
          | undefined;
        const what = `ListMultipartUploads ${prefix}`;
        const uploads = (doc?.Upload ?? []).map((u) => ({
          key: underPrefix(String(u.Key), prefix, what),
          uploadId: String(u.UploadId),
        }));
        for (const upload of uploads) yield upload;
        marker = undefined;
        if (doc?.IsTruncated === 'true') {
          // One key may have uploads on several pages: the pair is the page's token.
          const next = { key: String(doc.NextKeyMarker ?? ''), uploadId: String(doc.NextUploadIdMarker ?? '') };
          nextPage(markers, next.key === '' ? undefined : JSON.stringify(next), what);
          marker = next;
        }
      } while (marker);
    },
    close: () => pool.close(),
  };
}
