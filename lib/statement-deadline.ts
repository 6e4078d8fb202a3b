/**
 * A client-side deadline on each statement of a pool's connections. A PostgreSQL that takes
 * connections and never answers (the server process stopped, a link that swallows every byte) would
 * otherwise hold each statement, its connection and every request waiting for one until the server
 * answers again, however long that is. Past the deadline the connection is ended at once, without a
 * goodbye (a statement in flight leaves the session mid-protocol, so it is never reused), and its
 * statements fail with DatabaseUnavailable: 503 `unavailable` at the edge, as for a database that
 * refuses connections (the catalog and the key and grant lookups say so in their own words).
 *
 * Not pg's `query_timeout`: it fails the statement but keeps the connection, busy with the one it
 * abandoned, and the pool takes it back as idle unless every holder releases it with the error; the
 * next statement on it then waits behind the hung one. A server-side `statement_timeout` does not
 * help either: a server that does not answer does not run its timer's answer back either.
 *
 * Work that has a bound of its own (or needs none, as a migration) lifts the deadline for one
 * checkout (`liftStatementDeadline`). Cursors and streams (submittables) are not bounded.
 */
import type pg from 'pg';
import { type CodeOf, CodedError } from './coded-error.ts';
import { COMMON_ERRORS } from './common-errors.ts';
import { ResilientPool } from './resilient-pool.ts';

export class DatabaseUnavailable extends CodedError<CodeOf<typeof COMMON_ERRORS>> {
  override readonly name: string = 'DatabaseUnavailable';
  constructor(message: string, cause?: unknown) {
    super(COMMON_ERRORS, 'unavailable', message, { cause, headers: { 'retry-after': '1' } });
  }
}

/**
 * The options of an error that reports a failed lookup in its own words ("Cannot verify the key right
 * now"): `err` as its cause and, when that is DatabaseUnavailable, its Retry-After, so the answer
 * says when to retry as the statement's own error would have.
 */
export function lookupFailure(err: unknown): { cause: unknown; headers?: Readonly<Record<string, string | string[]>> } {
  return err instanceof DatabaseUnavailable ? { cause: err, headers: err.headers } : { cause: err };
}

/** pg.PoolConfig with the deadline, which the pool hands to each Client it makes. */
export interface DeadlinePoolConfig extends pg.PoolConfig {
  /** Longest wait for a statement's answer, and for a connection; undefined: none. */
  statementDeadlineMs?: number;
}

/** Connections whose statements are not bounded until their next checkout. */
const lifted = new WeakSet<object>();

/** Runs the statements of `client` without the deadline until it goes back to its pool. */
export function liftStatementDeadline(client: object): void {
  lifted.add(client);
}

interface ClientInternals {
  connection?: { stream?: { destroy(): void } };
}

type Callback = (err: Error | null, result?: unknown) => void;

/**
 * `base` whose statements fail with DatabaseUnavailable, and end the connection, past the config's
 * deadline; `onExpire` is told once per connection ended so.
 */
export function withStatementDeadline(
  base: typeof pg.Client,
  onExpire: (deadlineMs: number) => void = () => {},
): typeof pg.Client {
  return class DeadlineClient extends base {
    readonly #deadlineMs: number | undefined;
    /** Set once a statement ran out of time: every statement of this connection fails with it. */
    #expired: number | undefined;

    constructor(config?: string | DeadlinePoolConfig) {
      super(config);
      this.#deadlineMs = typeof config === 'object' ? config.statementDeadlineMs : undefined;
    }

    // pg's query is overloaded (promise, callback, submittable); the first two are bounded.
    // biome-ignore lint/suspicious/noExplicitAny: the overloads are passed through whole
    override query(...args: any[]): any {
      const ms = this.#deadlineMs;
      const call = super.query as (...a: unknown[]) => unknown;
      if (ms === undefined || lifted.has(this) || typeof args[0]?.submit === 'function') return call.apply(this, args);
      const timer = setTimeout(() => this.#expire(ms), ms);
      const settle = (err: unknown): unknown => {
        clearTimeout(timer);
        return err && this.#expired !== undefined
          ? new DatabaseUnavailable(`the database did not answer a statement within ${this.#expired} ms`, err)
          : err;
      };
      const at = args.findIndex((a) => typeof a === 'function');
      if (at >= 0) {
        const callback = args[at] as Callback;
        args[at] = (err: Error | null, result?: unknown) => callback(settle(err) as Error | null, result);
        return call.apply(this, args);
      }
      return (call.apply(this, args) as Promise<unknown>).then(
        (result) => {
          clearTimeout(timer);
          return result;
        },
        (err: unknown) => {
          throw settle(err);
        },
      );
    }

    /**
     * Ends the connection under its statement: with one in flight pg destroys the socket rather than
     * wait for a goodbye, fails every statement of the connection, and (as it is ending, not lost)
     * emits no 'error' a holder may not listen for. The pool drops a connection that is ending.
     */
    #expire(ms: number): void {
      if (this.#expired !== undefined) return;
      this.#expired = ms;
      onExpire(ms);
      this.end().catch(() => {});
      // A connection with no statement in flight would send a goodbye first; the server is not reading.
      (this as unknown as ClientInternals).connection?.stream?.destroy();
    }
  } as unknown as typeof pg.Client;
}

/** pg-pool's errors for a connection not had in time (waiting for a free one, or opening a new one). */
function isConnectTimeout(err: unknown): boolean {
  return (
    err instanceof Error &&
    /^(timeout exceeded when trying to connect|Connection terminated due to connection timeout)$/.test(err.message)
  );
}

/**
 * A ResilientPool whose connections bound their statements (see above) and whose wait for a
 * connection fails, past the same deadline, with DatabaseUnavailable too. A checkout clears any
 * earlier `liftStatementDeadline`.
 */
export class DeadlinePool extends ResilientPool {
  readonly #deadlineMs: number;

  constructor(config: DeadlinePoolConfig & { statementDeadlineMs: number }, onRetry?: (err: unknown) => void) {
    super({ ...config, connectionTimeoutMillis: config.statementDeadlineMs }, onRetry);
    this.#deadlineMs = config.statementDeadlineMs;
    this.on('acquire', (client) => lifted.delete(client));
  }

  // biome-ignore lint/suspicious/noExplicitAny: the overloads are passed through whole
  override connect(...args: any[]): any {
    const call = super.connect as (...a: unknown[]) => unknown;
    if (args.length > 0) return call.apply(this, args);
    return (call.apply(this, args) as Promise<pg.PoolClient>).catch((err: unknown) => {
      throw isConnectTimeout(err)
        ? new DatabaseUnavailable(`the database did not give a connection within ${this.#deadlineMs} ms`, err)
        : err;
    });
  }
}
