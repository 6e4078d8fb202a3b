/**
 * Tells an in-process cache when to forget: polls a one-row epoch table and LISTENs on a channel
 * (`arkvory_auth_epoch`/`arkvory_auth` for keys and grants, `arkvory_catalog_epoch`/`arkvory_catalog`
 * for the catalog).
 * `invalidate` listeners run on every notification, whenever the polled epoch moves, and whenever
 * the LISTEN connection is (re)established or lost. `trusted` is false while the last successful
 * poll was *sent* more than `freshnessMs` ago (its answer says nothing newer than the moment the
 * query left): callers must then ask the database, so a change is never ignored for longer than
 * `freshnessMs` plus one poll, even when notifications are lost or the database answers slowly.
 * One poll runs at a time (a poll asked for meanwhile joins it), so a late answer never replaces a
 * newer one and a slow database is not sent a query per interval on top.
 * `generation` counts invalidations, so a loader can tell that one happened while it was querying.
 */
import type pg from 'pg';
import { PgClient } from './pg-client.ts';
import type { Logger } from 'pino';
import { keepIdleSession } from './idle-session.ts';
import { currentUrl, type ConnectionUrl } from './connection-url.ts';

export interface MonotonicClock {
  monotonicMs(): number;
}

export interface EpochWatcherOptions {
  /** Names the watcher in logs and in the LISTEN connection's application_name (`auth`, `catalog`). */
  readonly name: string;
  readonly pool: pg.Pool;
  /** For the LISTEN connection (one of its own, outside the pool); read at each (re)connect. */
  readonly databaseUrl: ConnectionUrl;
  /** `arkvory_catalog_epoch`: a table with one row and a bigint column `epoch`. */
  readonly table: string;
  readonly channel: string;
  readonly clock: MonotonicClock;
  readonly log: Logger;
  readonly pollIntervalMs?: number;
  readonly freshnessMs?: number;
  /**
   * Runs after each successful epoch read, before the cache counts as trusted (the authenticator
   * reloads its known-key set here). A throw makes the poll a failed one.
   */
  readonly afterPoll?: () => Promise<void>;
}

export class EpochWatcher {
  readonly #options: EpochWatcherOptions;
  readonly #listeners: Array<() => void> = [];
  #epoch: string | undefined;
  #checkedAtMs = Number.NEGATIVE_INFINITY;
  #generation = 0;
  #pollTimer: NodeJS.Timeout | undefined;
  #listener: pg.Client | undefined;
  #stopped = false;
  #pollWarned = false;
  #polling: Promise<void> | undefined;

  constructor(options: EpochWatcherOptions) {
    if (!/^[a-z_][a-z0-9_]*$/.test(options.table) || !/^[a-z_][a-z0-9_]*$/.test(options.channel))
      throw new Error('epoch table and channel must be plain identifiers');
    this.#options = options;
  }

  get freshnessMs(): number {
    return this.#options.freshnessMs ?? 1500;
  }

  get pollIntervalMs(): number {
    return this.#options.pollIntervalMs ?? 500;
  }

  /** Whether cached entries may be used now (a recent successful epoch poll). */
  get trusted(): boolean {
    return this.#options.clock.monotonicMs() - this.#checkedAtMs <= this.freshnessMs;
  }

  get generation(): number {
    return this.#generation;
  }

  onInvalidate(listener: () => void): void {
    this.#listeners.push(listener);
  }

  async start(): Promise<void> {
    await this.poll();
    await this.#listen();
    this.#pollTimer = setInterval(() => void this.poll(), this.pollIntervalMs);
    this.#pollTimer.unref();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#pollTimer);
    const listener = this.#listener;
    this.#listener = undefined;
    await listener?.end().catch(() => {});
  }

  /**
   * Forget now: a sibling process of the same instance changed the table and says so before its
   * answer leaves, which its notification does not wait for.
   */
  invalidate(): void {
    this.#invalidate();
  }

  #invalidate(): void {
    this.#generation++;
    for (const listener of this.#listeners) listener();
  }

  /** One poll now (also run by the timer); joins the poll in flight, if any. */
  poll(): Promise<void> {
    this.#polling ??= this.#pollOnce().finally(() => (this.#polling = undefined));
    return this.#polling;
  }

  async #pollOnce(): Promise<void> {
    // Taken before the query leaves: the answer is at most this fresh, however late it arrives.
    const sentAtMs = this.#options.clock.monotonicMs();
    try {
      const r = await this.#options.pool.query<{ epoch: string }>(
        `SELECT epoch::text AS epoch FROM ${this.#options.table}`,
      );
      const epoch = r.rows[0]?.epoch;
      if (epoch !== this.#epoch) {
        this.#invalidate();
        this.#epoch = epoch;
      }
      await this.#options.afterPoll?.();
      this.#checkedAtMs = Math.max(this.#checkedAtMs, sentAtMs);
      if (this.#pollWarned)
        this.#options.log.info(
          { table: this.#options.table },
          `${this.#options.name} epoch poll works again; cache trusted`,
        );
      this.#pollWarned = false;
    } catch (err) {
      if (!this.#pollWarned)
        this.#options.log.warn(
          { table: this.#options.table, err: { message: (err as Error).message } },
          `${this.#options.name} epoch poll failed; cache not trusted`,
        );
      this.#pollWarned = true;
    }
  }

  async #listen(): Promise<void> {
    if (this.#stopped) return;
    const client = new PgClient({
      connectionString: currentUrl(this.#options.databaseUrl),
      application_name: `arkvory-${this.#options.name}-listen`,
      keepAlive: true,
      connectionTimeoutMillis: 5000,
    });
    const retry = () => {
      if (this.#listener !== client) return;
      this.#listener = undefined;
      this.#invalidate();
      client.end().catch(() => {});
      if (!this.#stopped) setTimeout(() => void this.#listen(), 1000).unref();
    };
    client.on('error', retry);
    client.on('end', retry);
    client.on('notification', () => {
      this.#invalidate();
      void this.poll();
    });
    this.#listener = client;
    try {
      await client.connect();
      // Idle between notifications: ended, every cache it guards would be dropped and the LISTEN redone.
      await keepIdleSession(client);
      await client.query(`LISTEN ${this.#options.channel}`);
      // Anything changed while we were not listening must not survive in the cache; poll at once
      // so the cache is usable again now rather than at the next interval.
      this.#invalidate();
      await this.poll();
    } catch (err) {
      this.#options.log.warn(
        { channel: this.#options.channel, err: { message: (err as Error).message } },
        `${this.#options.name} LISTEN failed; relying on polling`,
      );
      retry();
    }
  }
}
