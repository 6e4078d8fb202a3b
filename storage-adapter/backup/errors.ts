/** Stable codes of backup, verify and restore; the CLI prints `<code>: <message>` and exits 1. */
export const BACKUP_ERRORS = {
  backup_invalid: 'The backup is incomplete or damaged.',
  blob_corrupt: 'A blob does not match its sha256.',
  blob_missing: 'A blob the catalog references is missing.',
  target_not_empty: 'The restore target is not empty.',
  target_busy: 'The restore target is in use or cannot be prepared.',
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
