/**
 * `pg.Pool` whose promise-form `query` runs a statement once more, on a new connection, when the
 * connection it was given had died while idle (see connection-loss.ts). Only once, and only on a
 * reused connection: a second loss, or a loss on a fresh one, is the caller's error as before.
 * Running it again is what a client's retry of the refused request would do, minus the refusal.
 */
import pg from 'pg';
import { countCheckouts, isConnectionLost, wasReused } from './connection-loss.ts';

export class ResilientPool extends pg.Pool {
  readonly #onRetry: (err: unknown) => void;

  constructor(config: pg.PoolConfig, onRetry: (err: unknown) => void = () => {}) {
    super(config);
    this.#onRetry = onRetry;
    countCheckouts(this);
  }

  // pg.Pool's query is overloaded (streams, callbacks, promises); only the promise form is changed.
  // biome-ignore lint/suspicious/noExplicitAny: the overloads are passed through whole
  override query(...args: any[]): any {
    const submittable = typeof args[0]?.submit === 'function';
    if (submittable || args.some((a) => typeof a === 'function'))
      return (super.query as (...a: unknown[]) => unknown).apply(this, args);
    return this.#queryWithRetry(args[0], args[1]);
  }

  async #queryWithRetry(text: string | pg.QueryConfig, values: unknown): Promise<pg.QueryResult> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.connect();
      const reused = wasReused(client);
      let released = false;
      // A connection that dies under the statement also emits 'error' on the checked-out client.
      const onError = (err: Error) => {
        if (released) return;
        released = true;
        client.release(err);
      };
      client.once('error', onError);
      try {
        const result = await client.query(text as string, values as unknown[]);
        client.off('error', onError);
        if (!released) {
          released = true;
          client.release();
        }
        return result;
      } catch (err) {
        client.off('error', onError);
        if (!released) {
          released = true;
          client.release(err as Error);
        }
        if (attempt === 1 && reused && isConnectionLost(err)) {
          this.#onRetry(err);
          continue;
        }
        throw err;
      }
    }
  }
}
