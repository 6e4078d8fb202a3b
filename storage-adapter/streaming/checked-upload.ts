/**
 * The checks every upload passes on its way into a store, whichever store writes it: the size
 * limit, the declared Content-Length, the upload governor (charged in quanta, before the bytes are
 * accepted), the sha-256 and the declared Content-Digest. Each check throws inside the body, so a
 * store writing it sees a failed write and keeps nothing.
 */
import { createHash, type Hash } from 'node:crypto';
import { isLargeBody } from './large-body.ts';
import { OffThreadSha256 } from './off-thread-sha256.ts';
import { StorageError } from '../errors.ts';
import type { StageOptions } from '../store.ts';

export interface CheckedUpload {
  /** The body's bytes; the final checks run when it ends, before it returns. */
  readonly chunks: AsyncGenerator<Buffer>;
  /** Filled in as `chunks` is read; final once it has ended without throwing. */
  readonly result: { sizeBytes: number; sha256: string };
}

export function checkedUpload(body: AsyncIterable<Uint8Array>, options: StageOptions): CheckedUpload {
  const result = { sizeBytes: 0, sha256: '' };
  async function* chunks(): AsyncGenerator<Buffer> {
    const hash = isLargeBody(options.expectedLength) ? new OffThreadSha256() : createHash('sha256');
    let digested = false;
    try {
      yield* checked(hash);
      digested = true;
    } finally {
      if (!digested && hash instanceof OffThreadSha256) hash.abandon();
    }
  }
  async function* checked(hash: OffThreadSha256 | Hash): AsyncGenerator<Buffer> {
    for await (const chunk of body) {
      options.signal?.throwIfAborted();
      const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      result.sizeBytes += bytes.length;
      if (result.sizeBytes > options.maxBytes)
        throw new StorageError(
          'payload_too_large',
          `The upload is larger than the limit of ${options.maxBytes} bytes.`,
        );
      if (options.expectedLength !== undefined && result.sizeBytes > options.expectedLength) {
        throw new StorageError(
          'invalid_request',
          `The body is longer than its Content-Length of ${options.expectedLength} bytes.`,
        );
      }
      if (options.meter) {
        const quantum = Math.max(1, options.meter.quantumBytes);
        for (let offset = 0; offset < bytes.length; offset += quantum) {
          await options.meter.take(Math.min(quantum, bytes.length - offset), options.signal);
        }
      }
      const hashing = hash.update(bytes);
      if (hashing instanceof Promise) await hashing;
      yield bytes;
    }
    options.signal?.throwIfAborted();
    if (options.expectedLength !== undefined && result.sizeBytes !== options.expectedLength) {
      throw new StorageError(
        'invalid_request',
        `The body has ${result.sizeBytes} bytes but Content-Length said ${options.expectedLength}.`,
      );
    }
    result.sha256 = hash instanceof OffThreadSha256 ? await hash.digest() : hash.digest('hex');
    if (options.expectedSha256 !== undefined && options.expectedSha256 !== result.sha256) {
      throw new StorageError('invalid_request', 'The body does not match its Content-Digest (sha-256).');
    }
  }
  return { chunks: chunks(), result };
}
