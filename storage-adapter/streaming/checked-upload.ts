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
import { SliceHasher, type SliceDigests } from '../slice-digests.ts';
import type { StageOptions } from '../store.ts';

export interface CheckedUpload {
  /** The body's bytes; the final checks run when it ends, before it returns. */
  readonly chunks: AsyncGenerator<Buffer>;
  /** Filled in as `chunks` is read; final once it has ended without throwing. */
  readonly result: { sizeBytes: number; sha256: string; sliceDigests?: SliceDigests | undefined };
}

export function checkedUpload(body: AsyncIterable<Uint8Array>, options: StageOptions): CheckedUpload {
  const result: CheckedUpload['result'] = { sizeBytes: 0, sha256: '' };
  const { sliceBytes } = options;
  // A body of at most one slice has one slice digest, its sha256: no second hash needed.
  const oneSlice = sliceBytes === undefined || (options.expectedLength ?? Number.POSITIVE_INFINITY) <= sliceBytes;
  async function* chunks(): AsyncGenerator<Buffer> {
    const hash = isLargeBody(options.expectedLength)
      ? new OffThreadSha256({ sliceBytes: oneSlice ? undefined : sliceBytes })
      : createHash('sha256');
    let digested = false;
    try {
      yield* checked(hash);
      digested = true;
    } finally {
      if (!digested && hash instanceof OffThreadSha256) hash.abandon();
    }
  }
  async function* checked(hash: OffThreadSha256 | Hash): AsyncGenerator<Buffer> {
    const slices = !oneSlice && !(hash instanceof OffThreadSha256) ? new SliceHasher(sliceBytes!) : undefined;
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
      slices?.update(bytes);
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
    if (sliceBytes !== undefined) {
      const digests = slices?.finish().digests ?? (hash instanceof OffThreadSha256 ? hash.sliceDigests : undefined);
      result.sliceDigests =
        digests !== undefined
          ? { sizeBytes: result.sizeBytes, sliceBytes, digests }
          : wholeAsOneSlice(result.sizeBytes, sliceBytes, result.sha256);
    }
    if (options.expectedSha256 !== undefined && options.expectedSha256 !== result.sha256) {
      throw new StorageError('invalid_request', 'The body does not match its Content-Digest (sha-256).');
    }
  }
  return { chunks: chunks(), result };
}

/** The slice digests of a body that turned out to fit in one slice (or none, when empty). */
function wholeAsOneSlice(sizeBytes: number, sliceBytes: number, sha256: string): SliceDigests | undefined {
  if (sizeBytes > sliceBytes) return undefined;
  return { sizeBytes, sliceBytes, digests: sizeBytes === 0 ? Buffer.alloc(0) : Buffer.from(sha256, 'hex') };
}
