/**
 * Who holds the maintenance barrier, told by the application_name of the sessions holding it, so
 * a refused gc or scrub names what to wait for. PostgreSQL shows every session's application_name
 * to every role, so this works for a least-privilege maintenance login too.
 */

/** The application_name of `arkvory backup`'s connections (it holds the barrier shared while it copies). */
export const BACKUP_APPLICATION_NAME = 'arkvory-backup';

type HolderKind = 'gateway' | 'backup' | 'offline' | 'unknown';

const KINDS: Record<HolderKind, { who: string; advice: string }> = {
  gateway: { who: 'a gateway or worker', advice: 'stop the writer, every reader and the worker first' },
  backup: { who: 'a backup (arkvory backup)', advice: 'run it again when the backup is done' },
  offline: {
    who: 'another offline command (gc, scrub, restore, policy reset)',
    advice: 'run it again when that is done',
  },
  unknown: { who: 'another session', advice: 'stop the gateways, workers and backups of this database first' },
};

export function holderKind(applicationName: string | null): HolderKind {
  if (applicationName === BACKUP_APPLICATION_NAME) return 'backup';
  if (applicationName === 'arkvory-cli' || applicationName === 'arkvory-restore') return 'offline';
  // `arkvory-<role>`: a gateway's pool, holding the barrier for a catalog insert (storage-adapter/catalog/catalog.ts).
  if (
    applicationName === 'arkvory-worker-lock' ||
    /^arkvory-(api|reader|worker|[a-z]+-lease)$/.test(applicationName ?? '')
  )
    return 'gateway';
  return 'unknown';
}

/** The reason after "refused: ", from the application names of the sessions that hold the barrier. */
export function maintenanceRefusal(applicationNames: readonly (string | null)[]): string {
  const kinds = [...new Set(applicationNames.map(holderKind))];
  // Released between the failed lock and this look: nobody to name.
  if (kinds.length === 0) return 'the maintenance barrier was held a moment ago; run it again';
  const who = kinds.map((k) => KINDS[k].who).join(' and ');
  const advice = kinds.map((k) => KINDS[k].advice).join('; ');
  return `${who} ${kinds.length > 1 ? 'are' : 'is'} running on this database (holding the maintenance barrier); ${advice}`;
}
