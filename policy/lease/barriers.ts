/**
 * Session advisory locks that keep roles exclusive. They live on a connection of their own that a
 * gateway holds from start to stop, so PostgreSQL releases them only when that process's session
 * ends (or its TCP keepalive gives up on it).
 *
 * Their keys are in lib/advisory-barriers.ts.
 */
import type pg from 'pg';
import { BARRIER_LOCK_CLASS as LOCK_CLASS, BARRIERS, type Barrier } from '../../lib/advisory-barriers.ts';

export async function tryLockExclusive(client: pg.ClientBase, barrier: Barrier): Promise<boolean> {
  const r = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [
    LOCK_CLASS,
    BARRIERS[barrier],
  ]);
  return r.rows[0]!.ok;
}

export async function tryLockShared(client: pg.ClientBase, barrier: Barrier): Promise<boolean> {
  const r = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock_shared($1, $2) AS ok', [
    LOCK_CLASS,
    BARRIERS[barrier],
  ]);
  return r.rows[0]!.ok;
}

export async function unlockShared(client: pg.ClientBase, barrier: Barrier): Promise<void> {
  await client.query('SELECT pg_advisory_unlock_shared($1, $2)', [LOCK_CLASS, BARRIERS[barrier]]);
}

export async function unlockExclusive(client: pg.ClientBase, barrier: Barrier): Promise<void> {
  await client.query('SELECT pg_advisory_unlock($1, $2)', [LOCK_CLASS, BARRIERS[barrier]]);
}

/** How many sessions hold a barrier now (any mode), for diagnostics and `policy reset`. */
export async function barrierHolders(client: pg.ClientBase | pg.Pool, barrier: Barrier): Promise<number> {
  const r = await client.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [LOCK_CLASS, BARRIERS[barrier]],
  );
  return r.rows[0]!.n;
}

/** The application_name of each session holding a barrier now (null where a session set none). */
export async function barrierHolderNames(
  client: pg.ClientBase | pg.Pool,
  barrier: Barrier,
): Promise<(string | null)[]> {
  const r = await client.query<{ name: string | null }>(
    `SELECT a.application_name AS name FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 2 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY l.pid`,
    [LOCK_CLASS, BARRIERS[barrier]],
  );
  return r.rows.map((row) => (row.name === '' ? null : row.name));
}
