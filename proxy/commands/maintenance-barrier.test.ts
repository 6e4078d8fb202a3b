import { describe, expect, it } from 'vitest';
import { BACKUP_APPLICATION_NAME, holderKind, maintenanceRefusal } from './maintenance-barrier.ts';

describe('who holds the maintenance barrier', () => {
  it('tells gateways and workers, a backup, other offline commands and unknown sessions apart', () => {
    expect(holderKind('arkvory-api-lease')).toBe('gateway');
    expect(holderKind('arkvory-reader-lease')).toBe('gateway');
    expect(holderKind('arkvory-worker-lock')).toBe('gateway');
    // A gateway's pool holds it for the length of a catalog insert.
    expect(holderKind('arkvory-api')).toBe('gateway');
    expect(holderKind('arkvory-worker')).toBe('gateway');
    expect(holderKind('arkvory-rules-service')).toBe('unknown');
    expect(holderKind(BACKUP_APPLICATION_NAME)).toBe('backup');
    expect(holderKind('arkvory-cli')).toBe('offline');
    expect(holderKind('arkvory-restore')).toBe('offline');
    expect(holderKind('psql')).toBe('unknown');
    expect(holderKind(null)).toBe('unknown');
  });

  it('names each kind once, with what to do about it', () => {
    expect(maintenanceRefusal(['arkvory-api-lease', 'arkvory-worker-lock'])).toBe(
      'a gateway or worker is running on this database (holding the maintenance barrier); stop the writer, every reader and the worker first',
    );
    expect(maintenanceRefusal([BACKUP_APPLICATION_NAME])).toBe(
      'a backup (arkvory backup) is running on this database (holding the maintenance barrier); run it again when the backup is done',
    );
    expect(maintenanceRefusal([BACKUP_APPLICATION_NAME, 'arkvory-reader-lease'])).toMatch(
      /^a backup \(arkvory backup\) and a gateway or worker are running .*; run it again when the backup is done; stop the writer/,
    );
    expect(maintenanceRefusal([])).toBe('the maintenance barrier was held a moment ago; run it again');
  });
});
