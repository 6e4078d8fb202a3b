/**
 * PostgreSQL transactions for every layer (policy/, storage-adapter/, proxy/ and migrations/ import
 * this; lib/ imports none of them). The rule the hand-written blocks kept breaking: when the work fails,
 * a failing ROLLBACK (the connection died, which is often *why* the work failed) must never replace the
 * error that caused it, and a connection whose BEGIN, COMMIT or ROLLBACK failed (or that died while
 * checked out) must not go back to the pool.
 */
import type pg from 'pg';
import { isConnectionLost, wasReused } from './connection-loss.ts';

type Queryable = Pick<pg.ClientBase, 'query'>;

export interface TransactionOptions {
  /** The statement that opens it (an isolation level, READ ONLY…); `BEGIN` by default. */
  begin?: string;
}

/** Clients whose transaction control statement failed: their state is unknown. */
const broken = new WeakSet<Queryable>();

/**
 * Runs `work` between BEGIN and COMMIT on `client`. When `work` throws, rolls back and rethrows the
 * work's own error, whatever ROLLBACK did. Returns what `work` returned.
 */
export async function inTransaction<T>(
  client: Queryable,
  work: () => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  await control(client, options.begin ?? 'BEGIN');
  return finishBegun(client, work);
}

/** The part of `inTransaction` after BEGIN. */
async function finishBegun<T>(client: Queryable, work: () => Promise<T>): Promise<T> {
  let result: T;
  try {
    result = await work();
  } catch (err) {
    await control(client, 'ROLLBACK').catch(() => {
      // The work's error is the one to report; a dead connection fails its ROLLBACK too.
    });
    throw err;
  }
  await control(client, 'COMMIT');
  return result;
}

/**
 * Takes a client from `pool`, runs `work(client)` in a transaction (see `inTransaction`), and releases
 * it: destroyed instead of returned when a control statement failed, so a broken connection is never
 * handed to the next caller. A reused connection found dead at BEGIN (it died while idle; nothing of
 * the work ran) is replaced once by a new one (lib/connection-loss.ts).
 */
export async function withTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const client = await pool.connect();
    // A checked-out client has no pool listener: a connection that dies meanwhile (a server restart,
    // pg_terminate_backend) would emit an unhandled 'error' and take the process down.
    const onError = () => broken.add(client);
    client.on('error', onError);
    let lostAtBegin = false;
    try {
      try {
        await control(client, options.begin ?? 'BEGIN');
      } catch (err) {
        if (!(attempt === 1 && wasReused(client) && isConnectionLost(err))) throw err;
        lostAtBegin = true;
      }
      if (!lostAtBegin) return await finishBegun(client, () => work(client));
    } finally {
      client.off('error', onError);
      client.release(broken.has(client) ? new Error('transaction control failed; connection discarded') : undefined);
    }
  }
}

async function control(client: Queryable, sql: string): Promise<void> {
  try {
    await client.query(sql);
  } catch (err) {
    broken.add(client);
    throw err;
  }
}
