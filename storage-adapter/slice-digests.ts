/**
 * A blob cut into fixed-size slices, and the sha256 of each slice, recorded beside the blob's own
 * sha256 at publish (catalog table `arkvory_blob_slices`). The slice cache (storage-adapter/slice-cache/)
 * checks every slice it fills from a remote store against these before serving or keeping it, so a
 * cache can verify a 1 MiB range without reading the whole blob. A blob of at most one slice has one
 * digest, equal to the blob's sha256.
 */
import { createHash, type Hash } from 'node:crypto';
import type { ByteRange } from './range.ts';

/** Default slice size (ARKVORY_CACHE_SLICE_BYTES): measured in docs/storage-and-content.md, "Cache". */
export const DEFAULT_SLICE_BYTES = 8 * 1024 * 1024;
/** Bounds of a configured slice size: below 64 KiB the per-slice costs (a file, a request) dominate. */
export const MIN_SLICE_BYTES = 64 * 1024;
export const MAX_SLICE_BYTES = 256 * 1024 * 1024;
export const DIGEST_BYTES = 32;

export interface SliceDigests {
  readonly sizeBytes: number;
  readonly sliceBytes: number;
  /** `sliceCount` sha256 digests, 32 bytes each, in order. */
  readonly digests: Buffer;
}

export function sliceCount(sizeBytes: number, sliceBytes: number): number {
  return Math.ceil(sizeBytes / sliceBytes);
}

/** Byte bounds of slice `index` (inclusive end). */
export function sliceRange(d: Pick<SliceDigests, 'sizeBytes' | 'sliceBytes'>, index: number): ByteRange {
  const start = index * d.sliceBytes;
  return { start, end: Math.min(start + d.sliceBytes, d.sizeBytes) - 1 };
}

/** Indexes of the first and last slice a range covers. */
export function slicesCovering(range: ByteRange, sliceBytes: number): { first: number; last: number } {
  return { first: Math.floor(range.start / sliceBytes), last: Math.floor(range.end / sliceBytes) };
}

export function sliceDigest(d: SliceDigests, index: number): Buffer {
  return d.digests.subarray(index * DIGEST_BYTES, (index + 1) * DIGEST_BYTES);
}

/** Whether a record is well formed for its blob (a damaged or foreign row is ignored, never trusted). */
export function isConsistent(d: SliceDigests): boolean {
  return (
    Number.isSafeInteger(d.sizeBytes) &&
    d.sizeBytes >= 0 &&
    Number.isSafeInteger(d.sliceBytes) &&
    d.sliceBytes > 0 &&
    d.digests.length === sliceCount(d.sizeBytes, d.sliceBytes) * DIGEST_BYTES
  );
}

/** Per-slice sha256 of a byte stream fed in any chunking. */
export class SliceHasher {
  readonly #sliceBytes: number;
  readonly #done: Buffer[] = [];
  #hash: Hash = createHash('sha256');
  #inSlice = 0;
  #size = 0;

  constructor(sliceBytes: number) {
    this.#sliceBytes = sliceBytes;
  }

  update(bytes: Uint8Array): void {
    this.#size += bytes.length;
    for (let offset = 0; offset < bytes.length; ) {
      const n = Math.min(this.#sliceBytes - this.#inSlice, bytes.length - offset);
      this.#hash.update(bytes.subarray(offset, offset + n));
      this.#inSlice += n;
      offset += n;
      if (this.#inSlice === this.#sliceBytes) {
        this.#done.push(this.#hash.digest());
        this.#hash = createHash('sha256');
        this.#inSlice = 0;
      }
    }
  }

  finish(): SliceDigests {
    if (this.#inSlice > 0) this.#done.push(this.#hash.digest());
    this.#inSlice = 0;
    return { sizeBytes: this.#size, sliceBytes: this.#sliceBytes, digests: Buffer.concat(this.#done) };
  }
}

/** The worker-thread twin of `SliceHasher` (off-thread-sha256.ts runs it as source text). */
export const SLICE_HASHER_SOURCE = `
function sliceUpdate(h, bytes) {
  for (let offset = 0; offset < bytes.length; ) {
    const n = Math.min(h.sliceBytes - h.inSlice, bytes.length - offset);
    h.slice.update(bytes.subarray(offset, offset + n));
    h.inSlice += n;
    offset += n;
    if (h.inSlice === h.sliceBytes) {
      h.slices.push(h.slice.digest());
      h.slice = createHash('sha256');
      h.inSlice = 0;
    }
  }
}
function sliceFinish(h) {
  if (h.inSlice > 0) h.slices.push(h.slice.digest());
  return Buffer.concat(h.slices);
}
`;
