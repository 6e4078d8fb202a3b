/**
 * Reading a blob from an HTTP-speaking store (the static-HTTP store, the S3 store): one upstream GET
 * per byte range, consumed in order, its chunks handed on as received (no copy). Both stores answer
 * a ranged GET the same way; only how the request is made (plain or signed) differs, so the request
 * is passed in.
 */
import type { Dispatcher } from 'undici';
import { StorageError } from '../errors.ts';
import { drainBody } from './bounded-body.ts';
import { headLength, parseContentRange, unexpectedStatus, upstreamError } from './http-upstream.ts';
import type { ByteRange } from '../range.ts';
import type { BlobReader } from '../store.ts';

/** Response bytes undici may hold per download before it pauses the upstream socket. */
export const UPSTREAM_BUFFER_BYTES = 256 * 1024;

/** One upstream GET of `bytes=start-end`, consumed in order. */
export interface RangeStream {
  position: number;
  readonly sizeBytes: number;
  /** The answer's strong ETag, if it had one: the reader's later ranges are asked with If-Match on it. */
  readonly etag: string | undefined;
  /** The next chunk as received, cut to at most `maxBytes`; undefined at the end. */
  next(maxBytes: number): Promise<Buffer | undefined>;
  readInto(buffer: Buffer, offset: number, length: number): Promise<number>;
  destroy(): void;
}

/** Drops an answer unread; undici reports the abort as an 'error', which nothing else would handle. */
function discard(res: Dispatcher.ResponseData): void {
  res.body.on('error', () => {});
  res.body.destroy();
}

/**
 * Sends `GET <target>` with `Range: bytes=start-end` (and `highWaterMark` as the body buffer), and
 * `If-Match: <ifMatch>` when given.
 */
export type RangedGet = (
  range: string,
  highWaterMark: number,
  ifMatch: string | undefined,
) => Promise<Dispatcher.ResponseData>;

/**
 * What one read has seen of its object so far (its size, its strong ETag if any): a later range of
 * another object (replaced on the store meanwhile) is not the blob's.
 */
export interface ObjectVersion {
  readonly sizeBytes: number;
  readonly etag: string | undefined;
}

/** An ETag usable in If-Match (strong comparison): quoted, not weak. */
export function strongEtag(value: unknown): string | undefined {
  return typeof value === 'string' && /^"[^"]*"$/.test(value) ? value : undefined;
}

/** A later range of one read that came from another object than the earlier ones. */
export function objectChanged(sha256: string, what: string, detail: string): StorageError {
  return new StorageError(
    'upstream_unreachable',
    `Blob ${sha256} changed on the artifact store while it was read (${what}: ${detail}).`,
  );
}

/**
 * Opens `bytes=start-end` of blob `sha256`. `onError` turns a non-2xx answer into the store's own
 * error (the S3 store reads its XML error body); by default 404 is `not_found`, the rest unexpected.
 * With `version` (what earlier ranges of the same read saw) the range is asked with If-Match on its
 * ETag, and an answer of another object (412, another size) is `upstream_unreachable`.
 */
export async function openRangeStream(
  get: RangedGet,
  what: {
    sha256: string;
    target: string;
    onError?: (res: Dispatcher.ResponseData) => Promise<StorageError>;
    version?: ObjectVersion | undefined;
    /** The storage timeout: the longest an error answer's body is drained. */
    timeoutMs: number;
  },
  start: number,
  end: number,
): Promise<RangeStream> {
  const { sha256, target, version } = what;
  // A larger body buffer than undici's 64 KiB keeps the upstream socket flowing between our reads
  // (fewer pause/resume turns); it is the per-download memory bound on the upstream side.
  const res = await get(`bytes=${start}-${end}`, UPSTREAM_BUFFER_BYTES, version?.etag);
  if (res.statusCode === 412 && version?.etag !== undefined) {
    discard(res);
    throw objectChanged(sha256, `GET ${target}`, `412 to If-Match ${version.etag}`);
  }
  let sizeBytes: number;
  /** The answer's last byte: a body that ends cleanly before it was cut short by the store. */
  let lastByte: number;
  if (res.statusCode === 206) {
    const range = parseContentRange(res.headers['content-range']);
    // A range that starts elsewhere, or ends before what was asked (within the object), is not it.
    if (!range || range.start !== start || range.end < Math.min(end, range.size - 1)) {
      discard(res);
      throw new StorageError(
        'upstream_unreachable',
        `The artifact store answered GET ${target} with Content-Range ${String(res.headers['content-range'])} for bytes=${start}-${end}.`,
      );
    }
    sizeBytes = range.size;
    lastByte = range.end;
  } else if (res.statusCode === 200 && start === 0) {
    // The whole object: its Content-Length is its size. Without one (a chunked answer, e.g. nginx
    // after a body filter rewrote the bytes) nothing says what the object is: not read as NaN bytes.
    try {
      sizeBytes = headLength(res.headers['content-length'], `GET ${target}`);
    } catch (err) {
      discard(res);
      throw err;
    }
    lastByte = sizeBytes - 1;
  } else if (res.statusCode === 200) {
    // The whole object for a range further on (a server or proxy that ignores Range): not read,
    // and not taken as an error answer either (its body is the object, perhaps gigabytes).
    discard(res);
    throw new StorageError(
      'upstream_unreachable',
      `The artifact store answered GET ${target} with the whole object (200) to a request for bytes=${start}-${end}.`,
    );
  } else {
    if (what.onError) throw await what.onError(res);
    await drainBody(res.body, what.timeoutMs);
    if (res.statusCode === 404) throw new StorageError('not_found', `blob ${sha256} is not on the artifact store`);
    throw unexpectedStatus(res.statusCode, `GET ${target}`);
  }
  if (version && sizeBytes !== version.sizeBytes) {
    discard(res);
    throw objectChanged(sha256, `GET ${target}`, `${sizeBytes} bytes, not ${version.sizeBytes}`);
  }
  const iterator = (res.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  let leftover: Buffer | undefined;
  const stream: RangeStream = {
    position: start,
    sizeBytes,
    etag: strongEtag(res.headers.etag),
    async next(maxBytes) {
      let chunk = leftover;
      leftover = undefined;
      if (!chunk) {
        let next: IteratorResult<Buffer>;
        try {
          next = await iterator.next();
        } catch (err) {
          throw upstreamError(err, `GET ${target}`);
        }
        if (next.done) {
          // read() callers take 0 bytes as the blob's end: a short answer is the store's failure.
          if (stream.position <= lastByte)
            throw new StorageError(
              'upstream_unreachable',
              `The artifact store ended blob ${sha256} at byte ${stream.position}, before byte ${lastByte} (GET ${target}).`,
            );
          return undefined;
        }
        chunk = next.value;
      }
      // Bytes past the answer's last byte (a 206 longer than its Content-Range) are not the
      // object's: read() goes on from here when the next position is where this stopped.
      if (stream.position > lastByte)
        throw new StorageError(
          'upstream_unreachable',
          `The artifact store sent bytes of blob ${sha256} past byte ${lastByte}, the end of its answer's range (GET ${target}).`,
        );
      if (chunk.length > lastByte - stream.position + 1) {
        leftover = chunk.subarray(lastByte - stream.position + 1);
        chunk = chunk.subarray(0, lastByte - stream.position + 1);
      }
      if (chunk.length > maxBytes) {
        leftover = chunk.subarray(maxBytes);
        chunk = chunk.subarray(0, maxBytes);
      }
      stream.position += chunk.length;
      return chunk;
    },
    async readInto(buffer, offset, length) {
      const chunk = await stream.next(length);
      if (!chunk) return 0;
      chunk.copy(buffer, offset);
      return chunk.length;
    },
    destroy() {
      if (!res.body.destroyed) discard(res);
    },
  };
  return stream;
}

/**
 * A `BlobReader` over range streams: `first` (already open, so an unreachable store failed before
 * any response header) serves the first range; a read elsewhere opens a new range stream. With
 * `lendsChunks: false` (streams that read into a reused buffer, s3-socket-read.ts) the reader offers
 * only `read()`, which copies into the caller's buffers, never `chunks()`.
 * Every range after the first is tied to the object the first answer came from: its size (that of
 * `first`, or a HEAD's), and its ETag by If-Match, so bytes of an object replaced meanwhile are never
 * mixed in. A HEAD's ETag is not used: a read of one range (a backup's) is never refused for a file
 * replaced by the same bytes between the HEAD and the GET (nginx's ETag is the file's mtime).
 */
export function rangeStreamReader(
  sha256: string,
  sizeBytes: number,
  ranges: readonly ByteRange[],
  first: RangeStream | undefined,
  openRange: (start: number, end: number, version: ObjectVersion) => Promise<RangeStream>,
  options: { lendsChunks?: boolean } = {},
): BlobReader {
  let current = first;
  let etag = first?.etag;
  const open = async (start: number, end: number): Promise<RangeStream> => {
    const stream = await openRange(start, end, { sizeBytes, etag });
    // The openers check the size too; a socket read (s3-socket-read.ts) only here.
    if (stream.sizeBytes !== sizeBytes) {
      stream.destroy();
      throw objectChanged(sha256, `bytes=${start}-${end}`, `${stream.sizeBytes} bytes, not ${sizeBytes}`);
    }
    etag ??= stream.etag;
    return stream;
  };
  const endFor = (position: number) =>
    ranges.find((r) => r.start <= position && position <= r.end)?.end ?? sizeBytes - 1;
  const reader: BlobReader = {
    sizeBytes,
    async read(buffer, offset, length, position) {
      if (!current || current.position !== position) {
        current?.destroy();
        current = undefined;
        if (position >= sizeBytes) return { bytesRead: 0 };
        current = await open(position, endFor(position));
      }
      const bytesRead = await current.readInto(buffer, offset, length);
      return { bytesRead };
    },
    async *chunks(range, signal) {
      if (!current || current.position !== range.start) {
        current?.destroy();
        current = await open(range.start, range.end);
      }
      const stream = current;
      for (let position = range.start; position <= range.end; ) {
        signal.throwIfAborted();
        const chunk = await stream.next(range.end - position + 1);
        // The store's fault (a short answer), not a damaged catalog: 502, as any store failure.
        if (!chunk)
          throw new StorageError(
            'upstream_unreachable',
            `The artifact store ended blob ${sha256} at byte ${position}, before byte ${range.end}.`,
          );
        position += chunk.length;
        yield chunk;
      }
    },
    async close() {
      current?.destroy();
      current = undefined;
    },
  };
  if (options.lendsChunks === false) delete reader.chunks;
  return reader;
}
