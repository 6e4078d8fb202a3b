/**
 * The catalog cache against a real PostgreSQL: rows from the real catalog, invalidation through the
 * real epoch table and trigger (migration 0009), freshness from a manual clock.
 */
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { createCatalog, type ArtifactKey, type Catalog } from './catalog.ts';
import { createCachedCatalog } from './cached-catalog.ts';
import { EpochWatcher } from '../../lib/epoch-watcher.ts';
import { openPool, waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
const log = pino({ level: 'silent' });
const SHA = 'ab'.repeat(32);

class Clock {
  now = 0;
  monotonicMs(): number {
    return this.now;
  }
}

/** The real catalog, counting the lookups that reach PostgreSQL. */
function counting(inner: Catalog): Catalog & { gets: number } {
  const counted = { ...inner, gets: 0 };
  counted.get = async (key) => {
    counted.gets++;
    return inner.get(key);
  };
  return counted;
}

const key = (name: string): ArtifactKey => ({ repository: 'cc', kind: 'artifact', name, version: '', asset: '' });

async function publish(catalog: Catalog, name: string): Promise<void> {
  await catalog.insertOrGet({
    ...key(name),
    sha256: SHA,
    sizeBytes: 3,
    contentType: 'application/octet-stream',
    publishedBy: null,
  });
}

describe('cached catalog (real PostgreSQL)', () => {
  const watchers: EpochWatcher[] = [];
  const open = async (options: { listen?: boolean; maxEntries?: number; maxBytes?: number; pool?: pg.Pool } = {}) => {
    const clock = new Clock();
    const watcher = new EpochWatcher({
      name: 'catalog',
      pool: db.pool,
      databaseUrl: db.url,
      table: 'arkvory_catalog_epoch',
      channel: 'arkvory_catalog',
      clock,
      log,
    });
    watchers.push(watcher);
    // Without LISTEN the test drives the polls itself.
    if (options.listen) await watcher.start();
    else await watcher.poll();
    const inner = counting(createCatalog(options.pool ?? db.pool));
    const catalog = createCachedCatalog(inner, watcher, {
      maxEntries: options.maxEntries ?? 1000,
      maxBytes: options.maxBytes ?? 1 << 20,
    });
    return { clock, watcher, inner, catalog };
  };

  beforeAll(async () => {
    await createRepository(db.pool, 'cc');
  });
  afterAll(async () => {
    for (const w of watchers) await w.stop();
  });

  it('a hit costs no query; concurrent misses for one key share one query; absent names are not cached', async () => {
    const { inner, catalog } = await open();
    await publish(catalog, 'hot');
    const results = await Promise.all(Array.from({ length: 20 }, () => catalog.get(key('hot'))));
    expect(inner.gets).toBe(1);
    expect(new Set(results.map((r) => r?.sha256))).toEqual(new Set([SHA]));
    expect((await catalog.get(key('hot')))?.name).toBe('hot');
    expect(inner.gets).toBe(1);
    expect(await catalog.get(key('absent'))).toBeUndefined();
    expect(await catalog.get(key('absent'))).toBeUndefined();
    expect(inner.gets).toBe(3);
    // Published later under that name: found at once (only rows that exist are cached).
    await publish(createCatalog(db.pool), 'absent');
    expect((await catalog.get(key('absent')))?.sha256).toBe(SHA);
    expect(catalog.stats()).toMatchObject({ cache: 'catalog', hits: 1 });
  });

  it('a DELETE by another process is gone from the cache on the next epoch poll, even without LISTEN', async () => {
    const { watcher, inner, catalog } = await open();
    await publish(createCatalog(db.pool), 'doomed');
    expect((await catalog.get(key('doomed')))?.name).toBe('doomed');
    expect((await catalog.get(key('doomed')))?.name).toBe('doomed');
    expect(inner.gets).toBe(1);
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      expect(
        (await other.query(`DELETE FROM arkvory_artifacts WHERE repository = 'cc' AND name = 'doomed'`)).rowCount,
      ).toBe(1);
    } finally {
      await other.end();
    }
    const generation = watcher.generation;
    await watcher.poll();
    expect(watcher.generation).toBe(generation + 1);
    expect(await catalog.get(key('doomed'))).toBeUndefined();
  });

  it('with LISTEN, the notification of a DELETE clears the cache without waiting for a poll', async () => {
    const { watcher, catalog } = await open({ listen: true });
    await publish(createCatalog(db.pool), 'notified');
    expect((await catalog.get(key('notified')))?.name).toBe('notified');
    const generation = watcher.generation;
    await createCatalog(db.pool).remove(key('notified'));
    await waitUntil(() => watcher.generation > generation, { what: 'the NOTIFY', timeoutMs: 10_000, intervalMs: 25 });
    expect(await catalog.get(key('notified'))).toBeUndefined();
  });

  it('a lookup that read a row before this process deleted it, and answers after, does not cache it', async () => {
    const { inner, catalog } = await open();
    await publish(createCatalog(db.pool), 'raced');
    const read = inner.get.bind(inner);
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let reached!: () => void;
    const readDone = new Promise<void>((resolve) => {
      reached = resolve;
    });
    inner.get = async (k) => {
      const row = await read(k);
      reached();
      await held;
      return row;
    };
    const early = catalog.get(key('raced'));
    await readDone;
    expect(await catalog.remove(key('raced'))).toBe(true);
    inner.get = read;
    // A lookup after the DELETE does not join the one begun before it.
    const late = catalog.get(key('raced'));
    release();
    expect(await late).toBeUndefined();
    expect((await early)?.name).toBe('raced');
    // No epoch poll has run: the cache alone must not bring the deleted row back.
    expect(await catalog.get(key('raced'))).toBeUndefined();
    expect(catalog.peek?.(key('raced'))).toBeUndefined();
  });

  it('peek answers at once from a trusted cache only: nothing before the first get, nothing once deleted or stale', async () => {
    const { clock, watcher, inner, catalog } = await open();
    await publish(createCatalog(db.pool), 'peeked');
    expect(catalog.peek!(key('peeked'))).toBeUndefined();
    expect((await catalog.get(key('peeked')))?.name).toBe('peeked');
    expect(catalog.peek!(key('peeked'))?.sha256).toBe(SHA);
    expect(inner.gets).toBe(1);
    clock.now = watcher.freshnessMs + 1;
    expect(catalog.peek!(key('peeked'))).toBeUndefined(); // a stale poll: ask PostgreSQL instead
    await watcher.poll();
    expect(catalog.peek!(key('peeked'))?.name).toBe('peeked');
    await createCatalog(db.pool).remove(key('peeked'));
    await watcher.poll();
    expect(catalog.peek!(key('peeked'))).toBeUndefined();
  });

  it('stops trusting the cache when the poll is stale: asks PostgreSQL, and answers unavailable when it cannot', async () => {
    const pool = openPool(db.url, 1);
    const { clock, watcher, inner, catalog } = await open({ pool });
    await publish(catalog, 'stale');
    expect((await catalog.get(key('stale')))?.name).toBe('stale');
    expect((await catalog.get(key('stale')))?.name).toBe('stale');
    expect(inner.gets).toBe(1);
    clock.now = watcher.freshnessMs + 1;
    expect((await catalog.get(key('stale')))?.name).toBe('stale');
    expect(inner.gets).toBe(2);
    await pool.end();
    // Fresh poll: the cached row is still trusted, the dead pool is not needed.
    await watcher.poll();
    expect((await catalog.get(key('stale')))?.name).toBe('stale');
    // Stale poll and no database behind the catalog: 503 unavailable, not the cached row.
    clock.now += watcher.freshnessMs + 1;
    await expect(catalog.get(key('stale'))).rejects.toMatchObject({ name: 'StorageError', code: 'unavailable' });
  });

  it('holds its bounds under a stream of distinct keys', async () => {
    const { catalog } = await open({ maxEntries: 40, maxBytes: 40 * 400 });
    const writer = createCatalog(db.pool);
    for (let i = 0; i < 200; i++) await publish(writer, `many-${i}`);
    for (let i = 0; i < 200; i++) {
      expect((await catalog.get(key(`many-${i}`)))?.name).toBe(`many-${i}`);
      const stats = catalog.stats();
      expect(stats.entries).toBeLessThanOrEqual(40);
      expect(stats.bytes).toBeLessThanOrEqual(40 * 400);
    }
    expect(catalog.stats().entries).toBeGreaterThan(0);
  });
});

describe('catalog remove with a precondition (real PostgreSQL)', () => {
  it('deletes only the row it checked: one replaced between the check and the delete is checked again', async () => {
    await createRepository(db.pool, 'cr');
    const raced = { ...key('raced'), repository: 'cr' };
    const other = 'cd'.repeat(32);
    const plain = createCatalog(db.pool);
    await plain.insertOrGet({ ...raced, sha256: SHA, sizeBytes: 3, contentType: 'x/y', publishedBy: null });
    // Another client deletes the row and publishes other bytes under the name just before the
    // conditional DELETE reaches PostgreSQL, after its precondition passed on the first row.
    let replaceFirst = true;
    const racing = Object.create(db.pool) as pg.Pool;
    racing.query = (async (text: string, params?: unknown[]) => {
      if (replaceFirst && text.startsWith('DELETE') && text.includes('sha256 = $6')) {
        replaceFirst = false;
        await plain.remove(raced);
        await plain.insertOrGet({ ...raced, sha256: other, sizeBytes: 3, contentType: 'x/y', publishedBy: null });
      }
      return db.pool.query(text, params);
    }) as typeof db.pool.query;
    const seen: string[] = [];
    const refused = new Error('not the version this client saw');
    const removing = createCatalog(racing).remove(raced, (current) => {
      seen.push(current.sha256);
      if (current.sha256 !== SHA) throw refused;
    });
    await expect(removing).rejects.toBe(refused);
    expect(seen).toEqual([SHA, other]);
    expect((await plain.get(raced))?.sha256).toBe(other);
  });
});
