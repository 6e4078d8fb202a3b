/**
 * Lease discovery against the suite's PostgreSQL: a round whose connection the server ends under its
 * query (an administrator's terminate, as after a password rotation) reads the leases again on a new
 * connection instead of failing the round.
 */
import { expect, it, vi } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { createLogger } from '../server/logger.ts';
import { leaseDiscovery } from './discovery.ts';

const db = useTestDatabase();

it('reads the leases again on a new connection when the server ends the one its query waits on', async () => {
  const discovery = await leaseDiscovery(db.url, createLogger('silent'), 10_000);
  const holder = await db.pool.connect();
  try {
    expect(await discovery.discover()).toEqual([]);
    // The lease table held, so the next round's query is in flight when its connection is ended.
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE arkvory_gateway_leases IN ACCESS EXCLUSIVE MODE');
    const round = discovery.discover();
    const waiting = async () =>
      (
        await db.pool.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity
            WHERE application_name = 'arkvory-router' AND datname = current_database() AND wait_event_type = 'Lock'`,
        )
      ).rows;
    await vi.waitFor(async () => expect(await waiting()).toHaveLength(1), { timeout: 10_000, interval: 50 });
    await db.pool.query('SELECT pg_terminate_backend($1)', [(await waiting())[0]!.pid]);
    await holder.query('COMMIT');
    await expect(round).resolves.toEqual([]);
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    holder.release();
    await discovery.close();
  }
});
