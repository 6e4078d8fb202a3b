/**
 * What bounds a multipart upload (pure): one part (`maxPartBytes`), the parts of one session
 * together (`maxUploadBytes`, the same bound as a single upload: the assembled artifact must not be
 * larger), and the part bytes and part files a principal keeps stored in sessions not yet assembled
 * (`maxPendingBytesPerPrincipal`, `maxPartsPerPrincipal`). A part is checked against what the others
 * already hold, so the part that crosses a bound is the one refused.
 */
import { StorageError } from '../errors.ts';

export interface MultipartLimits {
  /** ARKVORY_MAX_UPLOAD_BYTES: the assembled artifact, and so the session's parts together. */
  readonly maxUploadBytes: number;
  readonly maxSessionsPerPrincipal: number;
  readonly maxPendingBytesPerPrincipal: number;
  /**
   * Parts (each a file or object on the store) a principal may hold in sessions not yet assembled:
   * empty parts take no bytes, so without it one principal could fill the store's inodes.
   */
  readonly maxPartsPerPrincipal: number;
}

/** Bytes already stored, not counting the part number being (re)sent. */
export interface StoredBytes {
  /** The other parts of this session. */
  readonly session: number;
  /** Every part of this principal's open or completing sessions (this session's included) but the part number being sent. */
  readonly principal: number;
  /** How many parts those are: the parts the principal holds besides the one being sent. */
  readonly principalParts: number;
}

/** The most bytes a part may hold now; `refuse(size)` is the error for a part of `size` past it. */
export interface PartBound {
  readonly maxBytes: number;
  refuse(sizeBytes: number): StorageError;
}

export function partBound(maxPartBytes: number, limits: MultipartLimits, stored: StoredBytes): PartBound {
  const bounds = [
    {
      maxBytes: Math.max(0, limits.maxUploadBytes - stored.session),
      refuse: (size: number) =>
        new StorageError(
          'upload_too_large',
          `This part would take the upload to ${stored.session + size} bytes; ARKVORY_MAX_UPLOAD_BYTES allows ${limits.maxUploadBytes}.`,
        ),
    },
    {
      maxBytes: Math.max(0, limits.maxPendingBytesPerPrincipal - stored.principal),
      refuse: (size: number) =>
        new StorageError(
          'upload_quota_exceeded',
          `This part would take the bytes stored in your unassembled uploads to ${stored.principal + size}; at most ${limits.maxPendingBytesPerPrincipal} are allowed.`,
        ),
    },
    {
      maxBytes: maxPartBytes,
      refuse: () => new StorageError('payload_too_large', `A part may hold at most ${maxPartBytes} bytes.`),
    },
  ];
  // The tightest bound decides; on a tie the whole-upload bound names the cause best.
  let tightest = bounds[0]!;
  for (const b of bounds) if (b.maxBytes < tightest.maxBytes) tightest = b;
  return tightest;
}

/** Refuses a completion whose parts add up to more than one upload may be (the limit may have dropped since). */
export function checkAssembledSize(totalBytes: number, limits: MultipartLimits): void {
  if (totalBytes > limits.maxUploadBytes)
    throw new StorageError(
      'upload_too_large',
      `The listed parts add up to ${totalBytes} bytes; ARKVORY_MAX_UPLOAD_BYTES allows ${limits.maxUploadBytes}. Abort this upload.`,
    );
}

/** Refuses a new session past the principal's bound on open ones. */
export function checkSessionCount(openSessions: number, limits: MultipartLimits): void {
  if (openSessions >= limits.maxSessionsPerPrincipal)
    throw new StorageError(
      'too_many_uploads',
      `You have ${openSessions} open multipart uploads; at most ${limits.maxSessionsPerPrincipal} are allowed. Complete or abort one first.`,
    );
}

/**
 * Refuses a part that would be one more than the principal may hold; a part number sent again
 * replaces its part, so it is not counted among `stored.principalParts`.
 */
export function checkPartCount(stored: StoredBytes, limits: MultipartLimits): void {
  if (stored.principalParts >= limits.maxPartsPerPrincipal)
    throw new StorageError(
      'too_many_parts',
      `You hold ${stored.principalParts} parts in uploads not yet assembled; at most ${limits.maxPartsPerPrincipal} are allowed. Complete or abort an upload first.`,
    );
}
