/**
 * Writing a body to a file while it arrives, shared by blobs (fs-store.ts) and multipart parts
 * (multipart/fs-parts.ts): receiving, hashing, pacing, writing and flushing overlap instead of taking
 * turns, so a slow disk write never holds up the body's next bandwidth take.
 *
 * The body's chunks are copied into a ring of RING_SLOTS fixed slots of SLOT_BYTES: a full slot is
 * handed to the disk with one write call while the next fills, and the chunks themselves can be
 * dropped at once (see `release`) instead of being held, 16 to a batch, for the length of a disk
 * write. A slot is refilled only once its write is done, so a body holds at most the ring.
 *
 * A large body goes to the disk with direct I/O when the filesystem takes it (`openUploadFile`):
 * buffered, each byte is copied once more into the page cache by a libuv thread and written back
 * by the periodic and final syncs, the largest cost of an upload after hashing. Direct writes
 * need block-aligned memory, offsets and lengths: the ring then lives in WebAssembly memory (page
 * aligned, which no other JavaScript allocation promises), every slot but the last is written
 * whole, and the last is padded with zeros to the block and the file cut back to its length.
 */
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { releaseBuffer } from '../../lib/release-buffer.ts';

/** Body bytes are gathered up to this size before one write call (fewer syscalls, same memory bound). */
const SLOT_BYTES = 1024 * 1024;
/** Slots per upload: up to RING_SLOTS - 1 being written while the next one fills. */
const RING_SLOTS = 4;
/** A background fdatasync starts after this many bytes since the last one (buffered writes only). */
const SYNC_EVERY_BYTES = 64 * 1024 * 1024;
/** Direct I/O alignment of memory, offsets and lengths: a page, a multiple of any common block size. */
export const DIRECT_ALIGN_BYTES = 4096;
const WASM_PAGE_BYTES = 65_536;
/** The runtime's `WebAssembly.Memory` (this project's TypeScript libs declare no DOM or wasm values). */
const WasmMemory = (
  globalThis as unknown as {
    WebAssembly: { Memory: new (descriptor: { initial: number; maximum: number }) => { buffer: ArrayBuffer } };
  }
).WebAssembly.Memory;

/** The length the last direct write covers: `filled` rounded up to the alignment. */
export function paddedLength(filled: number, align: number = DIRECT_ALIGN_BYTES): number {
  return Math.ceil(filled / align) * align;
}

/**
 * Creates `file` (exclusively, mode 0644) for an upload's bytes: with O_DIRECT when `direct` is
 * asked for and the filesystem allows it (tmpfs and some others refuse it with EINVAL), otherwise
 * buffered. `direct` in the answer is what `writeOverlapped` must be told.
 */
export async function openUploadFile(
  file: string,
  direct: boolean,
  openFile: (file: string, flags: number, mode: number) => Promise<FileHandle> = open,
): Promise<{ handle: FileHandle; direct: boolean }> {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL;
  if (direct && constants.O_DIRECT !== undefined) {
    try {
      return { handle: await openFile(file, flags | constants.O_DIRECT, 0o644), direct: true };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EINVAL') throw err;
    }
  }
  return { handle: await openFile(file, flags, 0o644), direct: false };
}

/** Writes `bytes` at `position`, however many calls that takes. */
async function writeFullyAt(handle: FileHandle, bytes: Buffer, position: number): Promise<void> {
  let rest = bytes;
  let at = position;
  while (rest.length > 0) {
    const { bytesWritten } = await handle.write(rest, 0, rest.length, at);
    rest = rest.subarray(bytesWritten);
    at += bytesWritten;
  }
}

export interface WriteOptions {
  /** The body's declared length, if known: a small body gets no more ring than it fills. */
  readonly expectedBytes?: number | undefined;
  /**
   * The body's chunks are the writer's to drop (nothing reads them after handing them over): each
   * one's memory is released as soon as it is copied into the ring (see `release`).
   */
  readonly releaseChunks?: boolean | undefined;
  /** `handle` was opened with O_DIRECT (see `openUploadFile`): aligned writes, no periodic sync. */
  readonly direct?: boolean | undefined;
}

interface Slot {
  readonly bytes: Buffer;
  /** Settles when the slot's write is done (never rejects; a failure is kept in `#failure`). */
  busy: Promise<void> | undefined;
}

/**
 * The ring and what is in flight: `finish` waits for every write and flush and then fsyncs;
 * `abandon` waits for them without failing, so the file can be closed and removed.
 */
class RingWriter {
  readonly #handle: FileHandle;
  readonly #slots: Slot[];
  readonly #releaseChunks: boolean;
  readonly #direct: boolean;
  #current = 0;
  #filled = 0;
  #position = 0;
  #syncedAt = 0;
  #syncing: Promise<void> | undefined;
  #failure: { err: unknown } | undefined;

  constructor(handle: FileHandle, options: WriteOptions) {
    this.#handle = handle;
    this.#releaseChunks = options.releaseChunks === true;
    this.#direct = options.direct === true;
    const expected = options.expectedBytes;
    // Direct: whole slots, so that every write but the last is aligned and the last can be padded.
    const slotBytes = expected === undefined || this.#direct ? SLOT_BYTES : Math.max(1, Math.min(SLOT_BYTES, expected));
    const slotCount =
      expected === undefined ? RING_SLOTS : Math.max(1, Math.min(RING_SLOTS, Math.ceil(expected / slotBytes)));
    const memory = this.#direct
      ? new WasmMemory({
          initial: (slotBytes * slotCount) / WASM_PAGE_BYTES,
          maximum: (slotBytes * slotCount) / WASM_PAGE_BYTES,
        }).buffer
      : new ArrayBuffer(slotBytes * slotCount);
    this.#slots = Array.from({ length: slotCount }, (_, i) => ({
      bytes: Buffer.from(memory, i * slotBytes, slotBytes),
      busy: undefined,
    }));
  }

  /** Copies `chunk` into the ring, handing each slot that fills to the disk. */
  async push(chunk: Buffer): Promise<void> {
    for (let offset = 0; offset < chunk.length; ) {
      const slot = this.#slots[this.#current]!;
      const copied = chunk.copy(slot.bytes, this.#filled, offset);
      this.#filled += copied;
      offset += copied;
      if (this.#filled === slot.bytes.length) await this.#flushSlot();
    }
    if (this.#releaseChunks) releaseBuffer(chunk);
  }

  /** Writes the filled part of the current slot, then waits until the next slot is free. */
  async #flushSlot(): Promise<void> {
    this.#throwIfFailed();
    const slot = this.#slots[this.#current]!;
    const length = this.#filled;
    // Only the last slot is ever short; direct I/O writes it padded with zeros (nothing else of the
    // ring leaks past the end) and `finish` cuts the file back.
    const padded = this.#direct ? paddedLength(length) : length;
    slot.bytes.fill(0, length, padded);
    // Slots are written at their own offsets (pwrite), so several may be in flight at once, which
    // keeps the disk busy while the next slot fills.
    const written = writeFullyAt(this.#handle, slot.bytes.subarray(0, padded), this.#position);
    slot.busy = written.then(
      () => {},
      (err: unknown) => {
        this.#failure ??= { err };
      },
    );
    this.#position += length;
    this.#filled = 0;
    this.#current = (this.#current + 1) % this.#slots.length;
    if (!this.#direct && !this.#syncing && this.#position - this.#syncedAt >= SYNC_EVERY_BYTES) {
      this.#syncedAt = this.#position;
      const syncing: Promise<void> = this.#handle.datasync().then(
        () => {
          if (this.#syncing === syncing) this.#syncing = undefined;
        },
        (err: unknown) => {
          this.#failure ??= { err };
          if (this.#syncing === syncing) this.#syncing = undefined;
        },
      );
      this.#syncing = syncing;
    }
    await this.#slots[this.#current]!.busy;
    this.#throwIfFailed();
  }

  #throwIfFailed(): void {
    if (this.#failure) throw this.#failure.err;
  }

  /** Every write and flush in flight has settled (none of these promises rejects). */
  async #settled(): Promise<void> {
    await Promise.all([...this.#slots.map((s) => s.busy), this.#syncing]);
  }

  async finish(): Promise<void> {
    if (this.#filled > 0) await this.#flushSlot();
    await this.#settled();
    this.#throwIfFailed();
    if (this.#direct && paddedLength(this.#position) !== this.#position) await this.#handle.truncate(this.#position);
    await this.#handle.sync();
  }

  async abandon(): Promise<void> {
    await this.#settled();
  }
}

/**
 * Writes every chunk of `body` into `handle` from offset 0, overlapped with reading the next ones,
 * then fsyncs. On failure every write in flight has settled before it throws, so the caller can
 * close and remove the file.
 */
export async function writeOverlapped(
  handle: FileHandle,
  body: AsyncIterable<Buffer>,
  options: WriteOptions = {},
): Promise<void> {
  const writer = new RingWriter(handle, options);
  try {
    for await (const bytes of body) await writer.push(bytes);
    await writer.finish();
  } catch (err) {
    await writer.abandon();
    throw err;
  }
}
