/** A throwaway PostgreSQL database on a server where the caller may create databases. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../../migrations/runner.ts';

export interface ScratchDatabase {
  /** URL of this database (the admin URL with its name). */
  readonly url: string;
  readonly name: string;
  readonly pool: pg.Pool;
  /** Ends the pool and drops the database, whoever is still connected. */
  drop(): Promise<void>;
}

async function asAdmin(adminUrl: string, sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

/**
 * `CREATE DATABASE name TEMPLATE template`, by copying the template's files where the server can
 * (PostgreSQL 15 or later, `STRATEGY FILE_COPY`): its default there writes every block of the copy
 * to the WAL, about three times the time and CPU for the migrated template (9 MB: 335 against 95 ms
 * a copy, measured on this machine), and the suites make hundreds of copies. Older servers (one named
 * by ARKVORY_TEST_DATABASE_URL) copy files anyway and know no STRATEGY.
 */
async function copyDatabase(adminUrl: string, name: string, template: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ v: string }>('SHOW server_version_num');
    const strategy = Number(rows[0]?.v) >= 150_000 ? ' STRATEGY FILE_COPY' : '';
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}${strategy}`);
  } finally {
    await admin.end();
  }
}

/**
 * A pool on `url` that hears the errors of its idle connections: one cut by a test's fault, or by
 * a database drop (`pool.end()` resolves before its connections have closed, and an unheard pool
 * 'error' is an uncaught exception of the test file).
 */
export function openPool(url: string, max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => {});
  return pool;
}

/**
 * Creates `arkvory_<prefix>_<random>` on the server of `adminUrl`, migrated unless told otherwise:
 * a copy of `migratedTemplate` when given (see createMigratedTemplate), else migrated here.
 */
export async function createDatabase(
  adminUrl: string,
  options: { migrated?: boolean; prefix?: string; poolSize?: number; migratedTemplate?: string | undefined } = {},
): Promise<ScratchDatabase> {
  const name = `arkvory_${options.prefix ?? 't'}_${randomBytes(6).toString('hex')}`;
  const template = options.migrated !== false ? options.migratedTemplate : undefined;
  if (template) await copyDatabase(adminUrl, name, template);
  else await asAdmin(adminUrl, `CREATE DATABASE ${name}`);
  const url = Object.assign(new URL(adminUrl), { pathname: `/${name}` }).toString();
  const pool = openPool(url, options.poolSize ?? 5);
  if (options.migrated !== false && !template) await migrate(pool);
  return {
    url,
    name,
    pool,
    async drop() {
      await pool.end().catch(() => {});
      await asAdmin(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

/**
 * A migrated database that nobody connects to, for createDatabase to copy: a copy costs about what
 * an empty CREATE DATABASE does, a run of every migration more than a second on a loaded machine.
 * The migrations set nothing a copy would lose (no database-level settings or grants), and they
 * insert no row that names the database. Returns its name and how to drop it.
 */
export async function createMigratedTemplate(adminUrl: string): Promise<{ name: string; drop(): Promise<void> }> {
  const db = await createDatabase(adminUrl, { prefix: 'template', poolSize: 1 });
  // A template must have no sessions while it is copied.
  await db.pool.end();
  return { name: db.name, drop: () => db.drop() };
}
