/**
 * A part read back for its assembly is held to the size it was recorded with: a part file grown on
 * the store (replaced by a larger or a huge sparse file) fails at its first byte past that size,
 * not after the whole file was read and hashed.
 */
import { StorageError } from './errors.ts';

/** The failure of a part found larger on the store than it was recorded; the upload's own, final. */
export function partGrown(part: { readonly partNumber: number; readonly sizeBytes: number }): StorageError {
  return new StorageError(
    'part_mismatch',
    `part ${part.partNumber} is larger on the store than the ${part.sizeBytes} bytes it was received with: it changed after it was received`,
  );
}

/**
 * Yields `chunks` (a part's bytes as its store reads them) and throws `partGrown` at the chunk that
 * crosses the recorded size, before yielding it: nothing past the part's size is used, and the
 * store's read is ended there (the loop's return closes it).
 */
export async function* cappedPart(
  chunks: AsyncIterable<Buffer>,
  part: { readonly partNumber: number; readonly sizeBytes: number },
): AsyncGenerator<Buffer> {
  let size = 0;
  for await (const chunk of chunks) {
    size += chunk.length;
    if (size > part.sizeBytes) throw partGrown(part);
    yield chunk;
  }
}
