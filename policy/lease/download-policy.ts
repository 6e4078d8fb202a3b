/**
 * The stored shared-download policy (`arkvory_download_policy`). The writer records it; every reader
 * must match it; a standalone start beside it is refused. Online change is not supported: the
 * documented reset (`arkvory policy reset`) removes it with every lease, only when nothing runs.
 */
import type pg from 'pg';
import { barrierHolders, tryLockExclusive, unlockExclusive } from './barriers.ts';
import { inTransaction } from '../../lib/transaction.ts';
import { PolicyError } from '../errors.ts';

export interface DownloadPolicy {
  slots: number;
  downloadBytesPerSec: number;
  downloadBytesPerSecPerPrincipal: number;
}

/** A start the stored shared-download policy (or a held slot) refuses. */
export class PolicyRefusal extends PolicyError {
  override readonly name: string = 'PolicyRefusal';
  declare readonly code: 'startup_refused';
  constructor(message: string) {
    super('startup_refused', message);
  }
}

const RESET_HINT =
  'to change it: stop every gateway and the worker, wait until every arkvory_gateway_leases row has expired, back up, then run `arkvory policy reset` and start the writer first';

function describe(p: DownloadPolicy): string {
  return `SLOTS=${p.slots}, SHARED_DOWNLOAD_BYTES_PER_SECOND=${p.downloadBytesPerSec}, SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL=${p.downloadBytesPerSecPerPrincipal}`;
}

export async function readPolicy(client: pg.ClientBase | pg.Pool): Promise<DownloadPolicy | undefined> {
  const r = await client.query(
    'SELECT slots, download_bytes_per_second::text AS rate, download_bytes_per_second_per_principal::text AS per FROM arkvory_download_policy',
  );
  const row = r.rows[0];
  return row
    ? { slots: row.slots, downloadBytesPerSec: Number(row.rate), downloadBytesPerSecPerPrincipal: Number(row.per) }
    : undefined;
}

function samePolicy(a: DownloadPolicy, b: DownloadPolicy): boolean {
  return (
    a.slots === b.slots &&
    a.downloadBytesPerSec === b.downloadBytesPerSec &&
    a.downloadBytesPerSecPerPrincipal === b.downloadBytesPerSecPerPrincipal
  );
}

/**
 * Startup check. `wanted` undefined = a standalone process. Throws PolicyRefusal with what to do.
 * The writer records the policy when none is stored.
 */
export async function checkPolicy(
  client: pg.ClientBase,
  role: 'api' | 'reader',
  wanted: DownloadPolicy | undefined,
): Promise<DownloadPolicy | undefined> {
  const stored = await readPolicy(client);
  if (!wanted) {
    if (stored)
      throw new PolicyRefusal(
        `a shared download policy is stored (${describe(stored)}); a standalone gateway would bypass it. Start with the same ARKVORY_GATEWAY_SLOTS and SHARED rates, or ${RESET_HINT}`,
      );
    return undefined;
  }
  if (!stored) {
    if (role === 'reader')
      throw new PolicyRefusal(
        'no shared download policy is stored yet: start the writer (ARKVORY_ROLE=api, ARKVORY_GATEWAY_SLOT=0) with the same ARKVORY_GATEWAY_SLOTS and SHARED rates first',
      );
    await client.query(
      `INSERT INTO arkvory_download_policy (slots, download_bytes_per_second, download_bytes_per_second_per_principal) VALUES ($1, $2, $3) ON CONFLICT (singleton) DO NOTHING`,
      [wanted.slots, wanted.downloadBytesPerSec, wanted.downloadBytesPerSecPerPrincipal],
    );
    const now = await readPolicy(client);
    if (now && !samePolicy(now, wanted))
      throw new PolicyRefusal(
        `the stored shared download policy (${describe(now)}) differs from this process's (${describe(wanted)}); ${RESET_HINT}`,
      );
    return now;
  }
  if (!samePolicy(stored, wanted))
    throw new PolicyRefusal(
      `the stored shared download policy (${describe(stored)}) differs from this process's (${describe(wanted)}); ${RESET_HINT}`,
    );
  return stored;
}

export class ResetRefused extends PolicyError {
  override readonly name = 'ResetRefused';
  declare readonly code: 'reset_refused';
  constructor(message: string) {
    super('reset_refused', message);
  }
}

/**
 * The documented reset of coordination state: deletes every lease and the stored policy in one
 * transaction — refused while any lease is unexpired or any gateway/worker holds its barrier.
 */
export async function resetPolicy(client: pg.ClientBase): Promise<{ leasesDeleted: number; policyDeleted: boolean }> {
  const holders = await barrierHolders(client, 'maintenance');
  if (holders > 0)
    throw new ResetRefused(
      `${holders} gateway or worker process(es) still hold the maintenance barrier (a live database session); stop them and verify they have stopped`,
    );
  if (!(await tryLockExclusive(client, 'maintenance')))
    throw new ResetRefused('a gateway or worker still holds the maintenance barrier');
  try {
    return await inTransaction(client, async () => {
      const live = await client.query<{ slot: number; expires_in: string }>(
        `SELECT slot, round(extract(epoch FROM expires_at - clock_timestamp()), 1)::text AS expires_in FROM arkvory_gateway_leases WHERE expires_at > clock_timestamp() ORDER BY slot FOR UPDATE`,
      );
      if (live.rows.length) {
        throw new ResetRefused(
          `lease(s) still unexpired: ${live.rows.map((r) => `slot ${r.slot} (${r.expires_in} s left)`).join(', ')}; wait for them to expire`,
        );
      }
      const leases = await client.query('DELETE FROM arkvory_gateway_leases');
      const policy = await client.query('DELETE FROM arkvory_download_policy');
      return { leasesDeleted: leases.rowCount ?? 0, policyDeleted: (policy.rowCount ?? 0) > 0 };
    });
  } finally {
    await unlockExclusive(client, 'maintenance');
  }
}
