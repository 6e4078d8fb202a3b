import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../test/support/database.ts';
import { inTransaction, withTransaction } from './transaction.ts';

const db = useTestDatabase({ migrated: false });

describe('transactions', () => {
  it('commits what the work did and returns its result', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS t_commit (v int)');
    const r = await withTransaction(db.pool, async (c) => {
      await c.query('INSERT INTO t_commit VALUES (1)');
      return 'done';
    });
    expect(r).toBe('done');
    expect((await db.pool.query('SELECT count(*)::int AS n FROM t_commit')).rows[0].n).toBe(1);
  });

  it('rolls back and rethrows the work’s own error; the connection goes back to the pool', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS t_rollback (v int)');
    const before = db.pool.totalCount;
    const err = await withTransaction(db.pool, async (c) => {
      await c.query('INSERT INTO t_rollback VALUES (1)');
      throw new Error('the work failed');
    }).catch((e: unknown) => e);
    expect((err as Error).message).toBe('the work failed');
    expect((await db.pool.query('SELECT count(*)::int AS n FROM t_rollback')).rows[0].n).toBe(0);
    expect(db.pool.totalCount).toBe(Math.max(before, 1));
  });

  it('a failed ROLLBACK (connection killed) never hides the original error, and the dead connection is discarded', async () => {
    const pids = new Set<number>();
    const err = await withTransaction(db.pool, async (c) => {
      const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      pids.add(pid);
      // Another connection kills this one: the work's next statement and the ROLLBACK both fail.
      await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
      // Let the server's FATAL reach the checked-out client: it must not become an unhandled 'error'.
      await new Promise((resolve) => setTimeout(resolve, 200));
      throw new Error('the original failure');
    }).catch((e: unknown) => e);
    expect((err as Error).message).toBe('the original failure');
    // The next transactions get live connections, not the killed one.
    for (let i = 0; i < 5; i++) {
      const pid = await withTransaction(
        db.pool,
        async (c) => (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid,
      );
      expect(pids.has(pid)).toBe(false);
    }
  });

  it('inTransaction opens with the given statement', async () => {
    const c = await db.pool.connect();
    try {
      const level = await inTransaction(
        c,
        async () =>
          (await c.query<{ transaction_isolation: string }>('SHOW transaction_isolation')).rows[0]!
            .transaction_isolation,
        { begin: 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY' },
      );
      expect(level).toBe('repeatable read');
      await expect(
        inTransaction(c, async () => c.query('CREATE TABLE t_ro (v int)'), { begin: 'BEGIN READ ONLY' }),
      ).rejects.toThrow(/read-only transaction/);
      expect((await c.query<{ s: string }>("SELECT 'alive' AS s")).rows[0]!.s).toBe('alive');
    } finally {
      c.release();
    }
  });
});
