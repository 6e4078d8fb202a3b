import { migrate } from '../../migrations/runner.ts';
import { createPool, databaseTarget, describeDatabaseTlsRefusal } from '../server/database.ts';
import { pino } from 'pino';
import { createLogger } from '../server/logger.ts';
import { loadCliConfig } from './cli-database.ts';
import { defineCommand, form, type Command } from './command.ts';

export const migrateCommand: Command = defineCommand({
  name: 'migrate',
  summary: 'apply pending database migrations (safe to run concurrently; a second run is a no-op)',
  description: `Applies the numbered SQL files in migrations/ that the database at ARKVORY_DATABASE_URL has not
seen, in order, each in its own transaction, under an advisory lock. Needs ARKVORY_DATABASE_URL
(the embedded database is migrated by \`arkvory serve\` itself).`,
  forms: [form({ run: migrateOnce })],
});

async function migrateOnce(_input: unknown, env: NodeJS.ProcessEnv): Promise<number> {
  const config = await loadCliConfig(env);
  if (!config.databaseUrl) {
    process.stderr.write(
      'arkvory migrate: ARKVORY_DATABASE_URL is not set (the embedded database is migrated by `arkvory serve`)\n',
    );
    return 2;
  }
  // Logs go to stderr so stdout carries only the one-line result.
  const log = createLogger(config.logLevel, pino.destination(2));
  const pool = createPool(config.databaseUrl, 1, log, 'arkvory-migrate');
  try {
    const applied = await migrate(pool, {
      onApply: (m) => log.info({ version: m.version, name: m.name }, 'migration applied'),
    });
    process.stdout.write(
      applied.length
        ? `applied ${applied.length} migration(s): ${applied.map((m) => m.version).join(', ')}\n`
        : 'schema is up to date\n',
    );
    return 0;
  } catch (err) {
    const refusal = describeDatabaseTlsRefusal(err, databaseTarget(config.databaseUrl));
    process.stderr.write(`arkvory migrate: ${(refusal ?? (err as Error)).message}\n`);
    return 1;
  } finally {
    await pool.end();
  }
}
