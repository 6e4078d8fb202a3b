/** Stable codes of the storage edge. fs errno values are mapped here, the original kept as `cause`. */
import { type CodeOf, CodedError, type CodedErrorOptions, defineErrors, mergeCatalogues } from '../lib/coded-error.ts';
import { COMMON_ERRORS } from '../lib/common-errors.ts';

export const STORAGE_ERRORS = defineErrors('storage-adapter/errors.ts', {
  upload_too_large: {
    status: 413,
    message: 'The multipart upload as a whole would be larger than ARKVORY_MAX_UPLOAD_BYTES.',
    advice:
      'Upload fewer bytes in total (`ARKVORY_MAX_UPLOAD_BYTES` bounds the assembled artifact), or abort the session and start over.',
  },
  object_too_large: {
    status: 413,
    message: 'The artifact store refuses an object this large.',
    advice:
      "The S3 server's limit on one object or part (its `EntityTooLarge`; AWS: 5 GiB in one PUT, 5 TiB in all) is below this upload; nothing was published. Keep `ARKVORY_MAX_UPLOAD_BYTES` within what the store takes, or raise the store's limit.",
  },
  upload_quota_exceeded: {
    status: 413,
    message: 'This principal has too many part bytes stored in uploads not yet assembled.',
    advice:
      'Complete or abort open uploads first (`ARKVORY_MULTIPART_MAX_PENDING_BYTES_PER_PRINCIPAL`), then send the part again.',
  },
  too_many_parts: {
    status: 429,
    message: 'This principal holds too many parts in multipart uploads not yet assembled.',
    advice:
      'Complete or abort an open upload (`ARKVORY_MULTIPART_MAX_PARTS_PER_PRINCIPAL`), then send the part again; send fewer, larger parts.',
  },
  too_many_uploads: {
    status: 429,
    message: 'This principal has too many open multipart uploads; complete or abort one first.',
    advice:
      'Complete or abort an open upload (`ARKVORY_MULTIPART_MAX_SESSIONS_PER_PRINCIPAL`); sessions also expire after `ARKVORY_UPLOAD_SESSION_TTL_SECONDS`.',
  },
  precondition_failed: {
    status: 412,
    message:
      'A precondition of the request (If-Match, If-None-Match, If-Unmodified-Since) does not hold; nothing was changed.',
    advice:
      'The name holds another version than the one the condition names (or none, or one for `If-None-Match: *`): read its current `ETag` (HEAD) and decide again.',
  },
  range_not_satisfiable: {
    status: 416,
    message: 'None of the requested ranges can be satisfied.',
    advice: 'Ask for ranges inside `Content-Range: bytes */<size>`.',
  },
  upload_expired: {
    status: 410,
    message: 'The upload session has expired; start a new one.',
    advice: 'Start a new upload session; the parts of an expired one are removed.',
  },
  part_missing: {
    status: 400,
    message: 'A listed part was never received.',
    advice: 'Upload every listed part (PUT …/parts/{n}) before completing.',
  },
  part_mismatch: {
    status: 400,
    message: 'A listed part digest does not match the part received.',
    advice: 'Re-send the part, or list the sha256 the part was received with.',
  },
  parts_out_of_order: {
    status: 400,
    message: 'Parts must be listed once each, in ascending order.',
    advice: 'List each part once, in ascending part number.',
  },
  storage_mismatch: {
    status: 503,
    message: 'The storage root does not match the database.',
    advice: 'The storage root and the database disagree; mount the right root or database.',
  },
  storage_full: {
    status: 507,
    message: 'The storage has no space left.',
    advice: 'Free disk space on the storage; nothing partial was published.',
  },
  upstream_unreachable: {
    status: 502,
    message: 'The artifact store could not be reached.',
    advice: 'Check that the artifact store (static HTTP server or S3) is up and reachable from the gateway.',
  },
  slice_digest_mismatch: {
    status: 502,
    message: 'The artifact store returned bytes that do not match the digest recorded at publish.',
    advice:
      'The object on the store changed behind the gateway (overwritten or damaged); nothing was served or cached. Run `arkvory scrub` and restore the blob from a backup.',
  },
  stored_bytes_mismatch: {
    status: 502,
    message: 'The artifact store did not keep the bytes it was sent; nothing was published.',
    advice:
      'The copy of an upload into its blob name is another object than the one uploaded: on S3 the server answered the copy with another object (replaced or damaged on the server); on a static-HTTP store without `MOVE` the `GET` of the staged upload came back with other bytes (cut short, rewritten by a proxy, replaced on the host). Nothing was published. Send the upload again; if it recurs, check the store and what stands between it and the gateway, and run `arkvory scrub`. In the `unjudged` list of `arkvory scrub`: the blob was replaced between its read and its move to quarantine/, and nothing was moved; run scrub again.',
  },
  read_incomplete: {
    status: 502,
    message:
      'A read of an object from the artifact store ended with another number of bytes than the store lists for it.',
    advice:
      'The answer was cut short (a proxy or a link that ended it early with a clean end) or ran long, or the object changed between its listing and its read: its bytes were not judged and nothing was moved. Run `arkvory scrub` again; if it recurs for the same blob, check what stands between the store and the gateway.',
  },
  store_unreachable: {
    status: 503,
    message: 'This gateway cannot reach its artifact store right now; retry shortly (another gateway may serve it).',
    advice:
      "The gateway's store probe failed (its `/health/status` says `store.state: unreachable` and the last error): check the store (static HTTP, S3, or the directory's mount) and the network between them; reads through a router go to gateways that reach their store meanwhile.",
  },
  slice_cache_memory_full: {
    status: 503,
    message:
      'The slice cache holds as many slices in memory as it may, and none was given back in time; retry shortly.',
    advice:
      "Slices the cache cannot keep on disk (its disk full, below `ARKVORY_CACHE_MIN_FREE_BYTES`, or failing writes) are sent from memory, and slow clients hold theirs: once `ARKVORY_CACHE_MEMORY_MAX_BYTES` of them are held, a read waits for room up to `ARKVORY_STORAGE_TIMEOUT_SECONDS`, then is answered this (before its status line) or cut (mid-response). Free the cache's disk (`arkvory_slice_cache_relayed_fills_total` rising says it cannot keep slices), or raise the bound if the process has the memory.",
  },
  upstream_timeout: {
    status: 504,
    message: 'The artifact store did not answer in time.',
    advice:
      'The artifact store is slow; check it, or raise `ARKVORY_STORAGE_TIMEOUT_SECONDS` / `ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS`.',
  },
});

/** What a storage module may raise: its own codes and the common ones. */
const RAISED = mergeCatalogues('storage-adapter', COMMON_ERRORS, STORAGE_ERRORS);

export type StorageErrorCode = CodeOf<typeof RAISED>;

export class StorageError extends CodedError<StorageErrorCode> {
  override readonly name: string = 'StorageError';
  constructor(code: StorageErrorCode, message?: string, options?: CodedErrorOptions) {
    super(RAISED, code, message, options);
  }
}

/** Maps an fs failure to a storage code where one fits; otherwise returns undefined (→ internal). */
export function storageErrorFromErrno(err: unknown): StorageError | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new StorageError('storage_full', undefined, { cause: err });
  if (code === 'ENOENT') return new StorageError('not_found', undefined, { cause: err });
  return undefined;
}
