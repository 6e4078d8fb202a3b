/**
 * A remote store (static HTTP, S3) with its blob reads served through the slice cache: only
 * `openBlob` changes. A blob whose slice digests are recorded is read slice by slice: a slice on
 * disk is read there, a missing one is fetched with one ranged GET of exactly that slice (shared by
 * every concurrent reader), and a read of several slices fetches up to `readaheadSlices` ahead in
 * parallel. A blob without digests (published before they were recorded, not yet scrubbed) is relayed
 * from the store as before, uncached: nothing unverifiable is ever kept.
 */
import { StorageError } from '../errors.ts';
import type { ByteRange } from '../range.ts';
import { slicesCovering, sliceRange, type SliceDigests } from '../slice-digests.ts';
import { isSha256Hex } from '../paths.ts';
import type { ArtifactStore, BlobReader } from '../store.ts';
import type { DigestDirectory } from './digest-directory.ts';
import type { OriginRead, SliceCache, SliceSource } from './slice-cache.ts';

export interface SliceCachedStoreOptions {
  readonly readaheadSlices: number;
}

/** Responses this small (within one slice) wait for the slice's check before the status line (a 502 instead of a cut). */
const VERIFY_BEFORE_HEADERS_BYTES = 1024 * 1024;

export function withSliceCache(
  inner: ArtifactStore,
  cache: SliceCache,
  digests: DigestDirectory,
  options: SliceCachedStoreOptions,
): ArtifactStore {
  return {
    ...inner,
    async openBlob(sha256, ranges = []) {
      if (!isSha256Hex(sha256)) throw new StorageError('not_found');
      const d = await digests.get(sha256);
      if (!d) {
        cache.stats.bypassRequests++;
        return inner.openBlob(sha256, ranges);
      }
      const origin: OriginRead = (range) => inner.openBlob(sha256, [range]);
      const reader = new SlicedReader(cache, sha256, d, origin, options.readaheadSlices);
      // The first slice is acquired now, so a store that is down or lost the blob fails before
      // any response header (a clean 502/504/500), as the uncached stores do. No ranges (a HEAD):
      // the recorded digests already say the blob exists and its size; the store is not asked.
      const first = ranges[0];
      if (first) {
        try {
          const source = reader.prepare(slicesCovering(first, d.sliceBytes).first);
          if (source.kind === 'fill') {
            await source.fill.opened;
            const total = ranges.reduce((n, r) => n + r.end - r.start + 1, 0);
            const { first: a, last: b } = slicesCovering({ start: first.start, end: ranges.at(-1)!.end }, d.sliceBytes);
            if (a === b && total <= VERIFY_BEFORE_HEADERS_BYTES) {
              await source.fill.done;
              if (source.fill.state === 'failed') throw source.fill.error;
            }
          }
        } catch (err) {
          await reader.close();
          throw err;
        }
      }
      return reader;
    },
  };
}

/** One open blob read through the cache: sources acquired ahead, each released once read. */
class SlicedReader implements BlobReader {
  readonly sizeBytes: number;
  readonly #cache: SliceCache;
  readonly #sha256: string;
  readonly #digests: SliceDigests;
  readonly #origin: OriginRead;
  readonly #readahead: number;
  readonly #held = new Map<number, SliceSource>();
  #missed = false;
  #counted = false;
  /** The `read()` form's current stream. */
  #cursor: { position: number; iterator: AsyncGenerator<Buffer>; leftover: Buffer | undefined } | undefined;

  constructor(cache: SliceCache, sha256: string, digests: SliceDigests, origin: OriginRead, readahead: number) {
    this.#cache = cache;
    this.#sha256 = sha256;
    this.#digests = digests;
    this.#origin = origin;
    this.#readahead = readahead;
    this.sizeBytes = digests.sizeBytes;
  }

  /** The source of slice `index`, acquired once and held until read or closed. */
  prepare(index: number): SliceSource {
    let source = this.#held.get(index);
    if (!source) {
      source = this.#cache.acquire(this.#sha256, this.#digests, index, this.#origin);
      if (source.kind === 'fill') this.#missed = true;
      this.#held.set(index, source);
    }
    return source;
  }

  #releaseSlice(index: number): void {
    const source = this.#held.get(index);
    if (!source) return;
    this.#held.delete(index);
    this.#cache.release(source);
  }

  async *chunks(range: ByteRange, signal?: AbortSignal): AsyncGenerator<Buffer> {
    const { first, last } = slicesCovering(range, this.#digests.sliceBytes);
    for (let index = first; index <= last; index++) {
      // Fetch ahead, in parallel, only what this range will read.
      for (let ahead = index + 1; ahead <= Math.min(last, index + this.#readahead); ahead++) this.prepare(ahead);
      const source = this.prepare(index);
      const bounds = sliceRange(this.#digests, index);
      const from = Math.max(range.start, bounds.start) - bounds.start;
      const to = Math.min(range.end, bounds.end) - bounds.start;
      try {
        yield* this.#cache.read(source, from, to, signal, () => {
          this.#missed = true;
          return this.#cache.acquire(this.#sha256, this.#digests, index, this.#origin);
        });
      } finally {
        this.#releaseSlice(index);
      }
    }
  }

  async read(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }> {
    if (position >= this.sizeBytes) return { bytesRead: 0 };
    if (!this.#cursor || this.#cursor.position !== position) {
      await this.#cursor?.iterator.return(undefined);
      this.#cursor = {
        position,
        iterator: this.chunks({ start: position, end: this.sizeBytes - 1 }),
        leftover: undefined,
      };
    }
    const cursor = this.#cursor;
    let chunk = cursor.leftover;
    cursor.leftover = undefined;
    if (!chunk) {
      const next = await cursor.iterator.next();
      if (next.done) return { bytesRead: 0 };
      chunk = next.value;
    }
    const n = Math.min(length, chunk.length);
    chunk.copy(buffer, offset, 0, n);
    if (n < chunk.length) cursor.leftover = chunk.subarray(n);
    cursor.position += n;
    return { bytesRead: n };
  }

  async close(): Promise<void> {
    await this.#cursor?.iterator.return(undefined);
    this.#cursor = undefined;
    for (const index of [...this.#held.keys()]) this.#releaseSlice(index);
    if (!this.#counted) {
      this.#counted = true;
      if (this.#missed) this.#cache.stats.missRequests++;
      else this.#cache.stats.hitRequests++;
    }
  }
}
