/**
 * A pooled connection that died while idle, before the pool read the server's goodbye: the next
 * statement on it fails although nothing of it ran. The death is made deterministic by killing the
 * backend from a child process while this process's event loop is blocked, so the goodbye is still
 * unread in the socket when the statement is sent. A plain pg.Pool is the control: it fails there.
 */
import { execFileSync } from 'node:child_process';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { useTestDatabase } from '../test/support/database.ts';
import { ROOT } from '../test/support/gateway.ts';
import { ResilientPool } from './resilient-pool.ts';
import { withTransaction } from './transaction.ts';

const db = useTestDatabase({ migrated: false });
const pools: pg.Pool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end().catch(() => {})));
});

/** Ends backend `pid` and returns once it is gone, without giving this process's event loop a turn. */
function killBlocking(pid: number): void {
  const script = `
    import pg from 'pg';
    const c = new pg.Client(process.env.ADMIN_URL);
    await c.connect();
    await c.query('SELECT pg_terminate_backend($1)', [Number(process.env.PID)]);
    while ((await c.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [Number(process.env.PID)])).rowCount > 0)
      await new Promise((r) => setTimeout(r, 10));
    await c.end();`;
  execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: ROOT,
    env: { ...process.env, ADMIN_URL: inject('adminDatabaseUrl'), PID: String(pid) },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

function pools2(): { resilient: ResilientPool; plain: pg.Pool; retried: unknown[] } {
  const retried: unknown[] = [];
  const resilient = new ResilientPool({ connectionString: db.url, max: 1 }, (err) => retried.push(err));
  const plain = new pg.Pool({ connectionString: db.url, max: 1 });
  for (const p of [resilient, plain]) {
    p.on('error', () => {}); // the dead idle client, read after the statement
    pools.push(p);
  }
  return { resilient, plain, retried };
}

const backendPid = async (pool: pg.Pool) =>
  (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;

describe('a connection that died while idle', () => {
  it('pool.query: the statement runs again on a new connection (a plain pg.Pool fails with 57P01)', async () => {
    const { resilient, plain, retried } = pools2();
    const plainPid = await backendPid(plain);
    killBlocking(plainPid);
    await expect(plain.query('SELECT 1 AS one')).rejects.toMatchObject({ code: '57P01' });

    const pid = await backendPid(resilient);
    killBlocking(pid);
    const { rows } = await (resilient as pg.Pool).query<{ one: number }>('SELECT 1 AS one');
    expect(rows).toEqual([{ one: 1 }]);
    expect(retried).toHaveLength(1);
    expect(retried[0]).toMatchObject({ code: '57P01' });
    expect(await backendPid(resilient)).not.toBe(pid);
  });

  it('withTransaction: a reused connection found dead at BEGIN is replaced, and the work runs once', async () => {
    const { resilient, plain } = pools2();
    await db.pool.query('CREATE TABLE IF NOT EXISTS t_idle_death (v int)');
    killBlocking(await backendPid(plain));
    await expect(withTransaction(plain, (c) => c.query('INSERT INTO t_idle_death VALUES (0)'))).rejects.toMatchObject({
      code: '57P01',
    });

    killBlocking(await backendPid(resilient));
    let runs = 0;
    await withTransaction(resilient, async (c) => {
      runs++;
      await c.query('INSERT INTO t_idle_death VALUES (1)');
    });
    expect(runs).toBe(1);
    expect((await db.pool.query('SELECT array_agg(v) AS v FROM t_idle_death')).rows[0].v).toEqual([1]);
  });

  it('a statement that fails for its own reasons is not run again', async () => {
    const { resilient, retried } = pools2();
    await backendPid(resilient);
    await expect(resilient.query('SELECT 1/0')).rejects.toMatchObject({ code: '22012' });
    expect(retried).toEqual([]);
  });
});
