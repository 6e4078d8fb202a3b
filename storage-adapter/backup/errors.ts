/** Stable codes of backup, verify and restore; the CLI prints `<code>: <message>` and exits 1. */
import { type CodeOf, CodedError, defineErrors } from '../../lib/coded-error.ts';

export const BACKUP_ERRORS = defineErrors('storage-adapter/backup/errors.ts', {
  backup_invalid: {
    status: null,
    message: 'The backup is incomplete or damaged.',
    advice: 'Use another backup; `arkvory restore --verify` checks one without restoring it.',
  },
  blob_corrupt: {
    status: null,
    message: 'A blob does not match its sha256.',
    advice: 'The named blob is damaged; restore it from another backup, or run `arkvory scrub` on the store.',
  },
  blob_missing: {
    status: null,
    message: 'A blob the catalog references is missing.',
    advice: 'The named blob is gone from the store or the backup; restore it from another backup.',
  },
  target_not_empty: {
    status: null,
    message: 'The restore target is not empty.',
    advice: 'Restore into an empty database and an empty storage root.',
  },
  target_busy: {
    status: null,
    message: 'The restore target is in use or cannot be prepared.',
    advice: 'Stop every gateway and the worker using the target, then restore again; the message says what is left.',
  },
  backup_removed: {
    status: null,
    message: 'The backup just made was removed by another backup into the same destination.',
    advice:
      "Two backups finished at once into one destination and the other one's --keep removed this one; its backup is there. Do not run backups with --keep into one destination at the same time.",
  },
  schema_newer: {
    status: null,
    message: 'The backup was made by a newer schema than this code knows.',
    advice: 'Restore with the Arkvory version that made the backup, or a newer one.',
  },
});

export type BackupErrorCode = CodeOf<typeof BACKUP_ERRORS>;

export class BackupError extends CodedError<BackupErrorCode> {
  override readonly name = 'BackupError';
  constructor(code: BackupErrorCode, message?: string, options?: { cause?: unknown }) {
    super(BACKUP_ERRORS, code, message, options);
  }
}
