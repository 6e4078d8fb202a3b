import { Transform, type Writable } from 'node:stream';
import type { ByteMeter } from './bandwidth-governor.ts';

/**
 * The stream edge of the governor: bodies pass in pieces of at most one quantum, each only after
 * its take resolved. Upload bodies are paced by how fast they are read (`meterChunks`, so TCP
 * backpressure slows the client); downloads by what is handed to the response (`writeMetered`,
 * `createMeteredTransform`). Bytes granted are not bytes delivered: OS and proxy buffers are outside.
 */

/** Splits `chunk` into views of at most `quantumBytes` (no copy). */
export function* splitChunk(chunk: Uint8Array, quantumBytes: number): Generator<Buffer> {
  const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  for (let offset = 0; offset < buffer.length; offset += quantumBytes) {
    yield buffer.subarray(offset, offset + quantumBytes);
  }
}

/**
 * Reads `source` one chunk at a time and yields it in metered pieces. The source is not read further
 * until the consumer asks for the next piece, so a waiting take holds back the upload itself. Pass a
 * `signal` that fires when the request closes: a generator cannot be stopped while its take waits.
 */
export async function* meterChunks(source: AsyncIterable<Uint8Array | string>, meter: ByteMeter, signal?: AbortSignal): AsyncGenerator<Buffer, void, undefined> {
  for await (const chunk of source) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    for (const piece of splitChunk(bytes, meter.quantumBytes)) {
      await meter.take(piece.length, signal);
      yield piece;
    }
  }
}

/**
 * Writes `chunk` to `out` in metered pieces and resolves once all are handed over and `out` has room
 * again (`drain`). Rejects if `out` closes or fails first, or when the take rejects.
 */
export async function writeMetered(out: Writable, chunk: Uint8Array, meter: ByteMeter, signal?: AbortSignal): Promise<void> {
  for (const piece of splitChunk(chunk, meter.quantumBytes)) {
    await meter.take(piece.length, signal);
    if (out.destroyed || out.writableEnded) throw new Error('writeMetered: the destination closed before the body was written');
    if (!out.write(piece)) await drained(out, signal);
  }
}

/**
 * A Transform that meters what passes through it (e.g. file stream → transform → response). When the
 * pipeline is destroyed (the client went away), a take still waiting is cancelled with it.
 */
export function createMeteredTransform(meter: ByteMeter, signal?: AbortSignal): Transform {
  const destroyed = new AbortController();
  const takeSignal = signal ? AbortSignal.any([signal, destroyed.signal]) : destroyed.signal;
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      (async () => {
        for (const piece of splitChunk(chunk, meter.quantumBytes)) {
          await meter.take(piece.length, takeSignal);
          this.push(piece);
        }
      })().then(() => callback(), (err: unknown) => callback(err instanceof Error ? err : new Error(String(err))));
    },
    destroy(err, callback) {
      destroyed.abort(err ?? new Error('the metered stream was destroyed'));
      callback(err);
    },
  });
}

function drained(out: Writable, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (err?: unknown): void => {
      out.off('drain', onDrain);
      out.off('close', onClose);
      out.off('error', onError);
      signal?.removeEventListener('abort', onAbort);
      if (err === undefined) resolve();
      else reject(err);
    };
    const onDrain = (): void => done();
    const onClose = (): void => done(new Error('writeMetered: the destination closed while waiting for drain'));
    const onError = (err: Error): void => done(err);
    const onAbort = (): void => done(signal!.reason);
    out.on('drain', onDrain);
    out.on('close', onClose);
    out.on('error', onError);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) onAbort();
  });
}
