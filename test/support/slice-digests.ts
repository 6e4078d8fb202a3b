import { createHash } from 'node:crypto';
import { type SliceDigests, sliceCount } from '../../storage-adapter/slice-digests.ts';

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
