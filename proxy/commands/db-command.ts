import { pino } from 'pino';
import { migrate, withMigrationLock } from '../../migrations/runner.ts';
import { installRoles } from '../../migrations/roles.ts';
import { inTransaction } from '../../lib/transaction.ts';
import { createPool } from '../server/database.ts';
import { createLogger } from '../server/logger.ts';
import { loadCliConfig } from './cli-database.ts';
import { defineCommand, form, type Command } from './command.ts';

export const dbCommand: Command = defineCommand({
  name: 'db',
  summary: 'create or update the database roles (one per gateway role) and their grants',
  description: `roles applies pending migrations, then creates the NOLOGIN group roles arkvory_migrator,
arkvory_writer, arkvory_reader, arkvory_worker, arkvory_maintenance and arkvory_rules where they are
missing, hands every table, sequence and function of the schema to arkvory_migrator, and makes each
runtime role's grants exactly those of docs/deploy.md (every other privilege on the schema revoked).
Run it as a superuser, or as a role with CREATEROLE that owns the schema (the one that migrated it so
far), with ARKVORY_DATABASE_URL; it is safe to run again. Logins are then made members of the group
roles (CREATE ROLE arkvory_r1 LOGIN PASSWORD '…' IN ROLE arkvory_reader) and each gateway connects as
its own. Later \`arkvory migrate\` runs, by a member of arkvory_migrator, re-apply the grants.
Output is JSON on stdout.`,
  forms: [form({ name: 'roles', run: (_input, env) => roles(env) })],
});

async function roles(env: NodeJS.ProcessEnv): Promise<number> {
  const config = await loadCliConfig(env);
  if (!config.databaseUrl) {
    process.stderr.write('arkvory db roles: ARKVORY_DATABASE_URL is not set\n');
    return 2;
  }
  const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2));
  const pool = createPool(config.databaseUrl, 1, log, 'arkvory-db-roles');
  try {
    const applied = await migrate(pool);
    const client = await pool.connect();
    try {
      // Under the migration lock: two `db roles` (or one and a `migrate`) at once would otherwise
      // update the same role and grant rows together and one fail.
      const result = await withMigrationLock(client, () => inTransaction(client, () => installRoles(client)));
      process.stdout.write(
        `${JSON.stringify({ migrationsApplied: applied.map((m) => m.version), ...result }, null, 2)}\n`,
      );
      if (result.undecided.length) {
        process.stderr.write(
          `arkvory db roles: no grant decision for ${result.undecided.join(', ')} (a migration newer than this code?); they get no runtime grant\n`,
        );
        return 1;
      }
      return 0;
    } finally {
      client.release();
    }
  } catch (err) {
    process.stderr.write(`arkvory db roles: ${(err as Error).message}\n`);
    return 1;
  } finally {
    await pool.end();
  }
}
