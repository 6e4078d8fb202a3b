import { describe, expect, it } from 'vitest';
import { BackupError } from '../../storage-adapter/backup/errors.ts';
import { backupFailureLine } from './backup-commands.ts';

describe('backupFailureLine', () => {
  it('names a file-system error once, our coded errors by their code, and leaves a bug to its stack', () => {
    const full = Object.assign(new Error('ENOSPC: no space left on device, write'), {
      code: 'ENOSPC',
      syscall: 'write',
    });
    expect(backupFailureLine('backup', full)).toBe('arkvory backup: ENOSPC: no space left on device, write\n');
    expect(backupFailureLine('restore', new BackupError('target_not_empty', 'the store is not empty'))).toBe(
      'arkvory restore: target_not_empty: the store is not empty\n',
    );
    expect(backupFailureLine('backup', new Error('stopped by SIGTERM'))).toBe('arkvory backup: stopped by SIGTERM\n');
    expect(backupFailureLine('backup', new TypeError('x is undefined'))).toBeUndefined();
  });
});
