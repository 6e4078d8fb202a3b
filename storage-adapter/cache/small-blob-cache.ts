/**
 * Whole small blobs in memory, so a hot small object costs no filesystem call or upstream request.
 * Blobs are content-addressed and immutable: a cached copy is right for as long as its name exists,
 * and every copy is checked against its sha256 when it is filled, so the cache never holds bytes
 * that do not match their name (a damaged blob is refused with a 500, not cached, and left for
 * `arkvory scrub`). Bounded by total bytes; objects above `maxObjectBytes` are never cached.
 *
 * It wraps any `ArtifactStore` (directory, static HTTP, S3): only `openBlob` changes (and `cachedBlob`, a hit at once, is added). A miss opens the blob
 * through the inner store and, when it is small enough, reads it whole; on a store where reads are
 * requests (not the directory store) that happens only when the request wants the whole blob (a
 * full GET or a HEAD), so a range request never costs a second upstream read.
 */
import { createHash } from 'node:crypto';
import type { ByteRange } from '../range.ts';
import type { BlobReader, ArtifactStore } from '../store.ts';
import { BoundedLru } from '../../lib/bounded-lru.ts';
import type { MonotonicClock } from '../../lib/epoch-watcher.ts';
import type { CacheStats } from '../../lib/cache-stats.ts';

export interface SmallBlobCacheOptions {
  /** Total bytes held; 0 disables the cache. */
  readonly maxBytes: number;
  /** Largest blob that is cached. */
  readonly maxObjectBytes: number;
}

export class SmallBlobCache {
  readonly #blobs: BoundedLru<string, Buffer>;
  readonly maxObjectBytes: number;
  #hits = 0;
  #misses = 0;

  constructor(options: SmallBlobCacheOptions) {
    this.maxObjectBytes = Math.min(options.maxObjectBytes, options.maxBytes);
    this.#blobs = new BoundedLru({ maxEntries: Number.POSITIVE_INFINITY, maxBytes: options.maxBytes });
  }

  get(sha256: string): Buffer | undefined {
    const hit = this.#blobs.get(sha256);
    if (hit) this.#hits++;
    else this.#misses++;
    return hit;
  }

  set(sha256: string, bytes: Buffer): void {
    if (bytes.length <= this.maxObjectBytes) this.#blobs.set(sha256, bytes, bytes.length);
  }

  delete(sha256: string): void {
    this.#blobs.delete(sha256);
  }

  stats(): CacheStats {
    return {
      cache: 'blob',
      hits: this.#hits,
      misses: this.#misses,
      entries: this.#blobs.size,
      bytes: this.#blobs.bytes,
    };
  }
}

/** Readers hold no state (close does nothing): one per cached buffer, shared by its requests. */
const readers = new WeakMap<Buffer, BlobReader>();

function readerOf(bytes: Buffer): BlobReader {
  let reader = readers.get(bytes);
  if (!reader) {
    reader = bufferReader(bytes);
    readers.set(bytes, reader);
  }
  return reader;
}

/** A reader over bytes in memory; `chunks` hands out views, so the response writes them without a copy. */
export function bufferReader(bytes: Buffer): BlobReader {
  return {
    sizeBytes: bytes.length,
    bytes,
    async read(buffer, offset, length, position) {
      if (position >= bytes.length) return { bytesRead: 0 };
      return { bytesRead: bytes.copy(buffer, offset, position, Math.min(bytes.length, position + length)) };
    },
    async *chunks(range) {
      yield bytes.subarray(range.start, range.end + 1);
    },
    async close() {},
  };
}

function wantsWholeBlob(ranges: readonly ByteRange[], sizeBytes: number): boolean {
  return ranges.length === 0 || (ranges.length === 1 && ranges[0]!.start === 0 && ranges[0]!.end === sizeBytes - 1);
}

/**
 * Reads `reader` whole and checks it (then closes it); or, when that takes longer than `ms` on
 * `clock` (checked between reads), stops and hands back what it read with the reader still open
 * (`have` bytes).
 */
async function readWhole(
  reader: BlobReader,
  sha256: string,
  ms: number,
  clock: MonotonicClock,
): Promise<{ bytes: Buffer; have?: number }> {
  const until = clock.monotonicMs() + ms;
  let open = true;
  try {
    const bytes = Buffer.allocUnsafe(reader.sizeBytes);
    for (let position = 0; position < bytes.length; ) {
      if (clock.monotonicMs() > until) {
        open = false;
        return { bytes, have: position };
      }
      const { bytesRead } = await reader.read(bytes, position, bytes.length - position, position);
      if (bytesRead === 0) throw new Error(`blob ${sha256} ended at byte ${position} of ${bytes.length}`);
      position += bytesRead;
    }
    const actual = createHash('sha256').update(bytes).digest('hex');
    if (actual !== sha256)
      throw new Error(`blob ${sha256} is damaged (its bytes hash to ${actual}); run arkvory scrub`);
    return { bytes };
  } finally {
    if (open) await reader.close();
  }
}

/** The rest of a read given up (readWhole): its first `have` bytes from memory, then `rest` from there on. */
function resumed(bytes: Buffer, have: number, rest: BlobReader): BlobReader {
  return {
    sizeBytes: rest.sizeBytes,
    read(buffer, offset, length, position, signal) {
      if (position >= have) return rest.read(buffer, offset, length, position, signal);
      const n = bytes.copy(buffer, offset, position, Math.min(have, position + length));
      return Promise.resolve({ bytesRead: n });
    },
    close: () => rest.close(),
  };
}

export interface SmallBlobCacheStoreOptions {
  /**
   * Longest a blob is read whole for the cache before its response may start
   * (ARKVORY_STORAGE_TIMEOUT_SECONDS for remote stores): past it the read is relayed uncached, and
   * requests that joined it read on their own. A store trickling a small blob (each piece within
   * its silence bound) otherwise held every request for it without a status line while it trickled.
   */
  readonly readWholeMs?: number;
  /** What `readWholeMs` is measured on (default: the process's monotonic clock); tests move it by hand. */
  readonly clock?: MonotonicClock;
}

const systemClock: MonotonicClock = { monotonicMs: () => performance.now() };

/** `inner` with small blobs served from `cache`; everything but `openBlob` and `cachedBlob` is the inner store's. */
export function withSmallBlobCache(
  inner: ArtifactStore,
  cache: SmallBlobCache,
  options: SmallBlobCacheStoreOptions = {},
): ArtifactStore {
  const readWholeMs = options.readWholeMs ?? Number.POSITIVE_INFINITY;
  const clock = options.clock ?? systemClock;
  /** Whole reads in progress: their bytes, or undefined when one was given up (relayed). */
  const filling = new Map<string, Promise<Buffer | undefined>>();
  return {
    ...inner,
    cachedBlob(sha256) {
      const hit = cache.get(sha256);
      return hit ? readerOf(hit) : undefined;
    },
    async openBlob(sha256, ranges = []) {
      const hit = cache.get(sha256);
      if (hit) return readerOf(hit);
      const pending = filling.get(sha256);
      if (pending) {
        const bytes = await pending;
        if (bytes) return bufferReader(bytes);
        return inner.openBlob(sha256, ranges);
      }
      const reader = await inner.openBlob(sha256, ranges);
      if (reader.sizeBytes > cache.maxObjectBytes || (inner.kind !== 'fs' && !wantsWholeBlob(ranges, reader.sizeBytes)))
        return reader;
      const read = readWhole(reader, sha256, readWholeMs, clock);
      // Joiners share its failure (a damaged blob is refused to them too, never relayed unchecked).
      const joinable = read.then((r) => (r.have === undefined ? r.bytes : undefined));
      joinable.catch(() => {});
      filling.set(sha256, joinable);
      const whole = await read.finally(() => filling.delete(sha256));
      if (whole.have !== undefined) return resumed(whole.bytes, whole.have, reader);
      cache.set(sha256, whole.bytes);
      return bufferReader(whole.bytes);
    },
  };
}
