/** Stable codes of the storage edge. fs errno values are mapped here, the original kept as `cause`. */
export const STORAGE_ERRORS = {
  not_found: 'Not found.',
  conflict: 'Different content is already published under this name.',
  storage_full: 'The storage has no space left.',
  range_not_satisfiable: 'None of the requested ranges can be satisfied.',
  payload_too_large: 'The upload is larger than allowed.',
  invalid_request: 'The upload does not match what the request declared.',
  storage_mismatch: 'The storage root does not match the database.',
  upstream_unreachable: 'The artifact store could not be reached.',
  upstream_timeout: 'The artifact store did not answer in time.',
  upload_expired: 'The upload session has expired; start a new one.',
  upload_too_large: 'The multipart upload as a whole would be larger than ARKVORY_MAX_UPLOAD_BYTES.',
  upload_quota_exceeded: 'This principal has too many part bytes stored in uploads not yet assembled.',
  too_many_uploads: 'This principal has too many open multipart uploads; complete or abort one first.',
  part_missing: 'A listed part was never received.',
  part_mismatch: 'A listed part digest does not match the part received.',
  parts_out_of_order: 'Parts must be listed once each, in ascending order.',
  unavailable: 'The catalog cannot be read right now; retry later.',
} as const;

export type StorageErrorCode = keyof typeof STORAGE_ERRORS;

export class StorageError extends Error {
  override readonly name = 'StorageError';
  readonly code: StorageErrorCode;
  constructor(code: StorageErrorCode, message?: string, options?: { cause?: unknown }) {
    super(message ?? STORAGE_ERRORS[code], options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}

/** Maps an fs failure to a storage code where one fits; otherwise returns undefined (→ internal). */
export function storageErrorFromErrno(err: unknown): StorageError | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new StorageError('storage_full', undefined, { cause: err });
  if (code === 'ENOENT') return new StorageError('not_found', undefined, { cause: err });
  return undefined;
}
