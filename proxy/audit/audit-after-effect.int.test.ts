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
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { openUploadWithParts } from '../../test/support/multipart-upload.ts';
import { waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
let gw: GatewayProcess;
let admin: { key: string };
let writer: { key: string };

beforeAll(async () => {
  admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
  await createRepository(db.pool, 'effect');
  writer = await createServiceAccount(db.pool, { grants: { effect: 'write' } });
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

  it('a multipart completion queued, then its session unreadable: 503, the job queued, and its row recorded', async () => {
    const repo = `${gw.url}/api/v1/repositories/effect`;
    const part = randomContent(1024);
    const upload = await openUploadWithParts(repo, 'queued.bin', writer.key, [part]);
    // The completion's transaction is held at its job insert (a SHARE lock on the jobs), then an
    // ACCESS EXCLUSIVE lock on the parts is queued behind the transaction's own read of them: the
    // moment it commits, the lock is taken, and the read of the session for the answer waits past
    // the statement deadline.
    const jobs = await db.pool.connect();
    const parts = await db.pool.connect();
    const waiting = (table: string, mode: string) => async () =>
      (
        await db.pool.query(
          `SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
            WHERE c.relname = $1 AND l.mode = $2 AND NOT l.granted`,
          [table, mode],
        )
      ).rowCount === 1;
    try {
      await jobs.query('BEGIN');
      await jobs.query('LOCK TABLE arkvory_upload_jobs IN SHARE MODE');
      const answer = request(`${repo}/uploads/${upload}/complete`, {
        method: 'POST',
        headers: { ...bearer(writer.key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ parts: [{ partNumber: 1, sha256: sha256(part) }] })),
      });
      await waitUntil(waiting('arkvory_upload_jobs', 'RowExclusiveLock'), {
        what: 'the completion waiting at its job insert',
        intervalMs: 2,
      });
      await parts.query('BEGIN');
      const locked = parts.query('LOCK TABLE arkvory_upload_parts IN ACCESS EXCLUSIVE MODE');
      await waitUntil(waiting('arkvory_upload_parts', 'AccessExclusiveLock'), {
        what: 'the parts lock queued',
        intervalMs: 2,
      });
      await jobs.query('ROLLBACK');
      await locked;
      const res = await answer;
      expect(res.status, res.body.toString()).toBe(503);
    } finally {
      await jobs.query('ROLLBACK').catch(() => {});
      await parts.query('ROLLBACK').catch(() => {});
      jobs.release();
      parts.release();
    }
    const queued = await db.pool.query('SELECT id::text AS id FROM arkvory_upload_jobs WHERE session_id = $1', [
      upload,
    ]);
    expect(queued.rows).toHaveLength(1);
    expect(await audited('artifact.publish')).toEqual([
      {
        target: { repo: 'effect', upload },
        details: { outcome: 'completing', upload, job: queued.rows[0].id, sizeBytes: 1024 },
      },
    ]);
  });
});
