import type pg from 'pg';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { clientClassFor, currentUrl, type ConnectionUrl } from '../../lib/connection-url.ts';
import { PgClient } from '../../lib/pg-client.ts';
import { ResilientPool } from '../../lib/resilient-pool.ts';
import { DatabaseUnavailable, DeadlinePool, withStatementDeadline } from '../../lib/statement-deadline.ts';
import { systemClock } from '../../policy/clock.ts';
import type { Config } from '../config/config.ts';
import { describeCertificateRefusal } from '../tls/peer-verification.ts';
import { startEmbeddedDatabase, type EmbeddedDatabase } from './embedded-database.ts';

export interface Database {
  readonly pool: pg.Pool;
  /** The URL new connections use: with a password from a file, the one current at each connect. */
  readonly url: ConnectionUrl;
  readonly embedded: EmbeddedDatabase | undefined;
  close(): Promise<void>;
}

/**
 * One long-lived pool. Every pg setting comes from the config, never from PG* variables. Each new
 * connection reads `url` then (a rotated password reaches new connections; open ones drain). A
 * statement given a connection that had died while idle runs once more on a new one (ResilientPool).
 * With `statementDeadlineMs` (the gateway's pool) a statement, and a wait for a connection, fails
 * with 503 `unavailable` past it and its connection is ended (lib/statement-deadline.ts);
 * without (the commands: migrations, backup and restore, gc), a statement may take as long as it needs.
 */
export function createPool(
  url: ConnectionUrl,
  size: number,
  log: Logger,
  applicationName = 'arkvory',
  statementDeadlineMs?: number,
): pg.Pool {
  const config = {
    max: size,
    application_name: applicationName,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
  };
  const onRetry = (err: unknown) =>
    log.info(
      { err: { message: (err as Error).message, code: (err as { code?: string }).code } },
      'a pooled PostgreSQL connection had died while idle; the statement ran again on a new one',
    );
  const pool =
    statementDeadlineMs === undefined
      ? new ResilientPool({ ...config, Client: clientClassFor(PgClient, url) }, onRetry)
      : new DeadlinePool(
          {
            ...config,
            // The request answers 503 `unavailable`, a state logged at info: this line says why.
            Client: clientClassFor(
              withStatementDeadline(PgClient, (deadlineMs) =>
                log.warn(
                  { deadlineMs },
                  'PostgreSQL did not answer a statement within its deadline; the connection is closed, not reused',
                ),
              ),
              url,
            ),
            statementDeadlineMs,
          },
          onRetry,
        );
  // An idle client whose connection dies emits here; without a handler the process would crash.
  pool.on('error', (err) =>
    log.warn({ err: { message: err.message, code: (err as { code?: string }).code } }, 'idle PostgreSQL client failed'),
  );
  return pool;
}

/** `rotatedUrl`: the configured URL as it is now (a password file may have been rotated since start). */
export async function openDatabase(
  config: Config,
  log: Logger,
  rotatedUrl: () => string | undefined = () => config.databaseUrl,
): Promise<Database> {
  let embedded: EmbeddedDatabase | undefined;
  let url: ConnectionUrl;
  if (config.databaseUrl) url = () => rotatedUrl() ?? config.databaseUrl!;
  else {
    const ports = [config.port, config.metrics.port].filter((p): p is number => p !== undefined && p > 0);
    const started = await startEmbeddedDatabase(config.dataDir, log, { avoidPorts: ports });
    embedded = started;
    // Once the server is gone its port is any local account's to listen on, and pg sends the
    // superuser password in clear to a server that asks for it (or takes a stand-in's answers):
    // new connections then go to a socket in the cluster's own directory, which no one else can
    // create, and fail.
    let gone = false;
    void started.lost.then(() => (gone = true));
    const nowhere = `postgres://postgres@localhost/postgres?host=${encodeURIComponent(path.resolve(started.dir))}`;
    url = () => (gone ? nowhere : started.url);
  }
  const pool = createPool(url, config.databasePoolSize, log, `arkvory-${config.role}`, config.databaseQueryTimeoutMs);
  // pool.end() resolves once it has asked each connection to end, not once they have: an embedded
  // server stopped right then would terminate them mid-goodbye (57P01 on an "idle" client).
  const connections = new Set<Promise<void>>();
  pool.on('connect', (client) => {
    const ended = new Promise<void>((resolve) => client.once('end', () => resolve()));
    connections.add(ended);
    void ended.then(() => connections.delete(ended));
  });
  return {
    pool,
    url,
    embedded,
    async close() {
      await pool.end().catch((err: unknown) => log.warn({ err }, 'closing the pool failed'));
      if (embedded) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([Promise.all(connections), new Promise((resolve) => (timer = setTimeout(resolve, 2000)))]);
        clearTimeout(timer);
        await embedded.stop();
      }
    },
  };
}

/** Errors that mean "PostgreSQL is not reachable (yet)", as opposed to a wrong password or database. */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  '57P03',
]);

export function isUnreachable(err: unknown): boolean {
  // A connection or an answer not had within the gateway's statement deadline.
  if (err instanceof DatabaseUnavailable) return true;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (UNREACHABLE_CODES.has(code) || code.startsWith('08'))) return true;
  const message = err instanceof Error ? err.message : '';
  return /Connection terminated|timeout expired|timeout exceeded when trying to connect/i.test(message);
}

/** Startup retry delays: 250 ms, doubling, at most 5 s (attempt counts from 1). */
export function startupRetryDelayMs(attempt: number): number {
  return Math.min(5000, 250 * 2 ** Math.max(0, attempt - 1));
}

export interface WaitForDatabaseOptions {
  /** Give up once this long has passed since the first attempt (0: fail at the first error). */
  boundMs: number;
  /** Where the database is ("host:port"), for the log; never the URL (it may hold a password). */
  target: string;
  log: Logger;
  monotonicMs: () => number;
  sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  /** Aborted when the process is asked to stop while it waits. */
  signal: AbortSignal;
}

/**
 * Startup: probes PostgreSQL until it answers, retrying connection failures with backoff and a
 * warning per attempt, so a gateway started before its database comes up when it appears. Resolves
 * `reachable`, or `stopped` if `signal` fired; throws the last error (with `attempts` and `waitedMs`)
 * once `boundMs` has passed, and at once for any other error (e.g. a wrong password).
 */
export async function waitForDatabase(
  probe: () => Promise<unknown>,
  options: WaitForDatabaseOptions,
): Promise<'reachable' | 'stopped'> {
  const startedMs = options.monotonicMs();
  for (let attempt = 1; ; attempt++) {
    if (options.signal.aborted) return 'stopped';
    try {
      await probe();
      if (attempt > 1)
        options.log.info(
          { target: options.target, attempts: attempt, waitedMs: Math.round(options.monotonicMs() - startedMs) },
          'PostgreSQL reachable; starting',
        );
      return 'reachable';
    } catch (err) {
      const waitedMs = options.monotonicMs() - startedMs;
      const refusal = describeDatabaseTlsRefusal(err, options.target);
      if (refusal) throw refusal;
      if (!isUnreachable(err)) throw err;
      const retryInMs = Math.round(Math.min(startupRetryDelayMs(attempt), Math.max(0, options.boundMs - waitedMs)));
      if (waitedMs >= options.boundMs || retryInMs <= 0) {
        throw Object.assign(
          new Error(
            `PostgreSQL at ${options.target} not reachable after ${attempt} attempt(s) in ${Math.round(waitedMs / 1000)} s (ARKVORY_DATABASE_STARTUP_WAIT_SECONDS=${options.boundMs / 1000}): ${(err as Error).message}`,
            { cause: err },
          ),
          { code: 'database_unreachable', attempts: attempt, waitedMs },
        );
      }
      const code = (err as { code?: unknown }).code;
      options.log.warn(
        {
          target: options.target,
          attempt,
          retryInMs,
          code: typeof code === 'string' ? code : undefined,
          err: { message: (err as Error).message },
        },
        'PostgreSQL not reachable at startup; retrying',
      );
      try {
        await options.sleep(retryInMs, options.signal);
      } catch {
        return 'stopped';
      }
    }
  }
}

/**
 * `waitForDatabase` as each serving process runs it before its first query (a gateway, a
 * workers' instance, the rules service): bounded by ARKVORY_DATABASE_STARTUP_WAIT_SECONDS, on the
 * system clock, its sleep cut short by `signal` (the process asked to stop).
 */
export function waitForDatabaseAtStartup(
  probe: () => Promise<unknown>,
  at: { config: Pick<Config, 'databaseStartupWaitMs'>; url: ConnectionUrl; log: Logger; signal: AbortSignal },
): Promise<'reachable' | 'stopped'> {
  return waitForDatabase(probe, {
    boundMs: at.config.databaseStartupWaitMs,
    target: databaseTarget(currentUrl(at.url)),
    log: at.log,
    monotonicMs: systemClock.monotonicMs,
    sleep: (ms, signal) => sleep(ms, undefined, { signal }),
    signal: at.signal,
  });
}

/**
 * A PostgreSQL whose certificate was refused (`sslmode=verify-full`), or one that does not speak TLS
 * when the URL asks for it, as an error saying which and what to change; undefined for any other
 * failure. Not retried: waiting does not make a certificate trusted.
 */
export function describeDatabaseTlsRefusal(err: unknown, target: string): Error | undefined {
  const reason =
    describeCertificateRefusal(err, 'ARKVORY_TLS_CA_FILE (or sslrootcert= in ARKVORY_DATABASE_URL)') ??
    (err instanceof Error && /does not support SSL connections/.test(err.message)
      ? 'it does not accept TLS connections (ssl=off) but ARKVORY_DATABASE_URL asks for sslmode; turn ssl on in postgresql.conf'
      : undefined);
  if (reason === undefined) return undefined;
  return Object.assign(new Error(`PostgreSQL at ${target} refused: ${reason}`, { cause: err }), {
    code: 'database_tls_refused',
  });
}

/** "host:port" of a PostgreSQL URL, for logs (never the URL: it may hold a password). */
export function databaseTarget(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || '5432'}`;
  } catch {
    return 'the configured database';
  }
}
