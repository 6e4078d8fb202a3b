/**
 * Which slices the cache holds on disk, in least-recently-used order, with the bytes they take and
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
}

export class SliceIndex {
  readonly #slices = new Map<string, IndexedSlice>();
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
    this.#bytes += slice.bytes;
  }

  remove(key: string): IndexedSlice | undefined {
    const slice = this.#slices.get(key);
    if (!slice) return undefined;
    this.#slices.delete(key);
    this.#bytes -= slice.bytes;
    return slice;
  }

  /**
   * The oldest unpinned slices whose removal frees at least `bytes`, or undefined when even all of
   * them would not (then nothing should be removed for this purpose).
   */
  victims(bytes: number): IndexedSlice[] | undefined {
    if (bytes <= 0) return [];
    const chosen: IndexedSlice[] = [];
    let freed = 0;
    for (const slice of this.#slices.values()) {
      if (slice.pins > 0) continue;
      chosen.push(slice);
      freed += slice.bytes;
      if (freed >= bytes) return chosen;
    }
    return undefined;
  }

  /** Slices of one blob. */
  ofBlob(sha256: string): IndexedSlice[] {
    return [...this.#slices.values()].filter((s) => s.sha256 === sha256);
  }

  blobs(): Set<string> {
    return new Set([...this.#slices.values()].map((s) => s.sha256));
  }

  all(): IndexedSlice[] {
    return [...this.#slices.values()];
  }
}
