/** Stable codes of backup, verify and restore. The CLI maps `target_not_empty` and `usage`-like ones to exit 2. */
export const BACKUP_ERRORS = {
  backup_invalid: 'The backup is incomplete or damaged.',
  blob_corrupt: 'A blob does not match its sha256.',
  blob_missing: 'A blob the catalog references is missing.',
  target_not_empty: 'The restore target is not empty.',
  schema_newer: 'The backup was made by a newer schema than this code knows.',
} as const;

export type BackupErrorCode = keyof typeof BACKUP_ERRORS;

export class BackupError extends Error {
  override readonly name = 'BackupError';
  readonly code: BackupErrorCode;
  constructor(code: BackupErrorCode, message?: string, options?: { cause?: unknown }) {
    super(message ?? BACKUP_ERRORS[code], options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}
