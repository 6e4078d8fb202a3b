/**
 * Which slices the cache holds on disk, in least-recently-used order, with the disk bytes they take and
 * who is reading them. Pure bookkeeping (no I/O): the cache asks it for victims and removes their
 * files. A slice being read (pinned) is never a victim, so it is never removed under its reader.
 */
import type { FileHandle } from 'node:fs/promises';

export interface IndexedSlice {
  readonly key: string;
  readonly sha256: string;
  readonly bytes: number;
  /** `ino:size:mtimeNs:ctimeNs` of the file when its bytes were last checked against the digest. */
  signature: string | undefined;
  pins: number;
  /** Its file, kept open by the cache once checked (the index only carries it). */
  handle: FileHandle | undefined;
  /** Its file could not be opened or read: fetched again from the store, this entry kept only for the bounds. */
  unreadable?: boolean;
}

/** The filesystem's allocation unit the bounds count in (4 KiB on the filesystems the cache runs on). */
const DISK_BLOCK_BYTES = 4096;

/**
 * What a slice of `bytes` takes on disk, as the bounds count it: whole blocks, so many small slices
 * (small blobs, the last slice of a blob) cannot take many times the bound while counted as less.
 */
export function diskBytes(bytes: number): number {
  return Math.ceil(bytes / DISK_BLOCK_BYTES) * DISK_BLOCK_BYTES;
}

/** What the cache holds or has promised on disk, in disk bytes (diskBytes) and files. */
export interface DiskUse {
  readonly bytes: number;
  readonly files: number;
}

export interface CacheBounds {
  readonly maxBytes: number;
  /** Slice files: each costs an inode whatever its size, which the byte bound does not see. */
  readonly maxFiles: number;
  readonly minFreeBytes: number;
}

/**
 * How much must be evicted before one more slice file of `sliceBytes` fits: `used` counts the slices
 * indexed, reserved and still being unlinked; `reserved` alone is what statfs's `freeBytes` does not
 * see yet. Undefined when the slice can never fit (larger than a bound by itself). Pure.
 */
export function excessOver(
  bounds: CacheBounds,
  used: DiskUse,
  reserved: DiskUse,
  freeBytes: number,
  sliceBytes: number,
): DiskUse | undefined {
  const bytes = diskBytes(sliceBytes);
  if (bytes > bounds.maxBytes || bounds.maxFiles < 1) return undefined;
  return {
    bytes: Math.max(used.bytes + bytes - bounds.maxBytes, bounds.minFreeBytes + reserved.bytes + bytes - freeBytes),
    files: used.files + 1 - bounds.maxFiles,
  };
}

export class SliceIndex {
  readonly #slices = new Map<string, IndexedSlice>();
  /**
   * The slices of each blob: a sweep removing many blobs (a purge at start, a large gc) asks for
   * each one's, and a scan of every slice per blob would make it quadratic in a cache of many
   * small blobs.
   */
  readonly #byBlob = new Map<string, Set<IndexedSlice>>();
  #bytes = 0;

  get bytes(): number {
    return this.#bytes;
  }

  get size(): number {
    return this.#slices.size;
  }

  get(key: string): IndexedSlice | undefined {
    return this.#slices.get(key);
  }

  /** Marks a slice the newest (a read). */
  touch(slice: IndexedSlice): void {
    this.#slices.delete(slice.key);
    this.#slices.set(slice.key, slice);
  }

  add(slice: IndexedSlice): void {
    this.remove(slice.key);
    this.#slices.set(slice.key, slice);
    this.#bytes += diskBytes(slice.bytes);
    const sha256 = slice.sha256;
    const ofBlob = this.#byBlob.get(sha256);
    if (ofBlob) ofBlob.add(slice);
    else this.#byBlob.set(sha256, new Set([slice]));
  }

  remove(key: string): IndexedSlice | undefined {
    const slice = this.#slices.get(key);
    if (!slice) return undefined;
    this.#slices.delete(key);
    this.#bytes -= diskBytes(slice.bytes);
    const sha256 = slice.sha256;
    const ofBlob = this.#byBlob.get(sha256);
    ofBlob?.delete(slice);
    if (ofBlob?.size === 0) this.#byBlob.delete(sha256);
    return slice;
  }

  /**
   * The oldest unpinned slices whose removal frees at least `bytes` of disk and `files` files, or
   * undefined when even all of them would not (then nothing should be removed for this purpose).
   */
  victims(bytes: number, files = 0): IndexedSlice[] | undefined {
    if (bytes <= 0 && files <= 0) return [];
    const chosen: IndexedSlice[] = [];
    let freed = 0;
    for (const slice of this.#slices.values()) {
      if (slice.pins > 0) continue;
      chosen.push(slice);
      freed += diskBytes(slice.bytes);
      if (freed >= bytes && chosen.length >= files) return chosen;
    }
    return undefined;
  }

  /** Slices of one blob. */
  ofBlob(sha256: string): IndexedSlice[] {
    return [...(this.#byBlob.get(sha256) ?? [])];
  }

  blobs(): Set<string> {
    return new Set(this.#byBlob.keys());
  }

  all(): IndexedSlice[] {
    return [...this.#slices.values()];
  }
}
