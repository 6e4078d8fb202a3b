/**
 * One direction of a proxied body, by hand rather than with pipe(): pipe() sets up and removes its
 * listeners on both streams per message and leaves every chunk to the garbage collector. Here a
 * chunk of RELEASE_MIN_BYTES or more (node:http's parser hands each one over as its own copy) is
 * freed as soon as the receiving socket took it (lib/release-buffer.ts says why that matters).
 * Backpressure: a write the receiver has not taken pauses the sender until the receiver drains (one
 * drain listener, added at the first pause); a receiver that failed takes no more writes (they
 * return false), so the sender stays paused, as with pipe(). Ending is the caller's.
 */
import type { Readable, Writable } from 'node:stream';
import { RELEASE_MIN_BYTES, releaseBuffer } from '../../lib/release-buffer.ts';

/**
 * Writes one relayed chunk, freed once `to` took it when it is RELEASE_MIN_BYTES or more (the
 * caller hands over a chunk nothing else reads). False when the sender must wait for `drain`.
 */
export function writeFreeing(to: Writable, chunk: Buffer): boolean {
  return chunk.byteLength >= RELEASE_MIN_BYTES ? to.write(chunk, () => releaseBuffer(chunk)) : to.write(chunk);
}

export function relayChunks(from: Readable, to: Writable): void {
  let resume: (() => void) | undefined;
  from.on('data', (chunk: Buffer) => {
    if (writeFreeing(to, chunk)) return;
    from.pause();
    if (resume === undefined) {
      resume = () => from.resume();
      to.on('drain', resume);
    }
  });
}
