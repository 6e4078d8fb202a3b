/** The vitest layer over test/harness/database.ts: a database on the suite's PostgreSQL. */
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { createDatabase, type ScratchDatabase, waitUntil } from '../harness/index.ts';

export interface TestDatabase {
  /** URL of this file's own database. */
  url: string;
  name: string;
  pool: pg.Pool;
}

/** Creates a fresh database (optionally migrated), returns it with a pool; `drop` removes it. */
export function createTestDatabase(options: { migrated?: boolean } = {}): Promise<ScratchDatabase> {
  return createDatabase(inject('adminDatabaseUrl'), { ...options, migratedTemplate: inject('migratedTemplate') });
}

/** A migrated database for the whole test file, dropped after it. Fields are set in beforeAll. */
export function useTestDatabase(options: { migrated?: boolean } = {}): TestDatabase {
  const holder = {} as TestDatabase;
  let drop: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const db = await createTestDatabase(options);
    Object.assign(holder, { url: db.url, name: db.name, pool: db.pool });
    drop = db.drop;
  });
  afterAll(async () => {
    await drop?.();
  });
  return holder;
}

/**
 * Makes the server end `db`'s sessions idle for 300 ms (`idle_session_timeout`, for sessions opened
 * from now on) and waits until it has ended one: the setting is in force for what connects next.
 */
export async function endIdleSessions(db: TestDatabase): Promise<void> {
  await db.pool.query(`ALTER DATABASE "${db.name}" SET idle_session_timeout = '300ms'`);
  const idle = new pg.Client({ connectionString: db.url });
  let ended = false;
  idle.on('error', () => {});
  idle.on('end', () => {
    ended = true;
  });
  await idle.connect();
  try {
    await waitUntil(() => ended, { timeoutMs: 5000, what: 'the server to end an idle session' });
  } finally {
    await idle.end().catch(() => {});
  }
}
