/**
 * The slice cache on local disk: verified slices of blobs from a remote store (static HTTP, S3).
 *
 * Layout under the cache directory:
 *   slices/ab/<sha256>-<sliceBytes>-<index>   one verified slice (bytes only)
 *   tmp/<…>.<random>                          a slice file being written
 * A fill hashes the slice as it arrives into memory; only once it matched its digest is it written
 * to tmp/, fsynced, renamed into slices/ and its directory fsynced (lib/fs-sync.ts, as every
 * durable write of the project); tmp/ is emptied at start. What keeps a damaged slice from being
 * served is not the fsync: after a restart every slice is re-verified on its first read (below), so
 * a file a crash or power loss left empty, short or wrong is found then, removed and fetched again.
 * The fsync makes a kept slice survive the power cut instead of costing that fetch.
 *
 * Trusting a slice on disk: it is checked against its digest the first time this process reads
 * it; after that it is trusted while its file's identity (inode, size, mtime, ctime) is unchanged,
 * read with one fstat on every read of the slice. Any write to the file through the filesystem
 * moves ctime, so a slice changed on disk is re-hashed before it is served; a mismatch removes it
 * (counted, logged) and the slice is fetched again. Hashing on every read would halve the
 * throughput of a warm read.
 *
 * Descriptors: a checked slice's file stays open for the next read (up to MAX_OPEN_FILES, least
 * recently used closed first, like the directory store's open-file cache), so a warm read costs
 * one fstat (synchronous: inode metadata, no disk wait, cheaper than a thread-pool round trip) and
 * its reads, not an open and a close per slice. A descriptor is closed when its slice leaves the
 * index, or at its last reader's release if it is being read then.
 *
 * Bounds: the bytes of slices on disk plus the slices being written stay under `maxBytes`, their
 * files under `maxFiles` (a tiny slice still costs an inode), and the filesystem keeps
 * `minFreeBytes` free; the least recently used unpinned slices are evicted to make room. When no room can be made (every slice in use, a fill larger than the bound, a full
 * disk), the fill is relayed from memory to its readers and not kept: a degraded miss, never an
 * error. A slice file that cannot be opened or read (an I/O error) is fetched from the store for its
 * reader instead (`diskFailed`): a failing disk is a miss, never an error either. Memory: every
 * fill's buffer counts against `maxMemoryBytes` from its acquire until its last holder lets go
 * (`stats.memoryBytes`); the reads of responses make new fills only within it (acquireRun). A missing or
 * deleted directory is a cold start: it is made again.
 */
import { createHash, randomUUID } from 'node:crypto';
import { fstatSync } from 'node:fs';
import { type FileHandle, mkdir, open, readdir, rename, rm, stat, statfs, unlink } from 'node:fs/promises';
import path from 'node:path';
import { fsyncDirectory, mkdirDurable } from '../../lib/fs-sync.ts';
import { StorageError } from '../errors.ts';
import type { ByteRange } from '../range.ts';
import { type SliceDigests, sliceDigest, sliceRange } from '../slice-digests.ts';
import type { BlobReader } from '../store.ts';
import { Fill } from './fill.ts';
import { SliceBuffers } from './slice-buffers.ts';
import { diskBytes, excessOver, type IndexedSlice, SliceIndex } from './slice-index.ts';

export interface SliceCacheLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface SliceCacheOptions {
  readonly dir: string;
  readonly maxBytes: number;
  /** Slice files held plus being written (ARKVORY_CACHE_MAX_FILES). */
  readonly maxFiles: number;
  readonly minFreeBytes: number;
  readonly log: SliceCacheLog;
  /**
   * Bytes of fill buffers (slices being fetched, waiting for the disk, or relayed and not kept) the
   * process holds at most (ARKVORY_CACHE_MEMORY_MAX_BYTES; default DEFAULT_MEMORY_MAX_BYTES): see
   * `acquireRun` with `bounded`.
   */
  readonly maxMemoryBytes?: number;
  /** Makes a written slice file durable before its rename (default its fsync); injectable for tests. */
  readonly syncFile?: (handle: FileHandle) => Promise<void>;
  /** Makes a directory's entries durable after a rename or mkdir in it (default fsyncDirectory); injectable for tests. */
  readonly syncDirectory?: (dir: string) => Promise<void>;
}

const fsyncFile = (handle: FileHandle): Promise<void> => handle.sync();

/** Opens a ranged read of a blob on the origin (the inner store's `openBlob(sha256, [range])`). */
export type OriginRead = (range: ByteRange) => Promise<BlobReader>;

export interface SliceCacheStats {
  hitRequests: number;
  missRequests: number;
  /** Requests for blobs without recorded slice digests, relayed from the store uncached. */
  bypassRequests: number;
  hitBytes: number;
  missBytes: number;
  originBytes: number;
  fillsInFlight: number;
  /** Readers currently waiting on a fill another reader started. */
  waiters: number;
  /** Fills other readers joined, since start. */
  joins: number;
  digestFailures: { origin: number; disk: number };
  /** Slice files that could not be opened or read (an I/O error, out of descriptors): taken from the store instead. */
  diskErrors: number;
  evictions: number;
  /** Fills relayed without being kept (no room under the bounds, a full disk). */
  relayedFills: number;
  /** Fills stopped because every reader of them went away (#stillWanted). */
  abandonedFills: number;
  /** Store answers that failed or ended mid-run, read on from where they stopped (#runFills). */
  originResumes: number;
  heldBytes: number;
  heldSlices: number;
  /** Bytes of fill buffers held now (slices in memory: being fetched, waiting for the disk, or relayed). */
  memoryBytes: number;
}

/** What a reader gets for one slice: a verified file, or a fill in progress. */
export type SliceSource =
  | { readonly kind: 'disk'; readonly slice: IndexedSlice; readonly file: string; readonly digest: Buffer }
  | { readonly kind: 'fill'; readonly fill: Fill; readonly started: boolean };

/** One slice being fetched from the artifact store into a fill. */
interface FillJob {
  readonly key: string;
  readonly sha256: string;
  readonly digests: SliceDigests;
  readonly index: number;
  readonly range: ByteRange;
  readonly fill: Fill;
  readonly origin: OriginRead;
}

/**
 * What a fill nobody reads any more fails with (#stillWanted). No reader receives it: it only ends
 * the fill's waits.
 */
const ABANDONED = new StorageError(
  'upstream_unreachable',
  'The fetch of this slice from the artifact store was stopped: no reader was waiting for it.',
);

/** Slice files kept open between reads (see the header). */
const MAX_OPEN_FILES = 256;
/** Largest read of a slice file at a time while it is hashed (#check). */
const HASH_READ_BYTES = 1024 * 1024;
/**
 * How many times one run of fills reads on from where the store's answer failed or ended early
 * before it gives up: a connection reset mid-body then costs a client nothing, a store that keeps
 * failing still fails the run at once.
 */
const ORIGIN_RESUMES = 2;
/** Largest read from the origin into a fill's buffer at a time. */
const ORIGIN_READ_BYTES = 1024 * 1024;
/** Fill buffers kept for the next fills (SliceBuffers): enough for a read and its readahead at 8 MiB slices. */
const FREE_FILL_BUFFER_BYTES = 48 * 1024 * 1024;
/**
 * Default bound on the bytes of fill buffers held (maxMemoryBytes): eight download windows at the
 * default slice size and readahead (5 × 8 MiB each), so a few hundred slow downloads from a cache
 * that cannot write cost a bounded 320 MiB, not 40 MiB each.
 */
export const DEFAULT_MEMORY_MAX_BYTES = 320 * 1024 * 1024;
/** Bytes of verified slices waiting for the disk, all fills together (see #keep). */
const WRITE_BEHIND_MAX_BYTES = 64 * 1024 * 1024;

/** What identifies a file's contents as checked: any write through the filesystem changes it. */
function signatureOf(stat: { ino: bigint; size: bigint; mtimeNs: bigint; ctimeNs: bigint }): string {
  return `${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`;
}

export class SliceCache {
  readonly #options: SliceCacheOptions;
  readonly #index = new SliceIndex();
  readonly #fills = new Map<string, Fill>();
  readonly #buffers = new SliceBuffers(FREE_FILL_BUFFER_BYTES);
  /** Slices whose file is open (`IndexedSlice.handle`), least recently read first. */
  readonly #open = new Set<IndexedSlice>();
  /** Slices being checked against their digest (#check), one reader at a time. */
  readonly #checking = new Map<IndexedSlice, Promise<void>>();
  /**
   * For each fill being pulled from the store: stops its run now when nobody reads it or any later
   * fill of the run any more (#stillWanted), asked when its last reader lets go (release).
   */
  readonly #unwanted = new Map<Fill, () => void>();
  /** Descriptors of slices whose file changed while others read through them (#retireFile). */
  readonly #retired = new Map<IndexedSlice, FileHandle[]>();
  #reserved = 0;
  /** Slice files being written under a reservation (#makeRoom): one per reservation. */
  #reservedFiles = 0;
  /** Bytes of verified slices queued for or being written to their files (WRITE_BEHIND_MAX_BYTES). */
  #behind = 0;
  /** The last slice file write queued (#keep): files are written one at a time. */
  #writes: Promise<void> = Promise.resolve();
  /** Bytes of evicted slices whose files are still being removed: still on disk, so still counted. */
  #unlinking = 0;
  #unlinkingFiles = 0;
  #closed = false;
  /** Woken whenever fill memory is given back (memoryFreed). */
  readonly #memoryWaiters = new Set<() => void>();
  readonly stats: SliceCacheStats = {
    hitRequests: 0,
    missRequests: 0,
    bypassRequests: 0,
    hitBytes: 0,
    missBytes: 0,
    originBytes: 0,
    fillsInFlight: 0,
    waiters: 0,
    joins: 0,
    digestFailures: { origin: 0, disk: 0 },
    diskErrors: 0,
    evictions: 0,
    relayedFills: 0,
    abandonedFills: 0,
    originResumes: 0,
    heldBytes: 0,
    heldSlices: 0,
    memoryBytes: 0,
  };

  private constructor(options: SliceCacheOptions) {
    this.#options = options;
  }

  /**
   * Makes the directory (a missing one is a cold start), empties tmp/, indexes the slices there and
   * evicts down to the bounds (they may be lower than when the slices were kept: a smaller
   * ARKVORY_CACHE_MAX_BYTES, or more workers sharing it).
   */
  static async open(options: SliceCacheOptions): Promise<SliceCache> {
    const cache = new SliceCache(options);
    await cache.#scan();
    await cache.#evictOverBounds();
    return cache;
  }

  get dir(): string {
    return this.#options.dir;
  }

  async #scan(): Promise<void> {
    const { dir } = this.#options;
    await rm(path.join(dir, 'tmp'), { recursive: true, force: true });
    await mkdir(path.join(dir, 'tmp'), { recursive: true });
    await mkdir(path.join(dir, 'slices'), { recursive: true });
    for (const shard of await readdir(path.join(dir, 'slices'))) {
      const entries = await readdir(path.join(dir, 'slices', shard), { withFileTypes: true }).catch(() => []);
      for (const entry of entries) {
        const parsed = /^([0-9a-f]{64})-(\d+)-(\d+)$/.exec(entry.name);
        const file = path.join(dir, 'slices', shard, entry.name);
        if (!parsed || !entry.isFile()) {
          // Not a slice: removed, or left for the next start when the disk refuses.
          await rm(file, { recursive: true, force: true }).catch(() => {});
          continue;
        }
        let size: number;
        try {
          ({ size } = await stat(file));
        } catch (err) {
          // One file the disk cannot give back (EIO) costs its slice, never the start: left out of
          // the index (so never served), fetched again from the store when read.
          this.#options.log.warn(
            { file, err: { message: (err as Error).message, code: (err as NodeJS.ErrnoException).code } },
            'slice cache: a slice file could not be read at start; left out',
          );
          continue;
        }
        // Unverified (signature undefined) until its first read re-hashes it.
        this.#index.add({
          key: entry.name,
          sha256: parsed[1]!,
          bytes: size,
          signature: undefined,
          pins: 0,
          handle: undefined,
        });
      }
    }
    this.#updateHeld();
  }

  /** At open, nothing pinned: the least recently indexed slices go until the held ones fit. */
  async #evictOverBounds(): Promise<void> {
    const { maxBytes, maxFiles } = this.#options;
    const bytes = this.#index.bytes - maxBytes;
    const files = this.#index.size - maxFiles;
    const victims = this.#index.victims(bytes, files) ?? this.#index.all();
    for (const victim of victims) {
      this.#index.remove(victim.key);
      this.stats.evictions++;
      await unlink(this.#file(victim.key)).catch(() => {});
    }
    this.#updateHeld();
  }

  #updateHeld(): void {
    this.stats.heldBytes = this.#index.bytes;
    this.stats.heldSlices = this.#index.size;
  }

  #file(key: string): string {
    return path.join(this.#options.dir, 'slices', key.slice(0, 2), key);
  }

  /**
   * The source of slice `index` of a blob: on disk (pinned until `release`), a fill already running,
   * or a new fill from `origin`. `release` must follow for every source.
   */
  acquire(sha256: string, digests: SliceDigests, index: number, origin: OriginRead): SliceSource {
    return this.acquireRun(sha256, digests, index, index, origin)[0]!;
  }

  /**
   * The sources of slices `first`..`last` of a blob, as `acquire` gives them, except that each run
   * of consecutive slices neither on disk nor being filled is fetched with one ranged GET of the
   * whole run, its bytes split into the run's fills in order. Why: an origin serves one stream of
   * a blob faster than many short ones (SeaweedFS answered a GET of a blob only once the one before
   * it was sent, ~100–250 ms each for 8 MiB), and a cold full read should run at the pace of the
   * uncached relay, which is one stream. `release` must follow for every source.
   */
  /**
   * With `bounded` (the reads of responses), a new fill is made only while the fill buffers held
   * stay within `maxMemoryBytes` (or none is held: a slice larger than the bound still goes): the
   * sources stop at the first slice past it, and none is acquired when that is `first` (the
   * caller waits for `memoryFreed` and tries again). Why: a fill that cannot be kept (a full or
   * failing cache disk, the write-behind queue full) stays in memory while its readers send it,
   * and a slow client holds its whole window; without a bound, many slow downloads from a cache
   * that cannot write would take the process's memory. Slices on disk and fills already running
   * cost no new memory and are always given.
   */
  acquireRun(
    sha256: string,
    digests: SliceDigests,
    first: number,
    last: number,
    origin: OriginRead,
    bounded = false,
  ): SliceSource[] {
    const sources: SliceSource[] = [];
    let run: FillJob[] = [];
    const start = () => {
      if (run.length > 0) void this.#runFills(run, origin);
      run = [];
    };
    try {
      this.#acquireInto(sources, sha256, digests, first, last, origin, (job) => run.push(job), start, bounded);
    } catch (err) {
      // A slice past the record's end, or a buffer the process could not allocate: what was
      // acquired is given back, and fills already in the table start (then stop: nobody reads
      // them), so no later reader joins a fill that never runs.
      start();
      for (const source of sources) this.release(source);
      throw err;
    }
    start();
    return sources;
  }

  #acquireInto(
    sources: SliceSource[],
    sha256: string,
    digests: SliceDigests,
    first: number,
    last: number,
    origin: OriginRead,
    queue: (job: FillJob) => void,
    start: () => void,
    bounded: boolean,
  ): void {
    for (let index = first; index <= last; index++) {
      const key = `${sha256}-${digests.sliceBytes}-${index}`;
      const slice = this.#index.get(key);
      // One whose file could not be read (diskFailed) is fetched again, as if it were not held.
      if (slice && !slice.unreadable) {
        start();
        slice.pins++;
        this.#index.touch(slice);
        sources.push({ kind: 'disk', slice, file: this.#file(key), digest: sliceDigest(digests, index) });
        continue;
      }
      const running = this.#fills.get(key);
      if (running) {
        start();
        running.hold();
        running.joined++;
        this.stats.joins++;
        this.stats.waiters++;
        sources.push({ kind: 'fill', fill: running, started: false });
        continue;
      }
      const range = sliceRange(digests, index);
      const length = range.end - range.start + 1;
      if (!(length > 0)) throw new RangeError(`slice ${index} of blob ${sha256} is past its recorded size`);
      if (bounded && !this.#memoryFits(length)) return;
      this.stats.memoryBytes += length;
      const fill = new Fill(length, this.#buffers.take(length), (bytes) => {
        this.stats.memoryBytes -= length;
        this.#buffers.give(bytes);
        for (const wake of [...this.#memoryWaiters]) wake();
      });
      fill.hold();
      this.#fills.set(key, fill);
      this.stats.fillsInFlight++;
      queue({ key, sha256, digests, index, range, fill, origin });
      sources.push({ kind: 'fill', fill, started: true });
    }
  }

  #memoryFits(bytes: number): boolean {
    const max = this.#options.maxMemoryBytes ?? DEFAULT_MEMORY_MAX_BYTES;
    return this.stats.memoryBytes === 0 || this.stats.memoryBytes + bytes <= max;
  }

  /**
   * Resolves true once some fill memory is given back; false when `signal` aborts (the caller's
   * bound on the wait, or its client gone: the caller tells which). Nothing of the wait is left
   * behind either way.
   */
  memoryFreed(signal: AbortSignal): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const done = (freed: boolean) => {
        this.#memoryWaiters.delete(wake);
        signal.removeEventListener('abort', aborted);
        resolve(freed);
      };
      const wake = () => done(true);
      const aborted = () => done(false);
      if (signal.aborted) return resolve(false);
      this.#memoryWaiters.add(wake);
      signal.addEventListener('abort', aborted, { once: true });
    });
  }

  release(source: SliceSource): void {
    if (source.kind === 'disk') {
      const { slice } = source;
      slice.pins--;
      if (slice.pins === 0) {
        this.#closeRetired(slice);
        // Removed while it was being read: its descriptor goes with its last reader.
        if (this.#index.get(slice.key) !== slice) this.#closeFile(slice);
      }
    } else {
      if (!source.started) this.stats.waiters--;
      const { fill } = source;
      fill.unhold();
      // Its last reader left (a client gone): the store's answer is let go now, not at its next
      // piece, which a silent store sends only at its timeout.
      if (fill.readers === 0 && fill.state === 'filling') this.#unwanted.get(fill)?.();
    }
  }

  /**
   * An acquired disk slice whose file could not be opened or read (an I/O error, out of
   * descriptors, a file cut short): counted and logged, and from now on acquired as if it were not
   * held, so its reader (released and acquiring it again) and the next ones get it from the store.
   * It stays indexed, counted against the bounds and evictable, until the verified file of that
   * fill replaces it: a failing disk never costs a client its answer, and its bytes on disk are
   * never lost sight of.
   */
  diskFailed(source: Extract<SliceSource, { kind: 'disk' }>, err: unknown): void {
    source.slice.unreadable = true;
    this.stats.diskErrors++;
    const [sha256, , index] = source.slice.key.split('-') as [string, string, string];
    this.#options.log.warn(
      {
        sha256,
        slice: Number(index),
        file: source.file,
        err: { message: (err as Error).message, code: (err as NodeJS.ErrnoException).code },
      },
      'a cached slice could not be read from disk; served from the store',
    );
  }

  /** Whether slice `index` of a blob is on disk now (a read of it would not go to the origin unless it fails its check). */
  holds(sha256: string, digests: SliceDigests, index: number): boolean {
    const slice = this.#index.get(`${sha256}-${digests.sliceBytes}-${index}`);
    return slice !== undefined && !slice.unreadable;
  }

  /**
   * The file of an acquired disk slice, open and trusted (owned by the cache: valid until the
   * source is released, never closed by the caller), or undefined when it is gone or failed its
   * check (then it has been removed). A slice not checked by this process, or whose file changed,
   * is hashed first, by one reader at a time: the others wait and then take its descriptor, so a
   * burst of readers after a restart hashes a slice once. The caller counts the bytes it reads in
   * `stats.hitBytes`.
   */
  async openDisk(
    source: Extract<SliceSource, { kind: 'disk' }>,
    signal: AbortSignal | undefined,
  ): Promise<FileHandle | undefined> {
    const { slice } = source;
    for (let checking = this.#checking.get(slice); checking; checking = this.#checking.get(slice)) await checking;
    const kept = slice.handle;
    if (kept) {
      let signature: string | undefined;
      try {
        signature = signatureOf(fstatSync(kept.fd, { bigint: true }));
      } catch {
        signature = undefined;
      }
      if (signature !== undefined && signature === slice.signature) {
        this.#open.delete(slice);
        this.#open.add(slice);
        return kept;
      }
      // Changed since it was checked: checked again from a fresh open below.
      this.#retireFile(slice);
    }
    const check = this.#check(source, signal);
    this.#checking.set(
      slice,
      check.then(
        () => {},
        () => {},
      ),
    );
    try {
      return await check;
    } finally {
      this.#checking.delete(slice);
    }
  }

  /** Opens a disk slice's file and checks it against its digest unless its signature is the one checked. */
  async #check(
    source: Extract<SliceSource, { kind: 'disk' }>,
    signal: AbortSignal | undefined,
  ): Promise<FileHandle | undefined> {
    const { slice, file } = source;
    // Removed from the index (a newer copy may be indexed under the same key and path by now):
    // nothing here may touch the key or the file.
    const indexed = () => this.#index.get(slice.key) === slice;
    let handle: FileHandle;
    try {
      handle = await open(file, 'r');
    } catch (err) {
      // Out of descriptors or an I/O error says nothing about the slice: it stays indexed (and
      // counted against the bounds) and this open fails (its reader takes the slice from the store,
      // diskFailed); only a file that is gone leaves the index.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      if (indexed()) this.#forget(slice.key);
      return undefined;
    }
    try {
      const signature = signatureOf(await handle.stat({ bigint: true }));
      if (signature === slice.signature) return this.#keepFile(slice, handle);
      signal?.throwIfAborted();
      // Hashed in pieces from the file, not read whole into memory; the file must not change meanwhile.
      let matches = false;
      if (signature.split(':')[1] === String(slice.bytes)) {
        const hash = createHash('sha256');
        const piece = Buffer.allocUnsafe(Math.min(slice.bytes, HASH_READ_BYTES));
        let position = 0;
        while (position < slice.bytes) {
          const { bytesRead } = await handle.read(piece, 0, Math.min(piece.length, slice.bytes - position), position);
          if (bytesRead === 0) break;
          hash.update(piece.subarray(0, bytesRead));
          position += bytesRead;
        }
        matches =
          position === slice.bytes &&
          hash.digest().equals(source.digest) &&
          signatureOf(await handle.stat({ bigint: true })) === signature;
      }
      if (matches) {
        slice.signature = signature;
        return this.#keepFile(slice, handle);
      }
      await handle.close();
      if (!indexed()) return undefined;
      const [sha256, , index] = slice.key.split('-') as [string, string, string];
      this.stats.digestFailures.disk++;
      this.#options.log.warn(
        { sha256, slice: Number(index), file },
        'a cached slice no longer matches its digest; removed, fetching it again from the store',
      );
      this.#forget(slice.key);
      await unlink(file).catch(() => {});
      return undefined;
    } catch (err) {
      if (slice.handle !== handle) await handle.close().catch(() => {});
      throw err;
    }
  }

  /**
   * Keeps a checked slice's descriptor for the next reads, and returns the one to read: when a
   * concurrent read kept one first, that one (this one is closed; another reader may be using
   * the kept one, so it is never replaced). Closed at once if the slice left the index meanwhile
   * and nobody reads it.
   */
  #keepFile(slice: IndexedSlice, handle: FileHandle): FileHandle {
    if (slice.handle) {
      void handle.close().catch(() => {});
      return slice.handle;
    }
    slice.handle = handle;
    this.#open.add(slice);
    if (this.#index.get(slice.key) !== slice && slice.pins === 0) {
      this.#closeFile(slice);
      return handle;
    }
    if (this.#open.size > MAX_OPEN_FILES)
      for (const oldest of this.#open) {
        if (this.#open.size <= MAX_OPEN_FILES) break;
        if (oldest.pins === 0) this.#closeFile(oldest);
      }
    return handle;
  }

  /**
   * Lets go of a kept descriptor whose file changed: closed now when only the caller reads the
   * slice, else at the slice's last release, since other readers may be reading through it.
   */
  #retireFile(slice: IndexedSlice): void {
    const handle = slice.handle;
    if (!handle) return;
    if (slice.pins <= 1) {
      this.#closeFile(slice);
      return;
    }
    slice.handle = undefined;
    this.#open.delete(slice);
    const retired = this.#retired.get(slice);
    if (retired) retired.push(handle);
    else this.#retired.set(slice, [handle]);
  }

  #closeRetired(slice: IndexedSlice): void {
    const retired = this.#retired.get(slice);
    if (!retired) return;
    this.#retired.delete(slice);
    for (const handle of retired) void handle.close().catch(() => {});
  }

  #closeFile(slice: IndexedSlice): void {
    const handle = slice.handle;
    if (!handle) return;
    slice.handle = undefined;
    this.#open.delete(slice);
    void handle.close().catch(() => {});
  }

  /** A slice left the index: its descriptor closes now, or at its last reader's release. */
  #removed(slice: IndexedSlice): void {
    if (slice.pins === 0) this.#closeFile(slice);
  }

  #forget(key: string): void {
    const slice = this.#index.remove(key);
    if (!slice) return;
    this.#removed(slice);
    this.#updateHeld();
  }

  /** A fill is over (verified and kept or not, or failed): nobody joins it any more. */
  #finish(job: FillJob): void {
    // In one step with letting go of its buffer: nobody joins a fill whose buffer may be reused.
    if (this.#fills.get(job.key) === job.fill) this.#fills.delete(job.key);
    this.#unwanted.delete(job.fill);
    this.stats.fillsInFlight--;
    job.fill.unhold();
  }

  /**
   * Fills consecutive slices from one origin read of their span, in order. A slice that fails its
   * digest is fetched once more on its own (the run goes on after it). A store answer that fails or
   * ends early is read on from where it stopped (a new ranged read of the rest of the span, at most
   * ORIGIN_RESUMES times a run): the slice being filled keeps its bytes and its digest covers both
   * reads. Past that, or when the new read is refused, the failure fails the slice being filled and
   * the rest of the run. A verified slice's file is written behind (#keep): the run does not wait
   * for the disk.
   */
  async #runFills(jobs: readonly FillJob[], origin: OriginRead): Promise<void> {
    const span = { start: jobs[0]!.range.start, end: jobs.at(-1)!.range.end };
    let run: OriginRun | undefined;
    let resumes = 0;
    const resume = async (from: number, cut: Error): Promise<OriginRun> => {
      if (resumes >= ORIGIN_RESUMES || this.#closed) throw cut;
      resumes++;
      await run?.close().catch(() => {});
      run = undefined;
      const rest = { start: from, end: span.end };
      this.stats.originResumes++;
      this.#options.log.warn(
        { sha256: jobs[0]!.sha256, from, cause: (cut as { code?: unknown }).code ?? cut.message },
        "the artifact store's answer stopped mid-slice; reading on from where it stopped",
      );
      run = new OriginRun(await origin(rest), rest);
      return run;
    };
    let failure: Error | undefined;
    /** The job being filled. */
    let current = 0;
    let abandoned = false;
    // Abandoned: checked before each slice, on every piece of it (the store's pace), and when a
    // fill's last reader lets go; once, so its fills are counted once.
    const wantedFrom = (at: number): boolean => {
      if (abandoned) return false;
      if (this.#stillWanted(jobs, at)) return true;
      abandoned = true;
      run?.abort();
      return false;
    };
    try {
      run = new OriginRun(await origin(span), span);
      for (const job of jobs) {
        job.fill.markOpened();
        this.#unwanted.set(job.fill, () => wantedFrom(current));
      }
    } catch (err) {
      failure = err as Error;
    }
    try {
      for (const [at, job] of jobs.entries()) {
        current = at;
        if (!failure && run) {
          try {
            const wanted = () => wantedFrom(at);
            if (!wanted()) throw ABANDONED;
            if (await this.#pullVerified(job, run, 1, wanted, resume)) {
              void this.#keep(job).then(
                (kept) => {
                  if (!kept) this.stats.relayedFills++;
                  this.#finish(job);
                },
                () => this.#finish(job),
              );
              continue;
            }
          } catch (err) {
            failure = err as Error;
          }
        }
        if (failure) job.fill.fail(failure);
        else {
          // Fetched again on its own read: meanwhile only this run's later fills are its concern.
          current = at + 1;
          await this.#fetchAgain(job);
        }
        this.#finish(job);
      }
    } finally {
      await run?.close().catch(() => {});
    }
  }

  /**
   * Whether a reader still holds one of the run's fills from `from` on. A fill is fetched for its
   * readers: once none holds this one or any after it (they went away), the rest of the run stops
   * and its fills leave the table at once, so nobody joins a fill that is about to fail. Without
   * this a client could start fills and hang up, again and again, each fill holding a slice of
   * memory and a store connection until it ended.
   */
  #stillWanted(jobs: readonly FillJob[], from: number): boolean {
    for (let at = from; at < jobs.length; at++) if (jobs[at]!.fill.readers > 0) return true;
    for (let at = from; at < jobs.length; at++) {
      const { key, fill } = jobs[at]!;
      if (this.#fills.get(key) === fill) this.#fills.delete(key);
    }
    this.stats.abandonedFills += jobs.length - from;
    return false;
  }

  /** A slice that failed its digest, fetched once more on its own (then kept, or failed). */
  async #fetchAgain(job: FillJob): Promise<void> {
    const { fill } = job;
    fill.restart();
    let run: OriginRun | undefined;
    let abandoned = false;
    const wanted = (): boolean => {
      if (abandoned) return false;
      if (this.#stillWanted([job], 0)) return true;
      abandoned = true;
      run?.abort();
      return false;
    };
    this.#unwanted.set(fill, wanted);
    try {
      if (!wanted()) throw ABANDONED;
      run = new OriginRun(await job.origin(job.range), job.range);
      if (await this.#pullVerified(job, run, 2, wanted)) {
        await run.close().catch(() => {});
        run = undefined;
        if (!(await this.#keep(job))) this.stats.relayedFills++;
        return;
      }
      fill.fail(
        new StorageError(
          'slice_digest_mismatch',
          `Slice ${job.index} of blob ${job.sha256} from the artifact store does not match its recorded digest.`,
        ),
      );
    } catch (err) {
      fill.fail(err as Error);
    } finally {
      await run?.close().catch(() => {});
    }
  }

  /**
   * Pulls one slice from `run` into its fill while hashing it: verified (true), or a mismatch
   * (counted, logged). With `resume`, an answer that fails or ends before the slice is whole is
   * read on from its next byte (`resume` gives the new read, or throws the cut).
   */
  async #pullVerified(
    job: FillJob,
    run: OriginRun,
    attempt: number,
    wanted?: () => boolean,
    resume?: (from: number, cut: Error) => Promise<OriginRun>,
  ): Promise<boolean> {
    const { sha256, digests, index, range, fill } = job;
    // On this thread: a round trip to the hashing worker at the end of every slice delayed
    // its readers more than the hashing costs here (measured, docs/storage-and-content.md).
    const hash = createHash('sha256');
    for (let source = run; ; ) {
      let cut: Error | undefined;
      try {
        await source.into(fill, range.start, (piece) => {
          if (wanted && !wanted()) throw ABANDONED;
          hash.update(piece);
          this.stats.originBytes += piece.length;
        });
      } catch (err) {
        if (err === ABANDONED || !resume) throw err;
        cut = err as Error;
      }
      if (fill.length === fill.sliceLength) break;
      cut ??= new StorageError(
        'upstream_unreachable',
        `The artifact store ended slice ${index} of blob ${sha256} after ${fill.length} of ${fill.sliceLength} bytes.`,
      );
      // Nobody waits for the rest any more: stopped, not read on.
      if (!resume || (wanted && !wanted())) throw cut;
      source = await resume(range.start + fill.length, cut);
    }
    if (hash.digest().equals(sliceDigest(digests, index))) {
      // Served from memory at once; readers arriving while its file is written join this fill.
      fill.verify();
      return true;
    }
    this.stats.digestFailures.origin++;
    this.#options.log.warn(
      { sha256, slice: index, attempt },
      attempt === 1
        ? 'a slice from the artifact store does not match its recorded digest; not served, fetching it once more'
        : 'a slice from the artifact store does not match its recorded digest again; answering 502 slice_digest_mismatch',
    );
    return false;
  }

  /**
   * Writes a verified fill's buffer to its slice file and indexes it; false when it is not kept.
   * Files are written one at a time, behind the readers (they never wait for the disk): the
   * writes and the opens, stats and renames around them take one of libuv's four threads, not
   * one per fill, so reads of slices on disk and the next fills' opens are not queued behind a
   * disk that falls behind (page-cache writes run at 60–120 MB/s on these machines). A slice
   * that would put the queue more than WRITE_BEHIND_MAX_BYTES behind is not kept (relayed), so
   * memory stays bounded (by the bound, or one slice when slices are larger) and a cold read runs
   * at the store's pace; a later read fills it.
   */
  #keep(job: FillJob): Promise<boolean> {
    const bytes = job.fill.sliceLength;
    // A slice larger than the bound is kept when nothing else waits (ARKVORY_CACHE_SLICE_BYTES may exceed it).
    if (this.#closed || (this.#behind > 0 && this.#behind + bytes > WRITE_BEHIND_MAX_BYTES))
      return Promise.resolve(false);
    this.#behind += bytes;
    const written = this.#writes.then(() => this.#writeSlice(job));
    this.#writes = written.then(
      () => {},
      () => {},
    );
    return written.finally(() => {
      this.#behind -= bytes;
    });
  }

  async #writeSlice(job: FillJob): Promise<boolean> {
    const { key, sha256, fill } = job;
    const bytes = fill.sliceLength;
    // Its blob was removed (purge, gc, scrub) while it waited.
    if (!fill.keep || this.#closed) return false;
    // On success the room is reserved (#makeRoom does it in the same step as its check).
    if (!(await this.#makeRoom(bytes))) return false;
    let reserved = true;
    const unreserve = () => {
      if (!reserved) return;
      reserved = false;
      this.#reserved -= diskBytes(bytes);
      this.#reservedFiles--;
    };
    const temp = path.join(this.#options.dir, 'tmp', `${key}.${randomUUID()}`);
    const target = this.#file(key);
    let handle: FileHandle | undefined;
    let renamed = false;
    try {
      try {
        handle = await open(temp, 'wx');
      } catch (err) {
        // A directory deleted under a running gateway: made again for the next fill.
        if ((err as NodeJS.ErrnoException).code === 'ENOENT')
          await mkdir(path.join(this.#options.dir, 'tmp'), { recursive: true }).catch(() => {});
        throw err;
      }
      for (let position = 0; position < bytes; ) {
        const { bytesWritten } = await handle.write(fill.bytes, position, bytes - position, position);
        // No progress (a filesystem that just filled up) is a failed write.
        if (bytesWritten <= 0)
          throw Object.assign(new Error(`short write at ${position} of ${bytes} bytes`), { code: 'ENOSPC' });
        position += bytesWritten;
      }
      // Durable before it takes the slice's name, and the name after: a power cut leaves the slice
      // whole or absent, as the directory store's blobs (see the header on what verifies it anyway).
      await (this.#options.syncFile ?? fsyncFile)(handle);
      await handle.close();
      handle = undefined;
      const syncDirectory = this.#options.syncDirectory ?? fsyncDirectory;
      await mkdirDurable(path.dirname(target), path.join(this.#options.dir, 'slices'), syncDirectory);
      await rename(temp, target);
      renamed = true;
      await syncDirectory(path.dirname(target));
      // rename moves ctime: the signature is taken after it.
      const after = await stat(target, { bigint: true });
      // What was hashed went to the file whole, or the file is not kept.
      if (after.size !== BigInt(bytes)) throw new Error('slice file size differs from the slice');
      const signature = signatureOf(after);
      // Indexed in the same step as its reservation ends, so the bound never loses sight of it.
      unreserve();
      // Its blob was removed (purge, gc, scrub) while the file was being written.
      if (!fill.keep) {
        await unlink(target).catch(() => {});
        return false;
      }
      const replaced = this.#index.get(key);
      if (replaced) this.#removed(replaced);
      this.#index.add({ key, sha256, bytes, signature, pins: 0, handle: undefined });
      this.#updateHeld();
      return true;
    } catch (err) {
      // A full disk (or any write failure): the fill was relayed; nothing is kept.
      this.#options.log.warn(
        { err: { message: (err as Error).message, code: (err as NodeJS.ErrnoException).code } },
        'slice cache write failed; relayed from the store without keeping',
      );
      await handle?.close().catch(() => {});
      await unlink(renamed ? target : temp).catch(() => {});
      unreserve();
      return false;
    }
  }

  /**
   * Evicts least recently used slices until one more slice file of `sliceBytes` fits under every
   * bound and reserves it; false (nothing reserved) when it cannot. The check, the choice of victims
   * and the reservation happen in one synchronous step after the only wait (statfs), so concurrent
   * fills cannot all pass on the same room; files being removed count until they are gone.
   */
  async #makeRoom(sliceBytes: number): Promise<boolean> {
    const bytes = diskBytes(sliceBytes);
    if (bytes > this.#options.maxBytes) return false;
    let free: number;
    try {
      const fs = await statfs(this.#options.dir);
      free = fs.bavail * fs.bsize;
    } catch {
      return false;
    }
    const excess = excessOver(
      this.#options,
      {
        bytes: this.#index.bytes + this.#reserved + this.#unlinking,
        files: this.#index.size + this.#reservedFiles + this.#unlinkingFiles,
      },
      { bytes: this.#reserved, files: this.#reservedFiles },
      free,
      sliceBytes,
    );
    const victims = excess && this.#index.victims(excess.bytes, excess.files);
    if (!victims) return false;
    this.#reserved += bytes;
    this.#reservedFiles++;
    if (victims.length === 0) return true;
    let freed = 0;
    for (const victim of victims) {
      this.#index.remove(victim.key);
      this.#removed(victim);
      this.stats.evictions++;
      freed += diskBytes(victim.bytes);
    }
    this.#unlinking += freed;
    this.#unlinkingFiles += victims.length;
    this.#updateHeld();
    for (const victim of victims) {
      await unlink(this.#file(victim.key)).catch(() => {});
      this.#unlinking -= diskBytes(victim.bytes);
      this.#unlinkingFiles--;
    }
    return true;
  }

  /**
   * Blobs with slices on disk or being filled: a sweep that finds a blob's digests gone must also
   * stop the fills that would otherwise index its slices after it.
   */
  heldBlobs(): string[] {
    const blobs = new Set(this.#index.blobs());
    for (const key of this.#fills.keys()) blobs.add(key.slice(0, 64));
    return [...blobs];
  }

  /** Removes every slice of these blobs (coherence: deleted, quarantined, purged); returns how many. */
  async removeBlobs(blobs: Iterable<string>): Promise<number> {
    let removed = 0;
    const removing = new Set(blobs);
    // Fills of these blobs still finishing their files: not indexed when done.
    for (const [key, fill] of this.#fills) if (removing.has(key.slice(0, 64))) fill.keep = false;
    for (const sha256 of removing) {
      for (const slice of this.#index.ofBlob(sha256)) {
        this.#index.remove(slice.key);
        this.#removed(slice);
        // An open reader keeps its descriptor (POSIX): it finishes, nothing new starts.
        await unlink(this.#file(slice.key)).catch(() => {});
        removed++;
      }
    }
    this.#updateHeld();
    return removed;
  }

  close(): void {
    this.#closed = true;
    for (const slice of [...this.#open]) if (slice.pins === 0) this.#closeFile(slice);
  }
}

/**
 * One origin read of consecutive slices' span, handed out slice by slice: read straight into each
 * fill's buffer, or copied from the store's own chunks when it lends them (a chunk crossing a slice
 * boundary is split between the two fills).
 */
class OriginRun {
  readonly #reader: BlobReader;
  readonly #span: ByteRange;
  readonly #controller = new AbortController();
  #chunks: AsyncIterator<Buffer> | undefined;
  /** The rest of a lent chunk that crossed into the next slice. */
  #left: Buffer | undefined;

  constructor(reader: BlobReader, span: ByteRange) {
    this.#reader = reader;
    this.#span = span;
  }

  /**
   * The bytes of the slice starting at `start` (the next one of the span) into `fill`, `onPiece`
   * called with each piece as it lands (before the fill's readers are woken); stops early only
   * when the store's answer ends.
   */
  async into(fill: Fill, start: number, onPiece: (piece: Buffer) => void): Promise<void> {
    const reader = this.#reader;
    if (reader.chunks) {
      this.#chunks ??= reader.chunks(this.#span, this.#controller.signal)[Symbol.asyncIterator]();
      while (fill.length < fill.sliceLength) {
        let chunk = this.#left;
        this.#left = undefined;
        if (!chunk) {
          const next = await this.#chunks.next();
          if (next.done) return;
          chunk = next.value;
        }
        const at = fill.length;
        const n = Math.min(chunk.length, fill.sliceLength - at);
        chunk.copy(fill.bytes, at, 0, n);
        if (n < chunk.length) this.#left = chunk.subarray(n);
        onPiece(fill.bytes.subarray(at, at + n));
        fill.grew(n);
      }
      return;
    }
    while (fill.length < fill.sliceLength) {
      const at = fill.length;
      const want = Math.min(ORIGIN_READ_BYTES, fill.sliceLength - at);
      const { bytesRead } = await reader.read(fill.bytes, at, want, start + at);
      if (bytesRead === 0) return;
      onPiece(fill.bytes.subarray(at, at + bytesRead));
      fill.grew(bytesRead);
    }
  }

  /** The store's answer let go (once, whether by abort or close). */
  #closing: Promise<void> | undefined;

  /** Lets go of the store's answer now: a read of it waiting for the store fails at once. */
  abort(): void {
    this.#controller.abort();
    void this.#closeReader().catch(() => {});
  }

  #closeReader(): Promise<void> {
    this.#closing ??= this.#reader.close();
    return this.#closing;
  }

  async close(): Promise<void> {
    this.#controller.abort();
    this.#left = undefined;
    await this.#chunks?.return?.(undefined)?.catch(() => {});
    await this.#closeReader();
  }
}
