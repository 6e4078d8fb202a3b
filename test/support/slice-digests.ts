import { createHash } from 'node:crypto';
import { type SliceDigests, sliceCount } from '../../storage-adapter/slice-digests.ts';
import type { BlobReader } from '../../storage-adapter/store.ts';

/** The slice digests of `blob` cut in slices of `sliceBytes`, as the catalog records them. */
export function digestsOf(blob: Buffer, sliceBytes: number): SliceDigests {
  const parts: Buffer[] = [];
  for (let i = 0; i < sliceCount(blob.length, sliceBytes); i++)
    parts.push(
      createHash('sha256')
        .update(blob.subarray(i * sliceBytes, (i + 1) * sliceBytes))
        .digest(),
    );
  return { sizeBytes: blob.length, sliceBytes, digests: Buffer.concat(parts) };
}

/** A slice fill's origin read that serves `blob` from memory, whatever range it is asked for. */
export function originOf(blob: Buffer): () => Promise<BlobReader> {
  return async () => ({
    sizeBytes: blob.length,
    async read(buffer, offset, length, position) {
      const n = Math.max(0, Math.min(length, blob.length - position));
      blob.copy(buffer, offset, position, position + n);
      return { bytesRead: n };
    },
    async close() {},
  });
}
