/** The vitest layer over test/harness/database.ts: a database on the suite's PostgreSQL. */
import type pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { createDatabase, type ScratchDatabase } from '../harness/index.ts';

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
