/**
 * A restore killed part-way at a known point: for tests of what such a restore leaves behind. The
 * point is its transaction, after every blob is in the store and before the commit: a statement
 * trigger of the target database holds the restore's DELETE of arkvory_principals (loadDatabase
 * empties each restorable table first) in pg_sleep, and the restore is killed while it waits there.
 * The backup stays as it was (a restore refuses a blob that is not a regular file, so a named pipe
 * can no longer stand in for a slow blob).
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { pino } from 'pino';
import { migrate } from '../../migrations/runner.ts';
import { startEmbeddedDatabase } from '../../proxy/server/embedded-database.ts';
import { openPool, processEnv, waitUntil } from '../harness/index.ts';
import { CLI, ROOT } from './gateway.ts';

const HOLD = 'test_restore_hold';
/** The restore's connections (backup-commands.ts, openRestoreDatabase). */
const RESTORE_APPLICATION = 'arkvory-restore';

/**
 * Migrates the target database `pool` (an empty migrated database is a restore target as an empty
 * one is) and makes every DELETE of arkvory_principals wait an hour, until `release`.
 */
async function hold(pool: pg.Pool): Promise<void> {
  await migrate(pool);
  await pool.query(
    `CREATE FUNCTION ${HOLD}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3600); RETURN NULL; END $$`,
  );
  await pool.query(
    `CREATE TRIGGER ${HOLD} BEFORE DELETE ON arkvory_principals FOR EACH STATEMENT EXECUTE FUNCTION ${HOLD}()`,
  );
}

/** The restore's backends held by the trigger. */
async function heldBackends(pool: pg.Pool): Promise<number[]> {
  const { rows } = await pool.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND wait_event = 'PgSleep'`,
    [RESTORE_APPLICATION],
  );
  return rows.map((r) => r.pid);
}

/** Ends the held backend of a killed restore (its transaction rolls back) and removes the trigger. */
async function release(pool: pg.Pool, backends: readonly number[]): Promise<void> {
  for (const pid of backends) await pool.query('SELECT pg_terminate_backend($1)', [pid]);
  await waitUntil(async () => (await heldBackends(pool)).length === 0, { what: 'the held restore backend to end' });
  await pool.query(`DROP TRIGGER ${HOLD} ON arkvory_principals`);
  await pool.query(`DROP FUNCTION ${HOLD}()`);
}

/** A restore waiting in its transaction (every blob written, nothing committed), until `kill`. */
export interface HeldRestore {
  readonly pid: number;
  /** SIGKILLs the restore and ends its held backend (its transaction rolls back). */
  kill(): Promise<void>;
}

/**
 * Runs `arkvory restore backup` with `env` until it waits in its transaction; `database()` gives the
 * target database while the restore runs (it may be one the restore started). Throws if the restore
 * ends before it gets there.
 */
async function startHeldRestore(
  backup: string,
  env: Record<string, string>,
  database: () => Promise<pg.Pool>,
): Promise<HeldRestore> {
  const child = spawn(process.execPath, [CLI, 'restore', backup], { cwd: ROOT, env: processEnv(env), stdio: 'ignore' });
  let code: number | string | undefined;
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (c, signal) => {
      code = c ?? signal ?? 'unknown';
      resolve(code);
    }),
  );
  let pool: pg.Pool | undefined;
  const kill = async () => {
    try {
      if (code === undefined) child.kill('SIGKILL');
      await exited;
      if (pool) await release(pool, await heldBackends(pool));
    } finally {
      await pool?.end();
    }
  };
  try {
    await waitUntil(
      async () => {
        if (code !== undefined) throw new Error(`the restore exited (${code}) before its transaction`);
        pool ??= await database();
        return (await heldBackends(pool)).length > 0;
      },
      { what: 'the restore to wait in its transaction', timeoutMs: 60_000, retryOnError: true },
    ).catch((err: unknown) => {
      if (code !== undefined) throw new Error(`the restore exited (${code}) before its transaction`);
      throw err;
    });
  } catch (err) {
    await kill();
    throw err;
  }
  return { pid: child.pid!, kill };
}

/** Runs `arkvory restore backup` with `env` and kills it (SIGKILL) in its transaction, once it waits there. */
async function killHeldRestore(backup: string, env: Record<string, string>, database: () => Promise<pg.Pool>) {
  await (await startHeldRestore(backup, env, database)).kill();
}

/** A restore into the database `url` (its env's ARKVORY_DATABASE_URL) held in its transaction until killed. */
export async function holdRestoreBeforeCommit(
  backup: string,
  env: Record<string, string>,
  url: string,
): Promise<HeldRestore> {
  const pool = openPool(url, 1);
  try {
    await hold(pool);
  } finally {
    await pool.end();
  }
  return startHeldRestore(backup, env, async () => openPool(url, 1));
}

/** A restore into the database `url` (its env's ARKVORY_DATABASE_URL) killed before its commit. */
export async function killRestoreBeforeCommit(backup: string, env: Record<string, string>, url: string): Promise<void> {
  await (await holdRestoreBeforeCommit(backup, env, url)).kill();
}

/**
 * A restore onto the embedded database under `env.ARKVORY_DATA_DIR` killed before its commit: the
 * cluster is made here first (as the restore would make it), and reached while the killed restore's
 * PostgreSQL runs by its port (postmaster.pid) and password (.pg.password). That PostgreSQL outlives
 * the restore.
 */
export async function killEmbeddedRestoreBeforeCommit(backup: string, env: Record<string, string>): Promise<void> {
  const dataDir = env.ARKVORY_DATA_DIR!;
  const embedded = await startEmbeddedDatabase(dataDir, pino({ level: 'silent' }));
  try {
    // Without its query (the product's client options, which this plain client does not take).
    const pool = openPool(embedded.url.split('?')[0]!, 1);
    try {
      await hold(pool);
    } finally {
      await pool.end();
    }
  } finally {
    await embedded.stop();
  }
  await killHeldRestore(backup, env, async () => {
    const port = (await readFile(path.join(dataDir, '.pg', 'postmaster.pid'), 'utf8')).split('\n')[3]?.trim();
    const password = (await readFile(path.join(dataDir, '.pg.password'), 'utf8')).trim();
    const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
    const pool = openPool(url, 1);
    await pool.query('SELECT 1').catch(async (err: unknown) => {
      await pool.end();
      throw err;
    });
    return pool;
  });
}
