import pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { startEmbeddedDatabase, type EmbeddedDatabase } from './embedded-database.ts';

export interface Database {
  readonly pool: pg.Pool;
  readonly url: string;
  readonly embedded: EmbeddedDatabase | undefined;
  close(): Promise<void>;
}

/** One long-lived pool. Every pg setting comes from the config, never from PG* variables. */
export function createPool(url: string, size: number, log: Logger, applicationName = 'arkvory'): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: size,
    application_name: applicationName,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
  });
  // An idle client whose connection dies emits here; without a handler the process would crash.
  pool.on('error', (err) => log.warn({ err: { message: err.message, code: (err as { code?: string }).code } }, 'idle PostgreSQL client failed'));
  return pool;
}

export async function openDatabase(config: Config, log: Logger): Promise<Database> {
  let embedded: EmbeddedDatabase | undefined;
  let url = config.databaseUrl;
  if (!url) {
    embedded = await startEmbeddedDatabase(config.dataDir, log);
    url = embedded.url;
  }
  const pool = createPool(url, config.databasePoolSize, log, `arkvory-${config.role}`);
  return {
    pool,
    url,
    embedded,
    async close() {
      await pool.end().catch((err: unknown) => log.warn({ err }, 'closing the pool failed'));
      if (embedded) await embedded.stop();
    },
  };
}
