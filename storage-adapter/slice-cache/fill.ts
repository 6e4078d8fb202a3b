/**
 * One slice being fetched from the origin, shared by every reader that wants it: the bytes arrive
 * into one slice-sized buffer (reused from fill to fill, see SliceBuffers), so a reader that joins
 * later reads from the start at once, and each reader's first byte follows the filler's by a
 * chunk, not by the whole slice. The fill runs on its own, not driven by any reader, so a reader
 * that goes away (even the first) never stops it while another reads it; once none does, the cache
 * stops it (`readers`, slice-cache.ts). Readers copy out of the buffer (`readFillInto`)
 * and never keep a reference to it, so it can be reused once the fill and every reader let go
 * (`hold`/`unhold`).
 *
 * Verification and the cut: a reader gets every byte of its span except the last one only after
 * the slice's digest checked out; a digest failure then ends it with an error. So a response is
 * cut before its last byte and a client never receives a complete wrong body. The fill fetches a
 * slice that failed its digest once more; a reader that had received bytes of the failed attempt
 * is cut, one that had not continues from the second attempt.
 */
import { StorageError } from '../errors.ts';

export type FillState = 'filling' | 'verified' | 'failed';

export class Fill {
  readonly sliceLength: number;
  /** The slice's bytes: `[0, length)` have arrived (in the current attempt). */
  readonly bytes: Buffer;
  // Stryker disable next-line StringLiteral: equivalent: only 'verified' and 'failed' are ever compared
  state: FillState = 'filling';
  error: Error | undefined;
  /** Incremented when the bytes start over (a retry after a digest failure). */
  attempt = 1;
  length = 0;
  /** Readers other than the one that started the fill (for the waiters metric). */
  joined = 0;
  /** False once its blob was removed from the cache while it ran: its file is then not kept. */
  keep = true;
  readonly #wakers = new Set<() => void>();
  readonly #onFree: ((bytes: Buffer) => void) | undefined;
  /** The filler's own hold, plus one per reader holding the fill. */
  #holds = 1;
  readonly opened: Promise<void>;
  readonly done: Promise<void>;
  #resolveOpened!: () => void;
  #rejectOpened!: (err: Error) => void;
  #resolveDone!: () => void;

  /** `bytes` (at least `sliceLength` long) goes to `onFree` when the last hold is let go. */
  constructor(sliceLength: number, bytes?: Buffer, onFree?: (bytes: Buffer) => void) {
    this.sliceLength = sliceLength;
    this.bytes = bytes ?? Buffer.allocUnsafe(sliceLength);
    this.#onFree = onFree;
    this.opened = new Promise<void>((resolve, reject) => {
      this.#resolveOpened = resolve;
      this.#rejectOpened = reject;
    });
    this.opened.catch(() => {});
    this.done = new Promise<void>((resolve) => {
      this.#resolveDone = resolve;
    });
  }

  markOpened(): void {
    this.#resolveOpened();
  }

  /** Where the next bytes go (the filler reads into it, then calls `grew`). */
  get free(): Buffer {
    return this.bytes.subarray(this.length, this.sliceLength);
  }

  /** `n` more bytes were written at `length`. */
  grew(n: number): void {
    this.length += n;
    this.#wake();
  }

  /** Copies a chunk in (a store that lends its own chunks); the copy is returned. */
  push(chunk: Buffer): Buffer {
    const n = Math.min(chunk.length, this.sliceLength - this.length);
    const piece = this.bytes.subarray(this.length, this.length + n);
    chunk.copy(piece, 0, 0, n);
    this.grew(n);
    return piece;
  }

  restart(): void {
    // Stryker disable next-line UpdateOperator: equivalent: readers only compare attempts for equality, and either way each is new
    this.attempt++;
    this.length = 0;
    this.#wake();
  }

  verify(): void {
    this.state = 'verified';
    this.#resolveOpened();
    this.#resolveDone();
    this.#wake();
  }

  fail(error: Error): void {
    this.state = 'failed';
    this.error = error;
    this.#rejectOpened(error);
    this.#resolveDone();
    this.#wake();
  }

  hold(): void {
    this.#holds++;
  }

  /** Readers holding the fill (while its filler still holds it: until the cache finishes it). */
  get readers(): number {
    return this.#holds - 1;
  }

  unhold(): void {
    this.#holds--;
    if (this.#holds === 0) this.#onFree?.(this.bytes);
  }

  /** Resolves at the next change (bytes, verification, failure, restart) or when `signal` aborts. */
  changed(signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        // Stryker disable next-line CallExpression: memory only: a woken waker left in the set is called again at the next change, which resolves nothing, and goes with the fill
        this.#wakers.delete(wake);
        signal?.removeEventListener('abort', wake);
        resolve();
      };
      this.#wakers.add(wake);
      // Stryker disable next-line ObjectLiteral,BooleanLiteral: equivalent: the waker removes its listener itself, once or not
      signal?.addEventListener('abort', wake, { once: true });
    });
  }

  #wake(): void {
    for (const wake of [...this.#wakers]) wake();
  }
}

/** One reader's progress through a fill: which attempt it reads, and whether it has had bytes. */
export interface FillCursor {
  attempt: number;
  delivered: boolean;
}

export function fillCursor(fill: Fill): FillCursor {
  // Stryker disable next-line ObjectLiteral: equivalent: a cursor without an attempt, never delivered, takes the fill's at its first read
  return { attempt: fill.attempt, delivered: false };
}

/**
 * Copies bytes at `position` (an offset in the slice) of a span ending at `to` (inclusive) into
 * `buffer`, up to `length`; waits while they have not arrived. Byte `to` comes only once the slice
 * is verified (see the header). Resolves with the count copied (at least 1).
 */
export async function readFillInto(
  fill: Fill,
  cursor: FillCursor,
  position: number,
  to: number,
  buffer: Buffer,
  offset: number,
  length: number,
  signal?: AbortSignal,
): Promise<number> {
  for (;;) {
    signal?.throwIfAborted();
    if (fill.state === 'failed') throw fill.error;
    if (fill.attempt !== cursor.attempt) {
      if (cursor.delivered)
        throw new StorageError(
          'slice_digest_mismatch',
          'A slice failed its digest check while being sent; the response was cut.',
        );
      cursor.attempt = fill.attempt;
    }
    // Never past what arrived: beyond `length` the buffer holds an earlier fill's bytes or garbage.
    const limit = Math.min(fill.length, fill.state === 'verified' ? to + 1 : to);
    if (position < limit) {
      const n = Math.min(length, limit - position);
      fill.bytes.copy(buffer, offset, position, position + n);
      cursor.delivered = true;
      return n;
    }
    if (fill.state === 'verified')
      throw new Error(`slice fill verified with ${fill.length} bytes, fewer than ${to + 1}`);
    await fill.changed(signal);
  }
}
