/**
 * Slice-sized buffers for fills, reused from fill to fill. A fresh large buffer costs the kernel a
 * page fault per page on first touch (and an unmap when it is collected): on the 2-core test
 * machines that made allocating a fill's memory as costly as hashing it (docs/storage-and-content.md,
 * "Cache"). A buffer comes back once its fill and every reader of it are done (fill.ts); at most
 * `maxFreeBytes` wait for the next fill, the rest are left to the collector.
 */
export class SliceBuffers {
  readonly #maxFreeBytes: number;
  readonly #free: Buffer[] = [];
  #freeBytes = 0;

  constructor(maxFreeBytes: number) {
    this.#maxFreeBytes = maxFreeBytes;
  }

  /** A buffer of exactly `bytes` (contents undefined). */
  take(bytes: number): Buffer {
    const index = this.#free.findIndex((b) => b.length === bytes);
    if (index < 0) return Buffer.allocUnsafeSlow(bytes);
    const [buffer] = this.#free.splice(index, 1);
    this.#freeBytes -= bytes;
    return buffer!;
  }

  give(buffer: Buffer): void {
    if (this.#freeBytes + buffer.length > this.#maxFreeBytes) return;
    this.#free.push(buffer);
    this.#freeBytes += buffer.length;
  }

  get freeBytes(): number {
    return this.#freeBytes;
  }
}
