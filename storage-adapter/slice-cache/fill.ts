/**
 * One slice being fetched from the origin, shared by every reader that wants it: the bytes are kept
 * in memory as they arrive (at most one slice), so a reader that joins later streams from the
 * start at once, and each reader's first byte follows the filler's by a chunk, not by the whole
 * slice. The fill runs on its own, not driven by any reader, so a reader that goes away (even the
 * first) never stops it.
 *
 * Verification and the cut: a reader gets every byte of its span except the piece that ends it
 * only after the slice's digest checked out; a digest failure then ends it with an error. So a
 * response is cut before its last byte and a client never receives a complete wrong body. The fill
 * fetches a slice that failed its digest once more; a reader that had received bytes of the failed
 * attempt is cut, one that had not continues from the second attempt.
 */
import { StorageError } from '../errors.ts';

export type FillState = 'filling' | 'verified' | 'failed';

export class Fill {
  readonly sliceLength: number;
  state: FillState = 'filling';
  error: Error | undefined;
  /** Incremented when the bytes start over (a retry after a digest failure). */
  attempt = 1;
  chunks: Buffer[] = [];
  length = 0;
  /** Readers other than the one that started the fill (for the waiters metric). */
  joined = 0;
  readonly #wakers = new Set<() => void>();
  readonly opened: Promise<void>;
  readonly done: Promise<void>;
  #resolveOpened!: () => void;
  #rejectOpened!: (err: Error) => void;
  #resolveDone!: () => void;

  constructor(sliceLength: number) {
    this.sliceLength = sliceLength;
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

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.length += chunk.length;
    this.#wake();
  }

  restart(): void {
    this.attempt++;
    this.chunks = [];
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

  /** Resolves at the next change (bytes, verification, failure, restart) or when `signal` aborts. */
  changed(signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        this.#wakers.delete(wake);
        signal?.removeEventListener('abort', wake);
        resolve();
      };
      this.#wakers.add(wake);
      signal?.addEventListener('abort', wake, { once: true });
    });
  }

  #wake(): void {
    for (const wake of [...this.#wakers]) wake();
  }
}

/** Bytes `from`..`to` (inclusive, offsets in the slice) of a fill, as they arrive; see the header. */
export async function* readFill(fill: Fill, from: number, to: number, signal?: AbortSignal): AsyncGenerator<Buffer> {
  let attempt = fill.attempt;
  let delivered = false;
  let position = from;
  // Cursor into the current attempt's chunks: chunk `index` starts at `chunkStart`.
  let index = 0;
  let chunkStart = 0;
  while (position <= to) {
    signal?.throwIfAborted();
    if (fill.state === 'failed') throw fill.error;
    if (fill.attempt !== attempt) {
      if (delivered)
        throw new StorageError(
          'slice_digest_mismatch',
          'A slice failed its digest check while being sent; the response was cut.',
        );
      attempt = fill.attempt;
      index = 0;
      chunkStart = 0;
    }
    const available = Math.min(fill.length, to + 1);
    const final = available === to + 1;
    if (position < available && (!final || fill.state === 'verified')) {
      while (position < available) {
        const chunk = fill.chunks[index]!;
        const chunkEnd = chunkStart + chunk.length;
        if (position >= chunkEnd) {
          index++;
          chunkStart = chunkEnd;
          continue;
        }
        const end = Math.min(chunkEnd, available);
        const piece = chunk.subarray(position - chunkStart, end - chunkStart);
        position = end;
        delivered = true;
        yield piece;
        if (fill.attempt !== attempt) break;
      }
      continue;
    }
    if (fill.state === 'verified' && fill.length < to + 1)
      throw new Error(`slice fill verified with ${fill.length} bytes, fewer than ${to + 1}`);
    await fill.changed(signal);
  }
}
