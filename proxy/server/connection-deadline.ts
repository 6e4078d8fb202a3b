/**
 * Work on one pooled PostgreSQL connection within a deadline. A database that takes the connection
 * and never answers (a stopped server, a link that swallows every byte) would hold the statement,
 * its connection and whatever waits on it forever; past the deadline the connection is ended
 * instead (a statement still running there is abandoned with its session, and the pool slot is free
 * again) and the work fails with ConnectionDeadline. A statement whose COMMIT was sent may still
 * take effect on the server: the caller knows which step its work had reached.
 */
import { liftStatementDeadline } from '../../lib/statement-deadline.ts';
import { systemTimers, type Timers } from '../../policy/timers.ts';

/** What the work needs of a pooled connection (pg.PoolClient). */
export interface DeadlineConnection {
  release(err?: Error): void;
  on(event: 'error', listener: (err: Error) => void): unknown;
  off(event: 'error', listener: (err: Error) => void): unknown;
}

export class ConnectionDeadline extends Error {
  readonly code = 'database_deadline';
  constructor(ms: number) {
    super(`the database did not answer within ${ms} ms`);
  }
}

export interface DeadlineOptions {
  timers?: Timers;
  /** Given a function that ends the work at once, as its deadline would (a stop that cannot wait). */
  onAbandon?: (abandon: () => void) => void;
}

/** A connection that dies between the work's statements fails the next one; its event alone must not crash. */
const ignore = () => {};

/**
 * Runs `work` on a connection of `pool`, every step of it through `within` (which rejects once the
 * deadline passed). The connection goes back to the pool when the work succeeded, and is ended when
 * it failed or ran out of time.
 */
export async function onConnectionWithin<C extends DeadlineConnection, T>(
  pool: { connect(): Promise<C> },
  ms: number,
  work: (conn: C, within: <U>(step: Promise<U>) => Promise<U>) => Promise<T>,
  options: DeadlineOptions = {},
): Promise<T> {
  const timers = options.timers ?? systemTimers;
  let expire: () => void = () => {};
  let expired = false;
  const deadline = new Promise<never>((_, reject) => {
    expire = () => {
      expired = true;
      reject(new ConnectionDeadline(ms));
    };
  });
  deadline.catch(() => {});
  const timer = timers.setTimeout(() => expire(), ms);
  options.onAbandon?.(() => expire());
  const within = <U>(step: Promise<U>) => Promise.race([step, deadline]);
  let conn: C | undefined;
  try {
    const connecting = pool.connect();
    // A connection that arrives after the deadline goes back unused.
    connecting.then(
      (c) => {
        if (expired && conn === undefined) c.release();
      },
      () => {},
    );
    conn = await within(connecting);
    // This deadline is the work's: the pool's shorter one for request statements must not cut it.
    liftStatementDeadline(conn);
    conn.on('error', ignore);
    const result = await within(work(conn, within));
    conn.off('error', ignore);
    conn.release();
    return result;
  } catch (err) {
    if (conn) {
      conn.off('error', ignore);
      conn.release(err instanceof Error ? err : new Error(String(err)));
    }
    throw err;
  } finally {
    timers.clearTimeout(timer);
  }
}
