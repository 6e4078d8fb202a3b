/**
 * Answer bodies the stores read whole (S3 errors and listings, the static store's JSON listings,
 * `storage-id`): each under a cap, so a store, or anything between it and us, that answers with a
 * huge or endless body costs at most the cap. Past it the read fails as 502 `upstream_unreachable`
 * and the body is destroyed, which closes its connection instead of leaving it half-read in the pool.
 * The whole body must also arrive within the storage timeout: undici's body timeout only counts
 * silence, so a body trickled a byte at a time would hold the request for as long as the cap lasts.
 */
import type { Dispatcher } from 'undici';
import { StorageError } from '../errors.ts';
import { upstreamError } from './http-upstream.ts';

const KiB = 1024;
const MiB = 1024 * KiB;

/** Caps by kind of answer (docs/storage-and-content.md, "Bodies read whole"). */
export const BODY_CAPS = {
  /** An S3 `<Error>` document, a copy's or a completion's result, `storage-id`: a few hundred bytes. */
  small: 64 * KiB,
  /** One ListObjectsV2 / ListMultipartUploads page: at most 1000 entries of keys up to 1 KiB. */
  s3Page: 8 * MiB,
  /** The static store's JSON autoindex of one directory, unpaged: some 150,000 entries of `tmp/` or `uploads/`. */
  autoindex: 16 * MiB,
} as const;

/** A body past its cap: the store's answer is not one we read (502 `upstream_unreachable`). */
export class OversizedBodyError extends StorageError {
  override readonly name: string = 'OversizedBodyError';
  constructor(what: string, capBytes: number) {
    super(
      'upstream_unreachable',
      `The artifact store answered ${what} with a body over ${capBytes} bytes; it was not read further.`,
    );
  }
}

/**
 * The body as UTF-8 text, failing past `capBytes` (502) or when it has not ended within `timeoutMs`
 * (504 `upstream_timeout`); the body is destroyed on every failure.
 */
export async function readBoundedText(
  body: Dispatcher.ResponseData['body'],
  limits: { readonly capBytes: number; readonly timeoutMs: number },
  what: string,
): Promise<string> {
  const { capBytes, timeoutMs } = limits;
  const chunks: Buffer[] = [];
  let total = 0;
  const timer = setTimeout(
    () =>
      body.destroy(
        new StorageError(
          'upstream_timeout',
          `The artifact store did not finish its answer to ${what} within ${timeoutMs} ms (${total} bytes so far).`,
        ),
      ),
    timeoutMs,
  );
  try {
    for await (const chunk of body) {
      total += (chunk as Buffer).length;
      if (total > capBytes) throw new OversizedBodyError(what, capBytes);
      chunks.push(chunk as Buffer);
    }
  } catch (err) {
    throw upstreamError(err, what);
  } finally {
    clearTimeout(timer);
    if (!body.destroyed) body.destroy();
  }
  return Buffer.concat(chunks, total).toString('utf8');
}

/** undici's own default: a longer body is not worth keeping its connection for. */
const DRAIN_LIMIT_BYTES = 128 * KiB;

/**
 * Reads a body we do not need to its end, so its connection goes back to the pool: undici's `dump`,
 * which destroys a body past 128 KiB, here also one not ended within `timeoutMs` (a trickled error
 * page would otherwise hold the request). Never fails.
 */
export async function drainBody(body: Dispatcher.ResponseData['body'], timeoutMs: number): Promise<void> {
  // A timer cleared at once, not AbortSignal.timeout's, which would stay armed for the whole
  // timeout after every HEAD on the read path.
  const timer = setTimeout(() => body.destroy(), timeoutMs);
  try {
    await body.dump({ limit: DRAIN_LIMIT_BYTES }).catch(() => {});
  } finally {
    clearTimeout(timer);
  }
}
