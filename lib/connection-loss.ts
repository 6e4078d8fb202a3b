/**
 * A pooled PostgreSQL connection can die while it sits idle (a server restart or failover,
 * `pg_terminate_backend`, an idle timeout on a proxy). The pool drops it once it reads the server's
 * goodbye, but a request may take it first: its statement then fails although nothing of it ran (or
 * it ran and was rolled back with the session). These helpers let the pool and `withTransaction` run
 * such a statement once more on a new connection, instead of failing a request over a death that
 * happened before it began.
 */
import type pg from 'pg';

/**
 * The server ended the session (57P01 admin shutdown, 57P02 crash shutdown) or the socket closed
 * under the statement. Not a refused login, a timeout or an error of the statement itself.
 */
export function isConnectionLost(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === '57P01' || code === '57P02' || code === 'ECONNRESET' || code === 'EPIPE') return true;
  return err instanceof Error && /^Connection terminated unexpectedly$/.test(err.message);
}

const checkouts = new WeakMap<pg.ClientBase, number>();

/** Counts each checkout of `pool`'s connections, for `wasReused`. */
export function countCheckouts(pool: pg.Pool): void {
  pool.on('acquire', (client) => checkouts.set(client, (checkouts.get(client) ?? 0) + 1));
}

/**
 * True when `client`, just checked out of a pool that `countCheckouts` watches, had been checked out
 * before, so it may have died while idle since. A connection on its first use was just opened: its
 * loss says the server is going away, and running the statement again would only fail again.
 */
export function wasReused(client: pg.ClientBase): boolean {
  return (checkouts.get(client) ?? 0) > 1;
}
