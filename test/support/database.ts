import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { migrate } from '../../migrations/runner.ts';

export interface TestDatabase {
  /** URL of this file's own database. */
  url: string;
  name: string;
  pool: pg.Pool;
}

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

/** Creates a fresh database (optionally migrated), returns it with a pool; `drop` removes it. */
export async function createTestDatabase(
  options: { migrated?: boolean } = {},
): Promise<TestDatabase & { drop(): Promise<void> }> {
  const adminUrl = inject('adminDatabaseUrl');
  const name = `arkvory_t_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(adminUrl, name);
  const pool = new pg.Pool({ connectionString: url, max: 5 });
  pool.on('error', () => {});
  if (options.migrated !== false) await migrate(pool);
  return {
    url,
    name,
    pool,
    async drop() {
      await pool.end().catch(() => {});
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
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
