/**
 * Writing objects to S3 with bounded memory:
 * - a body of known length up to the single-PUT limit streams in one PUT (Content-Length, unsigned
 *   payload); its last chunk is held back until the body has passed its final checks (length,
 *   digest), so the server never receives a complete object that failed them; an empty body, whose
 *   head alone is a complete PUT, is read to its end before the PUT is sent;
 * - any other body goes as a multipart upload, one part (the memory an upload holds; see
 *   multipartPartBytes) at a time; the upload is completed only after the body ended cleanly, and aborted otherwise;
 * - server-side copy: CopyObject up to `copyBytes`, multipart copy (UploadPartCopy) above it; a
 *   server without UploadPartCopy (501 NotImplemented) gets the bytes streamed through us instead.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { StorageError } from '../errors.ts';
import { BODY_CAPS, drainBody, readBoundedText } from '../streaming/bounded-body.ts';
import { hasStableCode, sendStreamedBody, upstreamError } from '../streaming/http-upstream.ts';
import { etagOf, isTransientS3Answer, parseXml, s3ErrorOf, storageErrorOfS3, type S3Client } from './s3-client.ts';
import { encodeRfc3986, S3_MAX_MULTIPART_BYTES, S3_MAX_PART_BYTES, S3_MAX_PARTS } from './s3-location.ts';
import { putOverSocket, readEmptyBody, type SocketWriteOptions } from './s3-socket-write.ts';
import type { ReadHead } from '../store.ts';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

export interface S3Limits {
  /** Largest object one PUT may create (S3: 5 GiB). */
  readonly singlePutBytes: number;
  /** Part size of multipart uploads (S3: at least 5 MiB except the last part). */
  readonly partBytes: number;
  /** Largest object one CopyObject may copy (S3: 5 GiB); larger ones use multipart copy, in parts of this size. */
  readonly copyBytes: number;
}

export const S3_DEFAULT_LIMITS: S3Limits = { singlePutBytes: 5 * GiB, partBytes: 8 * MiB, copyBytes: 5 * GiB };

/** S3's smallest part of a multipart upload, the last excepted (UploadPart and UploadPartCopy alike). */
export const S3_MIN_PART_BYTES = 5 * MiB;
export { S3_MAX_MULTIPART_BYTES, S3_MAX_PART_BYTES, S3_MAX_PARTS };

/**
 * The part size of a multipart upload: `partBytes`, grown so that the body fits in S3's 10 000
 * parts. The bound is the body's length when known, else the most it may have (`maxBytes`, the
 * upload limit): a part is chosen before the first byte and S3 refuses part 10 001 only after every
 * byte before it was sent. Undefined when even 5 GiB parts cannot hold the bound (or there is none).
 */
export function multipartPartBytes(
  partBytes: number,
  expectedLength: number | undefined,
  maxBytes: number | undefined,
): number | undefined {
  const bound = expectedLength ?? maxBytes;
  if (bound === undefined || bound > S3_MAX_MULTIPART_BYTES) return undefined;
  return Math.max(partBytes, Math.ceil(bound / S3_MAX_PARTS));
}

/** One UploadPartCopy: bytes `start`..`end` (inclusive) of source object `source`. */
export interface PartCopy {
  readonly source: number;
  readonly start: number;
  readonly end: number;
}

/**
 * The UploadPartCopy ranges that assemble objects of `sizes` (in order) into one object, or
 * undefined when S3's rules forbid it: a part other than the last below 5 MiB, more than 10 000
 * ranges, nothing to copy. Empty sources add nothing and are skipped; a source above `copyBytes`
 * is copied in equal ranges of at most `copyBytes`.
 */
export function planPartCopies(sizes: readonly number[], copyBytes: number): PartCopy[] | undefined {
  const copies: PartCopy[] = [];
  sizes.forEach((size, source) => {
    const n = Math.ceil(size / copyBytes);
    const step = Math.ceil(size / Math.max(1, n));
    for (let start = 0; start < size; start += step)
      copies.push({ source, start, end: Math.min(size, start + step) - 1 });
  });
  if (copies.length === 0 || copies.length > S3_MAX_PARTS) return undefined;
  if (copies.slice(0, -1).some((c) => c.end - c.start + 1 < S3_MIN_PART_BYTES)) return undefined;
  return copies;
}

/** Yields every chunk but the last one as it comes; the last only after `body` has returned. */
async function* holdingLastChunk(body: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  let previous: Buffer | undefined;
  for await (const chunk of body) {
    if (previous) yield previous;
    previous = chunk;
  }
  if (previous) yield previous;
}

export interface UploadOptions {
  readonly expectedLength?: number | undefined;
  /** A single PUT goes over a socket of its own (s3-socket-write.ts; `http:` endpoints); else through undici. */
  readonly socket?: SocketWriteOptions | undefined;
  /** The body's chunks may be freed once used (the request parser's own; see StageOptions.chunksOwned). */
  readonly releaseChunks?: boolean | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Longest wait for the server's answer once the last byte was sent. */
  readonly timeoutMs: number;
  /** The most bytes the body may have (the upload limit): sizes the parts of a body of unknown length. */
  readonly maxBytes?: number | undefined;
}

/** The object an upload created, as the server answered: its ETag (`etagOf`). */
export interface UploadedObject {
  readonly etag: string;
}

/**
 * The ETag of a PUT the server answered with success. S3 sends one for every object it stored; a
 * success without one (a proxy, or an endpoint that is not S3, answering 200 to anything) says
 * nothing was stored, and is a failed write: an upload staged straight under its blob name is
 * committed without a copy, so it would have been published with nothing behind it.
 * The ETag is not compared with the body's MD5: it is one only for a single PUT without SSE-KMS or
 * SSE-C on AWS, not for MinIO's encrypted objects nor any multipart upload, and which applies is the
 * server's configuration, not in its answer alone; and it would cost a second hash of every byte.
 */
export function storedEtag(value: unknown, what: string): string {
  const etag = etagOf(value);
  if (etag === undefined)
    throw new StorageError(
      'upstream_unreachable',
      `The S3 server answered ${what} with success but without an ETag (S3 sends one for every object it stores): not taken as stored, nothing was published. Is something other than S3 answering at the endpoint (a proxy, a misconfigured URL)?`,
    );
  return etag;
}

/** Streams `body` to `key`; the object exists only if this resolves. */
export async function uploadObject(
  client: S3Client,
  key: string,
  body: AsyncIterable<Buffer>,
  limits: S3Limits,
  options: UploadOptions,
): Promise<UploadedObject> {
  if (options.expectedLength !== undefined && options.expectedLength <= limits.singlePutBytes) {
    if (options.socket) return putSocket(client, key, body, options.expectedLength, options.socket, options);
    return putStreamed(client, key, holdingLastChunk(body), options.expectedLength, options);
  }
  return uploadInParts(client, key, body, limits, options);
}

/** A streamed PUT with the confirmation deadline of `sendStreamedBody`. */
async function putStreamed(
  client: S3Client,
  key: string,
  body: AsyncIterable<Buffer>,
  length: number,
  options: UploadOptions,
): Promise<UploadedObject> {
  if (length === 0) {
    // The head alone completes an empty PUT, so the body's checks (at its end) run first, whatever
    // order undici would send the head and an empty stream in.
    await readEmptyBody(body);
    options.signal?.throwIfAborted();
    const { headers } = await client.expectOk(
      {
        method: 'PUT',
        key,
        headers: { 'content-type': 'application/octet-stream' },
        body: Buffer.alloc(0),
        signal: options.signal,
      },
      `PUT ${key}`,
    );
    return { etag: storedEtag(headers.etag, `PUT ${key}`) };
  }
  let etag: string | undefined;
  await sendStreamedBody(
    body,
    {
      signal: options.signal,
      timeoutMs: options.timeoutMs,
      timeoutMessage: `The S3 server did not confirm PUT ${key} within ${options.timeoutMs} ms.`,
    },
    async (watched, signal) => {
      const { headers } = await client.expectOk(
        {
          method: 'PUT',
          key,
          headers: { 'content-length': String(length), 'content-type': 'application/octet-stream' },
          body: watched,
          signal,
          headersTimeout: 0,
        },
        `PUT ${key}`,
      );
      etag = storedEtag(headers.etag, `PUT ${key}`);
    },
  );
  // Set whenever sendStreamedBody resolved: it resolves only once `send` did.
  return { etag: etag! };
}

/** A single PUT over a socket of its own: the ring holds the last bytes back until the body passed its checks. */
async function putSocket(
  client: S3Client,
  key: string,
  body: AsyncIterable<Buffer>,
  length: number,
  socket: SocketWriteOptions,
  options: UploadOptions,
): Promise<UploadedObject> {
  const what = `PUT ${key}`;
  const request = client.signedHead(
    {
      method: 'PUT',
      key,
      headers: { 'content-length': String(length), 'content-type': 'application/octet-stream' },
    },
    true,
  );
  const answer = await putOverSocket(socket, request, body, length, {
    signal: options.signal,
    releaseChunks: options.releaseChunks,
  });
  const error = s3ErrorOf(answer.text);
  if (answer.status < 200 || answer.status > 299) throw storageErrorOfS3(answer.status, error, what, client.bucket);
  if (error) throw storageErrorOfS3(500, error, what, client.bucket);
  return { etag: storedEtag(answer.headers.get('etag'), what) };
}

export async function createMultipart(client: S3Client, key: string): Promise<string> {
  const { text } = await client.expectOk(
    { method: 'POST', key, query: { uploads: '' }, headers: { 'content-type': 'application/octet-stream' } },
    `CreateMultipartUpload ${key}`,
  );
  const doc = parseXml(text, `CreateMultipartUpload ${key}`).InitiateMultipartUploadResult as
    | { UploadId?: string }
    | undefined;
  if (!doc?.UploadId)
    throw new StorageError(
      'upstream_unreachable',
      `The S3 server answered CreateMultipartUpload ${key} without an UploadId.`,
    );
  return String(doc.UploadId);
}

/**
 * Completes a multipart upload; the completed object's ETag (`etagOf`). A 200 whose body is not a
 * CompleteMultipartUploadResult, or one without an ETag (`storedEtag`: S3 names the object it
 * assembled), is `upstream_unreachable`, and the caller aborts the upload. Every completion needs
 * it: an assembly straight under a blob name is committed unchecked, and a tree move deletes its
 * source once the copy's completion was taken as done.
 */
export async function completeMultipart(
  client: S3Client,
  key: string,
  uploadId: string,
  etags: readonly string[],
): Promise<string> {
  const parts = etags
    .map(
      (etag, i) =>
        `<Part><PartNumber>${i + 1}</PartNumber><ETag>${etag.replace(/&/g, '&amp;').replace(/</g, '&lt;')}</ETag></Part>`,
    )
    .join('');
  const body = Buffer.from(
    `<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">${parts}</CompleteMultipartUpload>`,
  );
  const what = `CompleteMultipartUpload ${key}`;
  const { text } = await client.expectOk(
    { method: 'POST', key, query: { uploadId }, headers: { 'content-type': 'application/xml' }, body },
    what,
  );
  // S3 sends the 200 head at once, then whitespace while it works, then the result or an <Error>
  // (expectOk): a body without the result (cut off after the whitespace) completed nothing.
  const doc = text.trim() === '' ? undefined : (parseXml(text, what).CompleteMultipartUploadResult as unknown);
  if (doc === undefined || doc === null)
    throw new StorageError(
      'upstream_unreachable',
      `The S3 server answered ${what} with 200 but without a CompleteMultipartUploadResult.`,
    );
  return storedEtag((doc as { ETag?: unknown }).ETag, what);
}

/** Best effort: an upload left open is invisible to readers; `arkvory gc` aborts what is left. */
export async function abortMultipart(client: S3Client, key: string, uploadId: string): Promise<void> {
  const res = await client.request({ method: 'DELETE', key, query: { uploadId } });
  await drainBody(res.body, client.timeoutMs);
}

async function uploadInParts(
  client: S3Client,
  key: string,
  body: AsyncIterable<Buffer>,
  limits: S3Limits,
  options: UploadOptions,
): Promise<UploadedObject> {
  const partBytes = multipartPartBytes(limits.partBytes, options.expectedLength, options.maxBytes);
  // Refused before a byte is read: S3 would refuse it only at part 10 001.
  if (partBytes === undefined && options.expectedLength !== undefined)
    throw new StorageError(
      'payload_too_large',
      `The upload of ${options.expectedLength} bytes is larger than an S3 multipart upload holds (${S3_MAX_PARTS} parts of at most 5 GiB).`,
    );
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let uploadId: string | undefined;
  const etags: string[] = [];
  const sendPart = async (bytes: Buffer) => {
    const partNumber = etags.length + 1;
    // No bound to size the parts by (or a body past it): stop here rather than at S3's refusal.
    if (partNumber > S3_MAX_PARTS)
      throw new StorageError(
        'payload_too_large',
        `The upload is larger than an S3 multipart upload of ${S3_MAX_PARTS} parts of ${partBytes ?? limits.partBytes} bytes holds.`,
      );
    uploadId ??= await createMultipart(client, key);
    const { headers } = await client.expectOk(
      // Unsigned like the single PUT: a second SHA-256 of every byte only to sign it would double the hashing.
      {
        method: 'PUT',
        key,
        query: { partNumber: String(partNumber), uploadId },
        body: bytes,
        unsignedPayload: true,
        signal: options.signal,
      },
      `UploadPart ${partNumber} ${key}`,
    );
    const etag = headers.etag;
    if (typeof etag !== 'string')
      throw new StorageError(
        'upstream_unreachable',
        `The S3 server answered UploadPart ${partNumber} ${key} without an ETag.`,
      );
    etags.push(etag);
  };
  try {
    for await (const chunk of body) {
      pending.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes >= (partBytes ?? limits.partBytes)) {
        const part = Buffer.concat(pending, pendingBytes);
        pending = [];
        pendingBytes = 0;
        await sendPart(part);
      }
    }
    // The body passed its final checks: only now does the object come into existence.
    const rest = Buffer.concat(pending, pendingBytes);
    pending = [];
    if (uploadId === undefined) {
      const { headers } = await client.expectOk(
        {
          method: 'PUT',
          key,
          headers: { 'content-type': 'application/octet-stream' },
          body: rest,
          signal: options.signal,
        },
        `PUT ${key}`,
      );
      return { etag: storedEtag(headers.etag, `PUT ${key}`) };
    }
    if (rest.length > 0) await sendPart(rest);
    return { etag: await completeMultipart(client, key, uploadId, etags) };
  } catch (err) {
    if (uploadId !== undefined) await abortMultipart(client, key, uploadId).catch(() => {});
    if (options.signal?.aborted && !hasStableCode(err)) throw options.signal.reason;
    throw err;
  }
}

/** `x-amz-copy-source` of a key in the same bucket. */
export function copySource(client: S3Client, key: string): string {
  return `/${client.bucket}/${key.split('/').map(encodeRfc3986).join('/')}`;
}

/** How a copy was made (for tests and logs), and the ETag the server gave the new object. */
export interface CopiedObject {
  readonly how: 'copy' | 'multipart-copy' | 'streamed';
  readonly etag: string | undefined;
}

/** Attempts of one CopyObject the server answers with a transient error (isTransientS3Answer). */
export const COPY_ATTEMPTS = 3;
/** Wait before the n-th retry: n × this. */
const COPY_RETRY_MS = 100;

/**
 * Server-side copy of `from` (of `sizeBytes`) to `to`. With `sourceEtag` (as its upload was
 * answered) the server copies only while `from` is still that object (`x-amz-copy-source-if-match`,
 * every range of a multipart copy too): 412 → `stored_bytes_mismatch`. A CopyObject answered 200
 * must carry a CopyObjectResult with an ETag: S3 reports a copy that failed after its status line
 * in the body (an `<Error>`, or a body cut short), so anything else is not a completed copy.
 */
export async function copyObject(
  client: S3Client,
  from: string,
  to: string,
  sizeBytes: number,
  limits: S3Limits,
  timeoutMs: number,
  sourceEtag?: string,
): Promise<CopiedObject> {
  const ifMatch = sourceEtag === undefined ? undefined : `"${sourceEtag}"`;
  if (sizeBytes <= limits.copyBytes) {
    const what = `CopyObject ${from} → ${to}`;
    const headers: Record<string, string> = { 'x-amz-copy-source': copySource(client, from) };
    if (ifMatch) headers['x-amz-copy-source-if-match'] = ifMatch;
    // A copy is tied to its source (If-Match) and writes the same bytes each time: sent again when the
    // server asks for it, as S3 clients do.
    for (let attempt = 1; ; attempt++) {
      const res = await client.request({ method: 'PUT', key: to, headers });
      if (res.statusCode === 412) {
        await drainBody(res.body, client.timeoutMs);
        throw new StorageError('stored_bytes_mismatch', `${from} is no longer the object uploaded (${what}: 412).`);
      }
      const text = await readBoundedText(res.body, { capBytes: BODY_CAPS.small, timeoutMs: client.timeoutMs }, what);
      const ok = res.statusCode >= 200 && res.statusCode <= 299;
      const error = s3ErrorOf(text);
      if (attempt < COPY_ATTEMPTS && (!ok || error) && isTransientS3Answer(ok ? 500 : res.statusCode, error?.code)) {
        await sleep(COPY_RETRY_MS * attempt);
        continue;
      }
      if (!ok) throw storageErrorOfS3(res.statusCode, error, what, client.bucket);
      return { how: 'copy', etag: copyResultEtag(text, 'CopyObjectResult', what, client.bucket) };
    }
  }
  const uploadId = await createMultipart(client, to);
  const etags: string[] = [];
  try {
    for (let start = 0; start < sizeBytes; start += limits.copyBytes) {
      const end = Math.min(sizeBytes, start + limits.copyBytes) - 1;
      const partNumber = etags.length + 1;
      const etag = await uploadPartCopy(client, from, to, uploadId, partNumber, { start, end }, ifMatch).catch(
        (err: unknown) => {
          if ((err as StorageError).code === 'part_mismatch')
            throw new StorageError('stored_bytes_mismatch', `${from} is no longer the object uploaded.`, {
              cause: err,
            });
          throw err;
        },
      );
      if (etag === 'not-implemented') {
        // No UploadPartCopy on this server: fall back to streaming the bytes through us.
        await abortMultipart(client, to, uploadId).catch(() => {});
        const streamed = await uploadObject(client, to, readObject(client, from, undefined, ifMatch), limits, {
          expectedLength: sizeBytes,
          timeoutMs,
        });
        return { how: 'streamed', etag: streamed.etag };
      }
      etags.push(etag);
    }
    return { how: 'multipart-copy', etag: await completeMultipart(client, to, uploadId, etags) };
  } catch (err) {
    await abortMultipart(client, to, uploadId).catch(() => {});
    throw err;
  }
}

/** The ETag of a copy's 200 answer (`CopyObjectResult`, `CopyPartResult`); a body without one is not a completed copy. */
export function copyResultEtag(text: string, element: string, what: string, bucket: string): string {
  const error = s3ErrorOf(text);
  if (error) throw storageErrorOfS3(500, error, what, bucket);
  const doc = text === '' ? undefined : (parseXml(text, what)[element] as { ETag?: unknown } | undefined);
  const etag = etagOf(doc?.ETag);
  if (etag === undefined)
    throw new StorageError('upstream_unreachable', `The S3 server answered ${what} with 200 but no ${element} ETag.`);
  return etag;
}

/**
 * The whole object, streamed; `not_found` when it is absent. `head.version` is set to the answer's
 * ETag before the first chunk (scrub ties its move to the object it read).
 */
export async function* readObject(
  client: S3Client,
  key: string,
  signal?: AbortSignal,
  ifMatch?: string,
  head?: ReadHead,
): AsyncGenerator<Buffer> {
  const headers = ifMatch ? { 'if-match': ifMatch } : undefined;
  const res = await client.request({ method: 'GET', key, headers, signal, highWaterMark: 256 * 1024 });
  if (res.statusCode === 412) {
    await drainBody(res.body, client.timeoutMs);
    throw new StorageError('stored_bytes_mismatch', `${key} is no longer the object uploaded (GET: 412).`);
  }
  if (res.statusCode !== 200) throw await client.failure(res, `GET ${key}`);
  if (head) head.version = etagOf(res.headers.etag);
  try {
    for await (const chunk of res.body) yield chunk as Buffer;
  } catch (err) {
    throw upstreamError(err, `GET ${key}`);
  } finally {
    if (!res.body.destroyed) res.body.destroy();
  }
}

/**
 * UploadPartCopy of `range` of `from` as part `partNumber`; the ETag of the new part, or
 * 'not-implemented' (501: the server has no UploadPartCopy). With `ifMatch` the server copies only
 * while `from` still has that ETag; otherwise 412 → `part_mismatch`.
 */
export async function uploadPartCopy(
  client: S3Client,
  from: string,
  to: string,
  uploadId: string,
  partNumber: number,
  range: { start: number; end: number },
  ifMatch?: string,
): Promise<string | 'not-implemented'> {
  const headers: Record<string, string> = {
    'x-amz-copy-source': copySource(client, from),
    'x-amz-copy-source-range': `bytes=${range.start}-${range.end}`,
  };
  if (ifMatch) headers['x-amz-copy-source-if-match'] = ifMatch;
  const what = `UploadPartCopy ${partNumber} ${from} → ${to}`;
  const res = await client.request({
    method: 'PUT',
    key: to,
    query: { partNumber: String(partNumber), uploadId },
    headers,
  });
  if (res.statusCode === 501) {
    await drainBody(res.body, client.timeoutMs);
    return 'not-implemented';
  }
  if (res.statusCode === 412) {
    await drainBody(res.body, client.timeoutMs);
    throw new StorageError(
      'part_mismatch',
      `${from} changed on the S3 server while it was assembled (${what}: 412 PreconditionFailed)`,
    );
  }
  if (res.statusCode !== 200) throw await client.failure(res, what);
  const text = await readBoundedText(res.body, { capBytes: BODY_CAPS.small, timeoutMs: client.timeoutMs }, what);
  // Quoted again: CompleteMultipartUpload lists each part's ETag as the server gave it.
  return `"${copyResultEtag(text, 'CopyPartResult', what, client.bucket)}"`;
}
