/**
 * A remote store (static HTTP, S3) with its blob reads served through the slice cache: only
 * `openBlob` changes. A blob whose slice digests are recorded is read slice by slice: a slice on
 * disk is read there, missing ones are fetched with one ranged GET of exactly their span (each
 * slice's fill shared by every concurrent reader), and a read of several slices keeps a window of
 * `readaheadSlices` ahead of the one it sends (see #enter). A blob without digests (published before they were recorded, not yet scrubbed) is relayed
 * from the store as before, uncached: nothing unverifiable is ever kept.
 *
 * The reader offers `read()` only (no `chunks()`): the response reads into its few reused buffers
 * (stream.ts), straight from a slice file for a slice on disk, as the directory store is read, or
 * copied out of a fill's buffer for a slice being fetched, so no buffer is allocated per chunk and
 * a fill's buffer is reused as soon as its readers are done (slice-buffers.ts). A small blob (one
 * slice of at most SMALL_BLOB_BYTES) on disk is read whole at open and handed over as `bytes`, so
 * headers and body leave in one write.
 */
import type { FileHandle } from 'node:fs/promises';
import type { MonotonicClock } from '../../lib/epoch-watcher.ts';
import { StorageError } from '../errors.ts';
import type { ByteRange } from '../range.ts';
import { slicesCovering, sliceRange, type SliceDigests } from '../slice-digests.ts';
import { isSha256Hex } from '../paths.ts';
import type { ArtifactStore, BlobReader } from '../store.ts';
import type { DigestDirectory } from './digest-directory.ts';
import { type Fill, type FillCursor, fillCursor, readFillInto } from './fill.ts';
import type { OriginRead, SliceCache, SliceSource } from './slice-cache.ts';

export interface SliceCachedStoreOptions {
  readonly readaheadSlices: number;
  /**
   * ARKVORY_STORAGE_TIMEOUT_SECONDS, which bounds two waits: a small response's wait for its
   * slice's check before its status line (past it, it goes out as a larger one does), and a read's
   * wait for fill memory (past it, 503 `slice_cache_memory_full`).
   */
  readonly storageTimeoutMs: number;
  /** What those waits are measured on (default: the process's monotonic clock); tests move it by hand. */
  readonly clock?: MonotonicClock | undefined;
  /** What ends those waits (default: Node's timers); tests fire them by hand with the clock. */
  readonly timers?: WaitTimers | undefined;
}

/**
 * Scheduling for the reader's bounded waits: structurally policy/timers.ts's `Timers` (storage-adapter
 * does not import policy), so its `ManualTimers` drives them in tests.
 */
export interface WaitTimers {
  setTimeout(callback: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
}

const systemClock: MonotonicClock = { monotonicMs: () => performance.now() };
const systemTimers: WaitTimers = {
  setTimeout: (callback, delayMs) => setTimeout(callback, delayMs),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Responses this small (within one slice) wait for the slice's check before the status line (a 502 instead of a cut). */
const VERIFY_BEFORE_HEADERS_BYTES = 1024 * 1024;
/** A blob this small held on disk is read whole at open (one read, then one write with the headers). */
const SMALL_BLOB_BYTES = 64 * 1024;

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
      const reader = new SlicedReader(cache, sha256, d, origin, options, ranges);
      // No ranges (a HEAD): the recorded digests already say the blob exists and its size; the
      // store is not asked.
      const first = ranges[0];
      if (!first) return reader;
      let warm = true;
      for (const range of ranges) {
        const { first: a, last: b } = slicesCovering(range, d.sliceBytes);
        for (let index = a; warm && index <= b; index++) warm = cache.holds(sha256, d, index);
      }
      if (warm && d.sizeBytes <= SMALL_BLOB_BYTES && d.sizeBytes <= d.sliceBytes) {
        const bytes = await reader.wholeFromDisk().catch(async (err: unknown) => {
          await reader.close();
          throw err;
        });
        if (bytes) return inMemory(bytes);
        warm = false;
      }
      if (warm) return reader;
      // The first slice is acquired now, so a store that is down or lost the blob fails before
      // any response header (a clean 502/504/500), as the uncached stores do.
      try {
        const covered = slicesCovering({ start: first.start, end: ranges.at(-1)!.end }, d.sliceBytes);
        const source = await reader.prepareFirst(first);
        if (source.kind === 'fill') {
          await source.fill.opened;
          const total = ranges.reduce((n, r) => n + r.end - r.start + 1, 0);
          // Bounded: a store trickling the slice (each piece within its silence bound) would hold
          // this request, and every one joined to the fill, without a status line for as long as
          // it trickles, a client that left unnoticed. Past the bound the response goes out and is
          // sent as a larger one is: its last byte only once verified, cut on a mismatch.
          if (
            covered.first === covered.last &&
            total <= VERIFY_BEFORE_HEADERS_BYTES &&
            (await settlesWithin(source.fill.done, options.storageTimeoutMs, options.timers ?? systemTimers)) &&
            source.fill.state === 'failed'
          )
            throw source.fill.error;
        }
      } catch (err) {
        await reader.close();
        throw err;
      }
      return reader;
    },
  };
}

/** Whether `done` settled within `ms` (false: it goes on, unwaited). */
function settlesWithin(done: Promise<void>, ms: number, timers: WaitTimers): Promise<boolean> {
  let timer: unknown;
  const late = new Promise<boolean>((resolve) => {
    timer = timers.setTimeout(() => resolve(false), ms);
  });
  return Promise.race([done.then(() => true), late]).finally(() => timers.clearTimeout(timer));
}

/** A reader over bytes already in memory (a small blob read whole from its slice file). */
function inMemory(bytes: Buffer): BlobReader {
  return {
    sizeBytes: bytes.length,
    bytes,
    async read(buffer, offset, length, position) {
      const n = Math.max(0, Math.min(length, bytes.length - position));
      bytes.copy(buffer, offset, position, position + n);
      return { bytesRead: n };
    },
    async close() {},
  };
}

/** A slice on disk being read: its bounds in the blob, and its open, checked file. */
interface DiskSlice {
  readonly index: number;
  readonly start: number;
  readonly end: number;
  readonly file: FileHandle;
}

/** One open blob read through the cache: sources acquired ahead, each released once read past. */
class SlicedReader implements BlobReader {
  readonly sizeBytes: number;
  readonly #cache: SliceCache;
  readonly #sha256: string;
  readonly #digests: SliceDigests;
  readonly #origin: OriginRead;
  readonly #readahead: number;
  /** Longest a read waits for fill memory (SliceCache.memoryFreed) before it fails. */
  readonly #memoryWaitMs: number;
  readonly #clock: MonotonicClock;
  readonly #timers: WaitTimers;
  /** The ranges the response reads, in order (a fill withholds the last byte of each until verified). */
  readonly #ranges: readonly ByteRange[];
  readonly #held = new Map<number, SliceSource>();
  /** The slice on disk being read, open and trusted. */
  #disk: DiskSlice | undefined;
  /** Progress through the fill being read (slice index and cursor). */
  #fill: { index: number; cursor: FillCursor; fill: Fill } | undefined;
  #missed = false;
  #counted = false;

  constructor(
    cache: SliceCache,
    sha256: string,
    digests: SliceDigests,
    origin: OriginRead,
    options: SliceCachedStoreOptions,
    ranges: readonly ByteRange[],
  ) {
    this.#cache = cache;
    this.#sha256 = sha256;
    this.#digests = digests;
    this.#origin = origin;
    this.#readahead = options.readaheadSlices;
    this.#memoryWaitMs = options.storageTimeoutMs;
    this.#clock = options.clock ?? systemClock;
    this.#timers = options.timers ?? systemTimers;
    this.#ranges = ranges;
    this.sizeBytes = digests.sizeBytes;
  }

  /**
   * The source of slice `index`, acquired once and held until read past or closed; undefined when
   * it needs a new fill and the cache's fill memory is at its bound (SliceCache.acquireRun).
   */
  prepare(index: number): SliceSource | undefined {
    this.prepareRun(index, index);
    return this.#held.get(index);
  }

  /**
   * The source of slice `index` (as `prepare`), waiting for fill memory while the cache has none
   * to spare: up to the store's timeout, then 503 `slice_cache_memory_full` (before the status
   * line; a cut after it). A client that leaves stops the wait: nothing is held meanwhile.
   */
  async #need(index: number, signal: AbortSignal | undefined): Promise<SliceSource> {
    const deadline = this.#clock.monotonicMs() + this.#memoryWaitMs;
    for (;;) {
      signal?.throwIfAborted();
      const source = this.prepare(index);
      if (source) return source;
      const left = deadline - this.#clock.monotonicMs();
      if (left <= 0 || !(await this.#memoryFreedWithin(signal, left))) {
        signal?.throwIfAborted();
        if (this.#clock.monotonicMs() >= deadline)
          throw new StorageError('slice_cache_memory_full', undefined, { headers: { 'Retry-After': '5' } });
      }
    }
  }

  /** Whether some fill memory was given back within `ms`; false too when `signal` aborts (the caller checks it). */
  async #memoryFreedWithin(signal: AbortSignal | undefined, ms: number): Promise<boolean> {
    const late = new AbortController();
    const timer = this.#timers.setTimeout(() => late.abort(), ms);
    try {
      return await this.#cache.memoryFreed(signal ? AbortSignal.any([signal, late.signal]) : late.signal);
    } finally {
      this.#timers.clearTimeout(timer);
    }
  }

  /**
   * Acquires slices `first`..`last` not held yet, each run of missing ones with one origin read;
   * stops at the first one the cache's fill memory has no room for (the rest are readahead, or
   * waited for by #need).
   */
  prepareRun(first: number, last: number): void {
    for (let index = first; index <= last; index++) {
      if (this.#held.has(index)) continue;
      let end = index;
      while (end < last && !this.#held.has(end + 1)) end++;
      const sources = this.#cache.acquireRun(this.#sha256, this.#digests, index, end, this.#origin, true);
      for (const [i, source] of sources.entries()) {
        if (source.kind === 'fill') this.#missed = true;
        this.#held.set(index + i, source);
      }
      if (sources.length < end - index + 1) return;
      index = end;
    }
  }

  #releaseSlice(index: number): void {
    const source = this.#held.get(index);
    if (!source) return;
    this.#held.delete(index);
    if (this.#disk?.index === index) this.#disk = undefined;
    if (this.#fill?.index === index) this.#fill = undefined;
    this.#cache.release(source);
  }

  /** The end of the requested range that holds `position` (the blob's end outside them). */
  #rangeEnd(position: number): number {
    for (const r of this.#ranges) if (r.start <= position && position <= r.end) return r.end;
    return this.sizeBytes - 1;
  }

  /**
   * The whole blob (one slice) read from disk, the reader closed (a hit); undefined, the reader
   * still open, when the slice is not on disk after all or failed its check.
   */
  async wholeFromDisk(): Promise<Buffer | undefined> {
    const source = this.prepare(0);
    const disk = source?.kind === 'disk' ? await this.#openDisk(0, source) : undefined;
    if (!disk) return undefined;
    const bytes = Buffer.allocUnsafe(this.sizeBytes);
    try {
      for (let position = 0; position < bytes.length; ) {
        const { bytesRead } = await disk.file.read(bytes, position, bytes.length - position, position);
        if (bytesRead === 0) throw new Error(`cached slice 0 of blob ${this.#sha256} ended at byte ${position}`);
        position += bytesRead;
      }
    } catch (err) {
      this.#diskFailed(0, err);
      return undefined;
    }
    this.#cache.stats.hitBytes += bytes.length;
    await this.close();
    return bytes;
  }

  /**
   * The file of a disk source, open and trusted; undefined when it was removed or could not be
   * opened or checked (then released: acquired again, it is a fill from the store).
   */
  async #openDisk(index: number, source: Extract<SliceSource, { kind: 'disk' }>): Promise<DiskSlice | undefined> {
    let file: FileHandle | undefined;
    try {
      file = await this.#cache.openDisk(source, undefined);
    } catch (err) {
      this.#diskFailed(index, err);
      return undefined;
    }
    if (file === undefined) {
      this.#releaseSlice(index);
      return undefined;
    }
    const bounds = sliceRange(this.#digests, index);
    this.#disk = { index, start: bounds.start, end: bounds.end, file };
    return this.#disk;
  }

  /**
   * The held disk slice `index` could not be opened or read: told to the cache (which then treats
   * it as not held) and released, so acquiring it again gives a fill from the store, verified like
   * any other; the response goes on from there. Bytes already sent from its file were checked.
   */
  #diskFailed(index: number, err: unknown): void {
    const source = this.#held.get(index);
    if (source?.kind !== 'disk') throw err;
    this.#cache.diskFailed(source, err);
    this.#releaseSlice(index);
    this.#missed = true;
  }

  /**
   * Moves on to slice `index`: slices before it are released, and the next ones of the range are
   * fetched ahead, up to `readahead` slices. The window is topped up only once fewer than half of
   * it is held, so the slices ahead are fetched a few at a time, each few with one origin read.
   */
  #enter(index: number, position: number): void {
    const last = Math.min(Math.floor(this.#rangeEnd(position) / this.#digests.sliceBytes), index + this.#readahead);
    // Every slice outside the window goes, not only those behind: ranges may come in any order,
    // and one request must not pin a slice per range it has read.
    for (const held of [...this.#held.keys()]) if (held < index || held > last) this.#releaseSlice(held);
    // Past the memory bound the slice being read comes first: no readahead is held while it waits.
    if (!this.#held.has(index) && !this.prepare(index)) return;
    let ahead = 0;
    while (index + ahead < last && this.#held.has(index + ahead + 1)) ahead++;
    if (index + ahead < last && ahead < Math.ceil(this.#readahead / 2)) this.prepareRun(index + 1, last);
  }

  /** The first slices of a read: its first slice and the window ahead of it, within the first range. */
  prepareFirst(range: ByteRange): Promise<SliceSource> {
    const { first, last } = slicesCovering(range, this.#digests.sliceBytes);
    this.prepareRun(first, Math.min(last, first + this.#readahead));
    return this.#need(first, undefined);
  }

  /**
   * Gives back the fills held (the one being read and those ahead) that are verified and on disk
   * now; a later read takes the slice from disk. So a slow reader holds files, not a fill's memory
   * per slice of its window, once the slices are kept.
   */
  #trade(): void {
    for (const [index, source] of this.#held)
      if (
        source.kind === 'fill' &&
        source.fill.state === 'verified' &&
        this.#cache.holds(this.#sha256, this.#digests, index)
      )
        this.#releaseSlice(index);
  }

  async read(
    buffer: Buffer,
    offset: number,
    length: number,
    position: number,
    signal?: AbortSignal,
  ): Promise<{ bytesRead: number }> {
    if (position >= this.sizeBytes) return { bytesRead: 0 };
    this.#trade();
    const disk = this.#disk;
    if (disk && position >= disk.start && position <= disk.end)
      return this.#readDisk(disk, buffer, offset, length, position, signal);
    const index = Math.floor(position / this.#digests.sliceBytes);
    if (this.#fill?.index !== index) this.#enter(index, position);
    for (;;) {
      // Synchronous while there is memory (the common path); waits only past the bound.
      const source = this.prepare(index) ?? (await this.#need(index, signal));
      if (source.kind === 'disk') {
        const opened = await this.#openDisk(index, source);
        // Removed (gone, or failed its check): acquired again, now as a fill.
        if (opened) return this.#readDisk(opened, buffer, offset, length, position, signal);
        this.#missed = true;
        continue;
      }
      if (this.#fill?.index !== index || this.#fill.fill !== source.fill)
        this.#fill = { index, cursor: fillCursor(source.fill), fill: source.fill };
      const bounds = sliceRange(this.#digests, index);
      const to = Math.min(this.#rangeEnd(position), bounds.end) - bounds.start;
      // A client gone while the store is silent stops waiting now: the reader is then closed,
      // and the fill let go with it (SliceCache.release).
      const n = await readFillInto(
        source.fill,
        this.#fill.cursor,
        position - bounds.start,
        to,
        buffer,
        offset,
        length,
        signal,
      );
      this.#cache.stats.missBytes += n;
      return { bytesRead: n };
    }
  }

  async #readDisk(
    disk: DiskSlice,
    buffer: Buffer,
    offset: number,
    length: number,
    position: number,
    signal: AbortSignal | undefined,
  ): Promise<{ bytesRead: number }> {
    const want = Math.min(length, disk.end - position + 1);
    const at = position - disk.start;
    let bytesRead: number;
    try {
      ({ bytesRead } = await disk.file.read(buffer, offset, want, at));
      if (bytesRead === 0) throw new Error(`cached slice ${disk.index} of blob ${this.#sha256} ended early`);
    } catch (err) {
      this.#diskFailed(disk.index, err);
      return this.read(buffer, offset, length, position, signal);
    }
    this.#cache.stats.hitBytes += bytesRead;
    return { bytesRead };
  }

  async close(): Promise<void> {
    this.#disk = undefined;
    this.#fill = undefined;
    for (const index of [...this.#held.keys()]) this.#releaseSlice(index);
    if (!this.#counted) {
      this.#counted = true;
      if (this.#missed) this.#cache.stats.missRequests++;
      else this.#cache.stats.hitRequests++;
    }
  }
}
