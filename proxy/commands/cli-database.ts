import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { pino } from 'pino';
import type pg from 'pg';
import { migrate, pendingMigrations } from '../../migrations/runner.ts';
import { createPool, databaseTarget, describeDatabaseTlsRefusal } from '../server/database.ts';
import { isPostmasterOf, SCRAM_ONLY, startEmbeddedDatabase } from '../server/embedded-database.ts';
import { createLogger } from '../server/logger.ts';
import type { Config } from '../config/config.ts';
import { CommandFailure } from './command.ts';
import { EXIT } from '../server/startup-failure.ts';

/**
 * The URL of the embedded PostgreSQL a running `npm start` keeps under `dataDir` (its port is in
 * postmaster.pid), if any: only while the process that file names is that cluster's postmaster,
 * since the superuser password goes to whatever listens on the port.
 */
export async function runningEmbeddedDatabaseUrl(dataDir: string): Promise<string | undefined> {
  const pgDir = path.join(dataDir, '.pg');
  const pidFile = path.join(pgDir, 'postmaster.pid');
  const passwordFile = path.join(dataDir, '.pg.password');
  if (!existsSync(pidFile) || !existsSync(passwordFile)) return undefined;
  const lines = (await readFile(pidFile, 'utf8')).split('\n');
  const port = Number(lines[3]);
  if (!Number.isInteger(port) || port <= 0 || !(await isPostmasterOf(Number(lines[0]), pgDir))) return undefined;
  const password = (await readFile(passwordFile, 'utf8')).trim();
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres?${SCRAM_ONLY}`;
}

/**
 * The configuration in `env`, or exit 2 with one line per problem; with ARKVORY_TLS_CA_FILE set its
 * CAs are trusted by this process, as `arkvory serve` does, so a command reaches a PostgreSQL
 * (`sslmode=verify-full`), Redis or store that a gateway of the same variables reaches (an unusable
 * CA file: one line, exit 1). serve.ts (the whole gateway) loads only when a command runs, so
 * `--help` and usage errors answer without it.
 */
export async function loadCliConfig(env: NodeJS.ProcessEnv): Promise<Config> {
  const { loadConfigOrExit } = await import('../server/serve.ts');
  const config = loadConfigOrExit(env);
  if (config.outboundCaFile !== undefined) {
    const { trustOutboundCertificateAuthorities } = await import('../tls/outbound-ca.ts');
    try {
      trustOutboundCertificateAuthorities(config.outboundCaFile);
    } catch (err) {
      process.stderr.write(`arkvory: ${(err as Error).message}\n`);
      process.exit(EXIT.failure);
    }
  }
  return config;
}

/**
 * The database an admin command works on: ARKVORY_DATABASE_URL, or else the embedded PostgreSQL of
 * a running `npm start` on the same ARKVORY_DATA_DIR (its port is in postmaster.pid). No database
 * answering, or a schema behind the code, is a CommandFailure (exit 1), not a usage error.
 */
export async function openCliPool(env: NodeJS.ProcessEnv, applicationName = 'arkvory-cli'): Promise<pg.Pool> {
  const config = await loadCliConfig(env);
  const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2));
  const url = config.databaseUrl ?? (await runningEmbeddedDatabaseUrl(config.dataDir));
  if (!url) {
    throw new CommandFailure(
      'database_unreachable',
      `ARKVORY_DATABASE_URL is not set and no embedded database is running under ${config.dataDir}; start the gateway (npm start) or set ARKVORY_DATABASE_URL`,
    );
  }
  const pool = createPool(url, 2, log, applicationName);
  const pending = await pendingMigrations(pool).catch(async (err: unknown) => {
    await pool.end();
    const refusal = describeDatabaseTlsRefusal(err, databaseTarget(url));
    throw new CommandFailure(
      'database_unreachable',
      refusal?.message ?? `cannot reach the database: ${(err as Error).message}`,
    );
  });
  if (pending.length) {
    await pool.end();
    throw new CommandFailure('schema_behind', 'the database schema is behind this code; run `npm run migrate` first');
  }
  return pool;
}

/** Whether the postgres named in the embedded cluster's postmaster.pid under `dataDir` runs it (a gateway does). */
async function embeddedDatabaseRunning(dataDir: string): Promise<boolean> {
  const pgDir = path.join(dataDir, '.pg');
  const pidFile = path.join(pgDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return false;
  return isPostmasterOf(Number((await readFile(pidFile, 'utf8')).split('\n')[0]), pgDir);
}

/**
 * openCliPool for offline commands (gc, scrub), which run while no gateway does: on the embedded
 * default with no gateway running its PostgreSQL, this process starts it (migrations applied, as
 * `serve` does) and `close` stops it again. A gateway starting meanwhile is refused by the
 * embedded database itself (another process uses the data dir).
 */
export async function openOfflineCliPool(env: NodeJS.ProcessEnv): Promise<{ pool: pg.Pool; close(): Promise<void> }> {
  const config = await loadCliConfig(env);
  if (config.databaseUrl !== undefined || (await embeddedDatabaseRunning(config.dataDir))) {
    const pool = await openCliPool(env);
    return { pool, close: () => pool.end() };
  }
  // No cluster yet: the gateway creates it at its first start; there is nothing to maintain.
  if (!existsSync(path.join(config.dataDir, '.pg', 'PG_VERSION'))) {
    throw new CommandFailure(
      'database_unreachable',
      `ARKVORY_DATABASE_URL is not set and there is no embedded database under ${config.dataDir} (the gateway creates it at its first start)`,
    );
  }
  const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2));
  let embedded: Awaited<ReturnType<typeof startEmbeddedDatabase>>;
  try {
    embedded = await startEmbeddedDatabase(config.dataDir, log);
  } catch (err) {
    throw new CommandFailure('database_unreachable', `cannot start the embedded database: ${(err as Error).message}`);
  }
  const pool = createPool(embedded.url, 2, log, 'arkvory-cli');
  const close = async () => {
    await pool.end();
    await embedded.stop();
  };
  try {
    await migrate(pool);
  } catch (err) {
    await close();
    throw new CommandFailure('schema_behind', `cannot migrate the embedded database: ${(err as Error).message}`);
  }
  return { pool, close };
}
