/**
 * Writes a planned content body to the response, streaming from an open blob (a file, or upstream
 * range responses of the static-HTTP store) through a small,
 * fixed set of reused buffers: a buffer is read into again only after the socket has taken its
 * bytes (the write callback), so a slow client stalls the reads instead of growing memory, and a
 * fast one produces no garbage per chunk. With a meter every chunk is charged before it is written,
 * the heads of a multipart/byteranges answer's parts included.
 * Over HTTP/2 a chunk also waits while the answers of its connection hold their session's send
 * budget (proxy/server/front-door/http2-send-budget.ts): 100 streams of one client that does not
 * read hold that budget, not 100 rings.
 * A client disconnect rejects the pending step; the caller closes the file in `finally`.
 * The head (status line and headers) is written only with the first body byte read: a blob that
 * fails its first read (a file cut short under a held descriptor, a range past the cut) is still
 * answerable with a clean 500 instead of a head followed by nothing.
 */
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { ByteMeter } from '../../storage-adapter/byte-meter.ts';
import type { BlobReader } from '../../storage-adapter/store.ts';
import type { ByteRange } from '../../storage-adapter/range.ts';
import type { AnswerBudget } from '../server/front-door/http2-send-budget.ts';
import type { Segment } from './response.ts';

/** Per response: BUFFER_COUNT × CHUNK_BYTES in flight at most (512 KiB). */
export const CHUNK_BYTES = 128 * 1024;
export const BUFFER_COUNT = 4;

/**
 * How long a range goes on without letting the event loop turn. A range read from memory (a slice
 * being filled or held) into a socket that takes every write never waits on I/O: its reads resolve
 * at once and its write callbacks follow on the next tick, so it would run to its end as microtasks
 * and next-ticks, which Node runs after every callback into JavaScript (each accepted connection's
 * included), and the loop would accept and read nothing else meanwhile. A range whose reads wait on
 * I/O pays one needless turn per period: one clock read per chunk and one immediate per period.
 */
export const MAX_MS_WITHOUT_TURN = 2;

/** A pool of reusable buffers for one response; `acquire` waits until the socket returns one. */
class BufferRing {
  readonly #free: Buffer[] = [];
  #allocated = 0;
  readonly #count: number;
  readonly #size: number;
  #waiter: (() => void) | undefined;
  #failure: Error | undefined;

  /** Buffers are allocated on first need, so a 4 KiB answer costs one 4 KiB buffer. */
  constructor(count: number, size: number) {
    this.#count = count;
    this.#size = size;
  }

  async acquire(signal: AbortSignal): Promise<Buffer> {
    for (;;) {
      if (this.#failure) throw this.#failure;
      signal.throwIfAborted();
      const buffer = this.#free.pop();
      if (buffer) return buffer;
      if (this.#allocated < this.#count) {
        this.#allocated++;
        return Buffer.allocUnsafe(this.#size);
      }
      await this.#returned(signal);
    }
  }

  /** Resolves once `acquire` would not wait: a buffer is free or may still be allocated. */
  async ready(signal: AbortSignal): Promise<void> {
    for (;;) {
      if (this.#failure) throw this.#failure;
      signal.throwIfAborted();
      if (this.#free.length > 0 || this.#allocated < this.#count) return;
      await this.#returned(signal);
    }
  }

  /** Resolves when the socket returns a buffer, or the signal aborts. */
  async #returned(signal: AbortSignal): Promise<void> {
    await new Promise<void>((resolve) => {
      const onAbort = () => resolve();
      signal.addEventListener('abort', onAbort, { once: true });
      this.#waiter = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
    });
    this.#waiter = undefined;
  }

  release(buffer: Buffer, err?: Error | null): void {
    if (err) this.#failure ??= err;
    else this.#free.push(buffer);
    this.#waiter?.();
  }
}

/** The send budget of the HTTP/2 session a response is on; undefined over HTTP/1.1. */
function budgetOf(res: ServerResponse): AnswerBudget | undefined {
  return (res as { sendBudget?: AnswerBudget }).sendBudget;
}

async function streamRange(
  res: ServerResponse,
  handle: Pick<BlobReader, 'read'>,
  range: ByteRange,
  ring: BufferRing,
  chunkBytes: number,
  meter: ByteMeter | undefined,
  signal: AbortSignal,
  opening: Opening,
): Promise<void> {
  let turnedAt = performance.now();
  const budget = budgetOf(res);
  for (let position = range.start; position <= range.end; ) {
    if (performance.now() - turnedAt >= MAX_MS_WITHOUT_TURN) {
      await nextTurn();
      turnedAt = performance.now();
    }
    // Over HTTP/2, room in the session's budget is taken once the ring has a buffer for the chunk
    // (a stream waiting for its own writes holds no room) and before the buffer is allocated (a
    // stream waiting for room holds no buffer).
    if (budget !== undefined) {
      await ring.ready(signal);
      if (!budget.hasRoom()) await budget.room(signal);
      budget.reserve(chunkBytes);
    }
    try {
      const buffer = await ring.acquire(signal);
      const want = Math.min(chunkBytes, range.end - position + 1);
      const { bytesRead } = await handle.read(buffer, 0, want, position, signal);
      if (bytesRead === 0) {
        ring.release(buffer);
        throw new Error(`blob ended at byte ${position}, before the ${range.end + 1} bytes the catalog promised`);
      }
      position += bytesRead;
      if (meter) await meter.take(bytesRead, signal);
      signal.throwIfAborted();
      opening.open();
      res.write(buffer.subarray(0, bytesRead), (err) => {
        ring.release(buffer, err);
        if (!err) budget?.sent();
      });
    } finally {
      // Written (its bytes are now measured as queued) or dropped.
      budget?.unreserve(chunkBytes);
    }
  }
}

/** Bytes queued on the response before a streamed range waits for 'drain' (the ring's bound). */
const MAX_QUEUED_BYTES = BUFFER_COUNT * CHUNK_BYTES;

/** A store's own chunks (no copy): each charged in quanta, then written; waits while the socket is full. */
async function streamChunks(
  res: ServerResponse,
  chunks: AsyncIterable<Buffer>,
  meter: ByteMeter | undefined,
  signal: AbortSignal,
  opening: Opening,
): Promise<void> {
  const budget = budgetOf(res);
  const sent = budget && ((err?: Error | null) => err || budget.sent());
  for await (const chunk of chunks) {
    if (meter) await charge(meter, chunk.length, signal);
    if (budget !== undefined && !budget.hasRoom()) await budget.room(signal);
    signal.throwIfAborted();
    opening.open();
    if (!res.write(chunk, sent) && res.writableLength >= MAX_QUEUED_BYTES) {
      await new Promise<void>((resolve, reject) => {
        const done = () => {
          signal.removeEventListener('abort', onAbort);
          res.off('drain', done);
          res.off('close', done);
          resolve();
        };
        const onAbort = () => {
          res.off('drain', done);
          res.off('close', done);
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        res.once('drain', done);
        res.once('close', done);
      });
    }
  }
}

/** Charges `bytes` to the meter in slices of at most one quantum. */
async function charge(meter: ByteMeter, bytes: number, signal: AbortSignal): Promise<void> {
  const quantum = Math.max(1, meter.quantumBytes);
  for (let offset = 0; offset < bytes; offset += quantum) await meter.take(Math.min(quantum, bytes - offset), signal);
}

/**
 * Ends the response (queued bytes flushed); rejects when the client goes away first. Waits for the
 * response's 'close', which Node emits once in every case (after 'finish', or when the connection
 * dies), rather than an abort listener: an EventTarget listener costs more than a small answer.
 */
function endResponse(res: ServerResponse, last?: Buffer): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (res.destroyed) {
      reject(clientGone());
      return;
    }
    res.once('close', () => (res.writableFinished ? resolve() : reject(clientGone())));
    if (last) res.end(last);
    else res.end();
  });
}

function clientGone(): Error {
  return new Error('the client closed the connection before the response finished');
}

/**
 * The head of the answer and the multipart part heads before the first body byte, held until that
 * byte is in hand: `open` writes them (once; afterwards it only checks a flag).
 */
class Opening {
  #held: Buffer[] | undefined = [];
  readonly #res: ServerResponse;
  readonly #head: (() => void) | undefined;

  constructor(res: ServerResponse, head: (() => void) | undefined) {
    this.#res = res;
    this.#head = head;
  }

  /** Writes `data` now if the answer is open, else with its head. */
  write(data: Buffer): void {
    if (this.#held) this.#held.push(data);
    else this.#res.write(data);
  }

  open(): void {
    const held = this.#held;
    if (!held) return;
    this.#held = undefined;
    this.#head?.();
    for (const data of held) this.#res.write(data);
  }
}

/** What aborts a response: read only when something must wait (a signal is made on first use). */
export interface Abortable {
  readonly signal: AbortSignal;
}

/** `head` writes the status line and headers (the caller's `writeHead`); without it they are already set. */
export function sendSegments(
  res: ServerResponse,
  handle: Pick<BlobReader, 'read' | 'chunks' | 'bytes'>,
  segments: readonly Segment[],
  meter: ByteMeter | undefined,
  abortable: Abortable,
  head?: () => void,
): Promise<void> {
  const only = segments.length === 1 ? segments[0]! : undefined;
  if (!handle.bytes || only?.kind !== 'range')
    return streamSegments(res, handle, segments, meter, abortable.signal, new Opening(res, head));
  // A blob already in memory, one range: headers and body leave in one write. Bytes the meter
  // grants at once need no signal and no promise; only a wait does.
  head?.();
  const body = handle.bytes.subarray(only.range.start, only.range.end + 1);
  if (!meter || (body.length <= meter.quantumBytes && meter.tryTake?.(body.length))) return endResponse(res, body);
  return charge(meter, body.length, abortable.signal).then(() => endResponse(res, body));
}

async function streamSegments(
  res: ServerResponse,
  handle: Pick<BlobReader, 'read' | 'chunks'>,
  segments: readonly Segment[],
  meter: ByteMeter | undefined,
  signal: AbortSignal,
  opening: Opening,
): Promise<void> {
  const rangeBytes = segments.reduce(
    (n, s) => (s.kind === 'range' ? Math.max(n, s.range.end - s.range.start + 1) : n),
    0,
  );
  const chunkBytes = Math.max(1, Math.min(meter ? meter.quantumBytes : CHUNK_BYTES, CHUNK_BYTES, rangeBytes));
  const ring = new BufferRing(BUFFER_COUNT, chunkBytes);
  for (const segment of segments) {
    signal.throwIfAborted();
    if (segment.kind === 'bytes') {
      // A multipart part's head is body bytes too: unpaced, many small ranges would pass the ceiling.
      if (meter) await charge(meter, segment.data.length, signal);
      signal.throwIfAborted();
      opening.write(segment.data);
    } else if (handle.chunks) await streamChunks(res, handle.chunks(segment.range, signal), meter, signal, opening);
    else await streamRange(res, handle, segment.range, ring, chunkBytes, meter, signal, opening);
  }
  signal.throwIfAborted();
  opening.open();
  await endResponse(res);
}
