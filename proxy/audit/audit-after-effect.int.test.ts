/**
 * An audited action that took effect, then failed to answer (through a real gateway and a real
 * PostgreSQL): the read after its write waits on a lock this test holds until the statement
 * deadline answers 503. The change is made all the same, so its audit row must be there: before,
 * only a success was recorded, and a quota or group ceiling changed this way left no trace.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';

const db = useTestDatabase();
let gw: GatewayProcess;
let admin: { key: string };

beforeAll(async () => {
  admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
  await createRepository(db.pool, 'effect');
  gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: '300' },
  });
}, 60_000);
afterAll(async () => {
  await gw?.stop('SIGTERM');
});

/** `method url body` while `table` is locked against reads: its answer, the lock released after. */
async function whileLocked(table: string, method: string, url: string, body: unknown): Promise<Response> {
  const lock = await db.pool.connect();
  try {
    await lock.query('BEGIN');
    await lock.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`);
    return await fetch(`${gw.url}${url}`, {
      method,
      headers: { ...bearer(admin.key), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  } finally {
    await lock.query('ROLLBACK');
    lock.release();
  }
}

const audited = async (action: string) =>
  (await db.pool.query('SELECT target, details FROM arkvory_audit_events WHERE action = $1', [action])).rows;

describe('an action whose answer failed after its change was made', () => {
  it('a quota set, then its usage unreadable: 503, the quota set, and its row recorded', async () => {
    const res = await whileLocked('arkvory_quota_reservations', 'PUT', '/api/v1/admin/quotas/repositories/effect', {
      limitBytes: 4096,
    });
    expect(res.status).toBe(503);
    const set = await db.pool.query(`SELECT limit_bytes::int FROM arkvory_storage_quotas WHERE subject = 'effect'`);
    expect(set.rows).toEqual([{ limit_bytes: 4096 }]);
    expect(await audited('quota.set')).toEqual([
      { target: { scope: 'repository', subject: 'effect' }, details: { limitBytes: 4096 } },
    ]);
  });

  it('a group set, then unreadable: 503, the group set, and its row recorded', async () => {
    const res = await whileLocked('arkvory_principal_group_members', 'PUT', '/api/v1/admin/groups/crawlers', {
      downloadBytesPerSec: 2097152,
    });
    expect(res.status).toBe(503);
    const set = await db.pool.query(
      `SELECT download_bytes_per_second::int AS down FROM arkvory_principal_groups WHERE name = 'crawlers'`,
    );
    expect(set.rows).toEqual([{ down: 2097152 }]);
    expect(await audited('group.set')).toEqual([
      { target: { group: 'crawlers' }, details: { downloadBytesPerSec: 2097152 } },
    ]);
  });
});
