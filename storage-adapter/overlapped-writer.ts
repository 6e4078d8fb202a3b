/**
 * Writing a body to a file while it arrives, shared by blobs (fs-store.ts) and multipart parts
 * (multipart/fs-parts.ts): receiving, hashing, pacing, writing and flushing overlap instead of taking
 * turns, so a slow disk write never holds up the body's next bandwidth take.
 */
import type { FileHandle } from 'node:fs/promises';

/** Body bytes are gathered up to this size before one write call (fewer syscalls, same memory bound). */
const WRITE_BATCH_BYTES = 1024 * 1024;
/** Batches being written while the next is gathered. */
const MAX_WRITES_IN_FLIGHT = 2;
/** A background fdatasync starts after this many bytes since the last one. */
const SYNC_EVERY_BYTES = 64 * 1024 * 1024;

/** Writes every buffer at `position` (pwrite: concurrent batches at their own offsets never interleave). */
async function writeFullyAt(handle: FileHandle, buffers: Buffer[], position: number): Promise<void> {
  const total = buffers.reduce((n, b) => n + b.length, 0);
  const { bytesWritten } = await handle.writev(buffers, position);
  if (bytesWritten === total) return;
  let rest = Buffer.concat(buffers).subarray(bytesWritten);
  let at = position + bytesWritten;
  while (rest.length > 0) {
    const result = await handle.write(rest, 0, rest.length, at);
    rest = rest.subarray(result.bytesWritten);
    at += result.bytesWritten;
  }
}

/**
 * Writes an upload while it arrives, so receiving, hashing, writing and flushing overlap instead
 * of taking turns: up to MAX_WRITES_IN_FLIGHT batches are being written while the next one is
 * gathered (memory: at most that many batches plus the one being filled), and every
 * SYNC_EVERY_BYTES a background fdatasync starts, so the fsync before publishing finds little left
 * to flush. `finish` waits for every write and flush and then fsyncs; `abandon` waits for them
 * without failing, so the file can be closed and removed.
 */
class OverlappedWriter {
  readonly #handle: FileHandle;
  readonly #writes: Array<Promise<void>> = [];
  #position = 0;
  #syncedAt = 0;
  #syncing: Promise<void> | undefined;

  constructor(handle: FileHandle) {
    this.#handle = handle;
  }

  async write(batch: Buffer[], bytes: number): Promise<void> {
    const pending = writeFullyAt(this.#handle, batch, this.#position);
    // Observed now, awaited below or in finish/abandon: a failure is never unhandled.
    pending.catch(() => {});
    this.#writes.push(pending);
    this.#position += bytes;
    if (this.#writes.length >= MAX_WRITES_IN_FLIGHT) await this.#writes.shift();
    if (!this.#syncing && this.#position - this.#syncedAt >= SYNC_EVERY_BYTES) {
      this.#syncedAt = this.#position;
      const syncing = this.#handle.datasync().finally(() => {
        if (this.#syncing === syncing) this.#syncing = undefined;
      });
      syncing.catch(() => {});
      this.#syncing = syncing;
    }
  }

  async finish(): Promise<void> {
    while (this.#writes.length > 0) await this.#writes.shift();
    await this.#syncing;
    await this.#handle.sync();
  }

  async abandon(): Promise<void> {
    await Promise.allSettled([...this.#writes.splice(0), this.#syncing]);
  }
}

/**
 * Writes every chunk of `body` into `handle` from offset 0 in batches, overlapped with reading the
 * next ones, then fsyncs. On failure every write in flight has settled before it throws, so the
 * caller can close and remove the file.
 */
export async function writeOverlapped(handle: FileHandle, body: AsyncIterable<Buffer>): Promise<void> {
  const writer = new OverlappedWriter(handle);
  try {
    let batch: Buffer[] = [];
    let batchBytes = 0;
    for await (const bytes of body) {
      batch.push(bytes);
      batchBytes += bytes.length;
      if (batchBytes >= WRITE_BATCH_BYTES) {
        await writer.write(batch, batchBytes);
        batch = [];
        batchBytes = 0;
      }
    }
    if (batchBytes > 0) await writer.write(batch, batchBytes);
    await writer.finish();
  } catch (err) {
    await writer.abandon();
    throw err;
  }
}
