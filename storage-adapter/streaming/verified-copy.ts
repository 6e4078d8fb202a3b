/**
 * A copy a store makes through us (read one object, write it under another name) whose bytes are
 * known: a blob's at its publish, or the damaged bytes scrub read and quarantines. The source read
 * back may have been cut short (a clean early end), rewritten by a proxy, or replaced on the store. The size and the sha256 are checked as the bytes pass, and a
 * mismatch throws inside the body, before it ends: the store sees a failed write and keeps nothing
 * under the target (the one read is never taken as the blob).
 */
import { StorageError } from '../errors.ts';
import { checkedUpload } from './checked-upload.ts';

export interface ExpectedBlob {
  readonly sha256: string;
  readonly sizeBytes: number;
}

/** `source`'s chunks, throwing `stored_bytes_mismatch` (inside the body) unless they are `expected`'s bytes. */
export async function* verifiedCopy(
  source: AsyncIterable<Buffer>,
  expected: ExpectedBlob,
  what: string,
): AsyncGenerator<Buffer> {
  // The upload checks (the same hashing, off the thread for large blobs) with the blob as the declared body.
  const checked = checkedUpload(source, {
    maxBytes: Number.POSITIVE_INFINITY,
    expectedLength: expected.sizeBytes,
    expectedSha256: expected.sha256,
  });
  try {
    yield* checked.chunks;
  } catch (err) {
    // The declared-body checks answer `invalid_request` (the client's fault for an upload); here the
    // store gave back other bytes than it was given. Anything else (the read failing) is as it came.
    if ((err as { code?: unknown } | undefined)?.code !== 'invalid_request') throw err;
    const got = checked.result.sha256 === '' ? '' : ` of sha256 ${checked.result.sha256}`;
    throw new StorageError(
      'stored_bytes_mismatch',
      `${what} read ${checked.result.sizeBytes} bytes${got}${checked.result.sizeBytes > expected.sizeBytes ? ' (at least)' : ''}, not the ${expected.sizeBytes} bytes of sha256 ${expected.sha256} expected: the copy was not completed.`,
      { cause: err },
    );
  }
}
