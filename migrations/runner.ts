/**
 * Forward-only migrations: `NNNN_verb_object.sql` files applied in order, each in its own
 * transaction, recorded in `arkvory_schema_migrations`. A session advisory lock serialises
 * concurrent runs, so two `migrate` commands started together apply each file once.
 */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { inTransaction } from '../lib/transaction.ts';
import { groupRoleName } from './grants.ts';
import { applyGrants, quoteIdent, rolesInstalled } from './roles.ts';

export const MIGRATIONS_DIR = path.dirname(fileURLToPath(import.meta.url));
/** Arbitrary constant shared by every Arkvory process: "arkvory-migrate". */
const MIGRATION_LOCK_KEY = 0x61726b76_6d67n;

/**
 * Runs `fn` holding the session advisory lock every schema change takes (migrations, `db roles`),
 * so concurrent runs wait for each other instead of colliding on the same catalog rows ("tuple
 * concurrently updated"). The lock outlives any transaction `fn` commits.
 */
export async function withMigrationLock<T>(client: pg.ClientBase, fn: () => Promise<T>): Promise<T> {
  await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY.toString()]);
  try {
    return await fn();
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY.toString()]);
  }
}

export interface Migration {
  version: number;
  name: string;
  file: string;
}

export async function listMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort();
  const migrations = files.map((file) => ({
    version: Number(file.slice(0, 4)),
    name: file.slice(5, -4),
    file: path.join(dir, file),
  }));
  for (let i = 1; i < migrations.length; i++) {
    if (migrations[i]!.version === migrations[i - 1]!.version)
      throw new Error(`two migrations numbered ${migrations[i]!.version}`);
  }
  return migrations;
}

async function appliedVersions(client: pg.ClientBase): Promise<Set<number>> {
  const exists = await client.query<{ t: string | null }>(`SELECT to_regclass('arkvory_schema_migrations')::text AS t`);
  if (!exists.rows[0]?.t) return new Set();
  const rows = await client.query<{ version: number }>('SELECT version FROM arkvory_schema_migrations');
  return new Set(rows.rows.map((r) => r.version));
}

/** Applies every pending migration; returns the ones applied by this call. */
export async function migrate(
  pool: pg.Pool,
  options: { dir?: string; onApply?: (m: Migration) => void } = {},
): Promise<Migration[]> {
  const all = await listMigrations(options.dir);
  const client = await pool.connect();
  const applied: Migration[] = [];
  try {
    await withMigrationLock(client, async () => {
      // Once `db roles` has run, migrations run as the migrator, so it owns what they create, and the
      // grants follow: a new table gets its decision from grants.ts, never the default privileges.
      const asMigrator = (await rolesInstalled(client)) && (await memberOfMigrator(client));
      if (asMigrator) await client.query(`SET ROLE ${quoteIdent(groupRoleName('migrator'))}`);
      try {
        await client.query(`CREATE TABLE IF NOT EXISTS arkvory_schema_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
        const done = await appliedVersions(client);
        for (const m of all) {
          if (done.has(m.version)) continue;
          const sql = await readFile(m.file, 'utf8');
          try {
            await inTransaction(client, async () => {
              await client.query(sql);
              await client.query('INSERT INTO arkvory_schema_migrations (version, name) VALUES ($1, $2)', [
                m.version,
                m.name,
              ]);
            });
          } catch (err) {
            throw new Error(`migration ${path.basename(m.file)} failed: ${(err as Error).message}`, { cause: err });
          }
          applied.push(m);
          options.onApply?.(m);
        }
        if (asMigrator && applied.length > 0) await inTransaction(client, () => applyGrants(client));
      } finally {
        if (asMigrator) await client.query('RESET ROLE');
      }
    });
  } finally {
    client.release();
  }
  return applied;
}

async function memberOfMigrator(client: pg.ClientBase): Promise<boolean> {
  const r = await client.query<{ ok: boolean }>(`SELECT pg_has_role(current_user, $1, 'MEMBER') AS ok`, [
    groupRoleName('migrator'),
  ]);
  return r.rows[0]!.ok;
}

/** Migrations the code has that the database does not. */
export async function pendingMigrations(pool: pg.Pool, dir?: string): Promise<Migration[]> {
  const all = await listMigrations(dir);
  const client = await pool.connect();
  try {
    const done = await appliedVersions(client);
    return all.filter((m) => !done.has(m.version));
  } finally {
    client.release();
  }
}
