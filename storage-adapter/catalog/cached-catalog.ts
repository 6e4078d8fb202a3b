/**
 * The catalog with an in-process cache of published rows, so a hot read costs no database round
 * trip. Rows are immutable once published; only DELETE ends one, and every DELETE bumps the catalog
 * epoch (migration 0009), which the EpochWatcher turns into `invalidate` here. The cache is used
 * only while the watcher trusts its last poll; otherwise every lookup asks PostgreSQL, and a lookup
 * PostgreSQL cannot answer is 503 `unavailable`, never a possibly deleted row.
 *
 * Only rows that exist are cached (a name published later needs no invalidation). Concurrent misses
 * for one key share one query; a result that raced an invalidation or a removal by this process is
 * returned but not kept, and requests arriving after either start a fresh query.
 */
import type { ArtifactKey, Catalog, CatalogEntry } from './catalog.ts';
import { StorageError } from '../errors.ts';
import { BoundedLru, type LruBounds } from '../../lib/bounded-lru.ts';
import type { CacheStats } from '../../lib/cache-stats.ts';
import { lookupFailure } from '../../lib/statement-deadline.ts';

export interface CacheValidity {
  readonly trusted: boolean;
  readonly generation: number;
  onInvalidate(listener: () => void): void;
}

/** Rough heap cost of one cached row: its strings (UTF-16) plus object and map overhead. */
export function entryBytes(entry: CatalogEntry): number {
  return (
    2 *
      (entry.repository.length +
        entry.name.length +
        entry.version.length +
        entry.asset.length +
        entry.sha256.length +
        entry.contentType.length +
        (entry.publishedBy?.length ?? 0)) +
    256
  );
}

export function keyString(key: ArtifactKey): string {
  // NUL never occurs in a name (they are printable), so the join is unambiguous.
  return `${key.repository}\0${key.kind}\0${key.name}\0${key.version}\0${key.asset}`;
}

export interface CachedCatalog extends Catalog {
  stats(): CacheStats;
}

export interface CachedCatalogOptions {
  /**
   * Awaited after a row was removed, before `remove` resolves: the other processes of the instance
   * (ARKVORY_WORKERS) drop their cached rows too, so a DELETE answered by one worker is not served
   * by another from its cache until the notification arrives there.
   */
  readonly announceRemoval?: (() => Promise<void>) | undefined;
}

export function createCachedCatalog(
  inner: Catalog,
  validity: CacheValidity,
  bounds: LruBounds,
  options: CachedCatalogOptions = {},
): CachedCatalog {
  const rows = new BoundedLru<string, CatalogEntry>(bounds);
  let inflight = new Map<string, Promise<CatalogEntry | undefined>>();
  let hits = 0;
  let misses = 0;
  /**
   * Removals by this process begun so far: a lookup that overlapped one may hold the row it
   * deleted, and the epoch's generation moves only when the watcher hears of it.
   */
  let removals = 0;
  validity.onInvalidate(() => {
    rows.clear();
    inflight = new Map();
  });

  async function load(id: string, key: ArtifactKey): Promise<CatalogEntry | undefined> {
    const generation = validity.generation;
    const removalsBefore = removals;
    let entry: CatalogEntry | undefined;
    try {
      entry = await inner.get(key);
    } catch (err) {
      throw new StorageError('unavailable', 'The catalog cannot be read right now; retry later.', lookupFailure(err));
    }
    if (entry && validity.trusted && validity.generation === generation && removals === removalsBefore)
      rows.set(id, entry, entryBytes(entry));
    return entry;
  }

  return {
    async get(key) {
      if (!validity.trusted) {
        misses++;
        return load(keyString(key), key);
      }
      const id = keyString(key);
      const cached = rows.get(id);
      if (cached) {
        hits++;
        return cached;
      }
      misses++;
      const pending = inflight.get(id);
      if (pending) return pending;
      const table = inflight;
      const promise = load(id, key).finally(() => {
        if (table.get(id) === promise) table.delete(id);
      });
      table.set(id, promise);
      return promise;
    },
    peek(key) {
      if (!validity.trusted) return undefined;
      const cached = rows.get(keyString(key));
      if (cached) hits++;
      return cached;
    },
    async insertOrGet(entry, options) {
      return inner.insertOrGet(entry, options);
    },
    async remove(key, precondition) {
      // This process forgets at once; the epoch bump tells every other gateway.
      removals++;
      rows.delete(keyString(key));
      const removed = await inner.remove(key, precondition);
      // Nor do lookups from now on share one begun before: it may have read the row.
      rows.delete(keyString(key));
      inflight.delete(keyString(key));
      if (removed) await options.announceRemoval?.();
      return removed;
    },
    referencedBlobs: () => inner.referencedBlobs(),
    ...(inner.recordSlices ? { recordSlices: inner.recordSlices.bind(inner), sliceBytes: inner.sliceBytes } : {}),
    stats: () => ({ cache: 'catalog', hits, misses, entries: rows.size, bytes: rows.bytes }),
  };
}
