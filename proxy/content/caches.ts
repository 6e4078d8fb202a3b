/**
 * Builds the read-path caches from the configuration (docs/storage-and-content.md, "Caches"): the
 * catalog cache with its epoch watcher, the open-file cache (directory store) and the small-blob
 * cache (any store). Each is skipped when its bound is 0. Closing stops the watcher and closes the
 * idle descriptors.
 */
import { EpochWatcher } from '../../lib/epoch-watcher.ts';
import { createCachedCatalog } from '../../storage-adapter/catalog/cached-catalog.ts';
import type { CacheStats } from '../../lib/cache-stats.ts';
import { OpenFileCache } from '../../storage-adapter/fs/index.ts';
import { SmallBlobCache, withSmallBlobCache } from '../../storage-adapter/cache/small-blob-cache.ts';
import type { Catalog } from '../../storage-adapter/catalog/catalog.ts';
import type { ArtifactStore } from '../../storage-adapter/store.ts';
import type { Services } from '../server/services.ts';

export interface ContentCaches {
  readonly openFiles: OpenFileCache | undefined;
  /** The catalog, cached when configured. */
  catalog(inner: Catalog): Promise<Catalog>;
  /** The store, with small blobs served from memory when configured. */
  store(inner: ArtifactStore): ArtifactStore;
  stats(): CacheStats[];
}

export function createContentCaches(services: Services): ContentCaches {
  const { caches } = services.config;
  const sources: Array<() => CacheStats> = [];
  let openFiles: OpenFileCache | undefined;
  if (caches.openFileEntries > 0 && services.config.storage.url === undefined) {
    const opened = new OpenFileCache({
      maxEntries: caches.openFileEntries,
      idleMs: caches.openFileIdleMs,
      clock: services.clock,
    });
    opened.start();
    services.onClose.push(() => opened.close());
    sources.push(() => opened.stats());
    openFiles = opened;
  }
  return {
    openFiles,
    async catalog(inner) {
      if (caches.catalogEntries === 0 || caches.catalogBytes === 0) return inner;
      const watcher = new EpochWatcher({
        name: 'catalog',
        pool: services.pool,
        databaseUrl: services.databaseUrl,
        table: 'arkvory_catalog_epoch',
        channel: 'arkvory_catalog',
        clock: services.clock,
        log: services.log.child({ component: 'catalog-cache' }),
      });
      const cached = createCachedCatalog(inner, watcher, {
        maxEntries: caches.catalogEntries,
        maxBytes: caches.catalogBytes,
      });
      await watcher.start();
      services.onClose.push(() => watcher.stop());
      sources.push(() => cached.stats());
      return cached;
    },
    store(inner) {
      if (caches.blobBytes === 0 || caches.blobMaxObjectBytes === 0) return inner;
      const blobs = new SmallBlobCache({ maxBytes: caches.blobBytes, maxObjectBytes: caches.blobMaxObjectBytes });
      sources.push(() => blobs.stats());
      return withSmallBlobCache(inner, blobs);
    },
    stats: () => sources.map((read) => read()),
  };
}
