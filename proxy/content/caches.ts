/**
 * Builds the read-path caches from the configuration (docs/storage-and-content.md, "Caches" and
 * "Cache"): the catalog cache with its epoch watcher, the open-file cache (directory store), the
 * slice cache on disk (static-HTTP and S3 stores, with `ARKVORY_CACHE_DIR`) and the small-blob
 * cache (any store). Each is skipped when its bound is 0 or it is not configured. The catalog epoch
 * watcher is one for both the catalog cache and the slice cache: a blob removed by gc or scrub, or
 * purged, stops being served from the slice cache within the catalog cache's bound. Closing stops
 * the watcher and closes the idle descriptors.
 */
import { EpochWatcher } from '../../lib/epoch-watcher.ts';
import { serialTask } from '../../lib/serial-task.ts';
import { createCachedCatalog } from '../../storage-adapter/catalog/cached-catalog.ts';
import type { CacheStats } from '../../lib/cache-stats.ts';
import { OpenFileCache } from '../../storage-adapter/fs/index.ts';
import { SmallBlobCache, withSmallBlobCache } from '../../storage-adapter/cache/small-blob-cache.ts';
import type { Catalog } from '../../storage-adapter/catalog/catalog.ts';
import {
  blobsWithSliceDigests,
  purgesAtStart,
  purgesSince,
  readSliceDigests,
} from '../../storage-adapter/catalog/slice-rows.ts';
import {
  DigestDirectory,
  removeStrayLayout,
  SliceCache,
  type SliceCacheStats,
  withSliceCache,
  workerSliceCache,
  readPurgeMark,
  writePurgeMark,
} from '../../storage-adapter/slice-cache/index.ts';
import type { ArtifactStore } from '../../storage-adapter/store.ts';
import type { Services } from '../server/services.ts';
import { CATALOG_CHANGED, CATALOG_INVALIDATE, INVALIDATE_DEADLINE_MS } from '../workers/catalog-coherence.ts';

export interface ContentCaches {
  readonly openFiles: OpenFileCache | undefined;
  /** The catalog, cached when configured. */
  catalog(inner: Catalog): Promise<Catalog>;
  /** The store, with slices on disk (remote stores) and small blobs in memory when configured. */
  store(inner: ArtifactStore): Promise<ArtifactStore>;
  stats(): CacheStats[];
  /** The slice cache, when one is configured and the store is remote. */
  sliceCache(): SliceCache | undefined;
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
  let watching: Promise<EpochWatcher> | undefined;
  const catalogWatcher = (): Promise<EpochWatcher> => {
    watching ??= (async () => {
      const watcher = new EpochWatcher({
        name: 'catalog',
        pool: services.pool,
        databaseUrl: services.databaseUrl,
        table: 'arkvory_catalog_epoch',
        channel: 'arkvory_catalog',
        clock: services.clock,
        log: services.log.child({ component: 'catalog-cache' }),
      });
      await watcher.start();
      services.onClose.push(() => watcher.stop());
      return watcher;
    })();
    return watching;
  };
  let slices: SliceCache | undefined;
  return {
    openFiles,
    async catalog(inner) {
      if (caches.catalogEntries === 0 || caches.catalogBytes === 0) return inner;
      const watcher = await catalogWatcher();
      const { instance } = services;
      // With workers, a DELETE one of them answers must not be served by another from its cache
      // until PostgreSQL's notification reaches it: the coordinating process tells them first.
      instance?.link.handle(CATALOG_INVALIDATE, () => watcher.invalidate());
      const cached = createCachedCatalog(
        inner,
        watcher,
        { maxEntries: caches.catalogEntries, maxBytes: caches.catalogBytes },
        {
          announceRemoval:
            instance &&
            (() =>
              instance.link
                // The coordinating process waits INVALIDATE_DEADLINE_MS at most for the others.
                .call<void>(CATALOG_CHANGED, undefined, AbortSignal.timeout(2 * INVALIDATE_DEADLINE_MS))
                .catch((err: unknown) =>
                  services.log.warn(
                    { err: { message: (err as Error).message } },
                    'the other workers were not told of a removed catalog row; they drop it at its notification',
                  ),
                )),
        },
      );
      sources.push(() => cached.stats());
      return cached;
    },
    async store(inner) {
      let store = inner;
      const { sliceCache } = services.config;
      if (sliceCache.dir !== undefined && inner.kind !== 'fs') {
        slices = await openSliceCache(services, store, await catalogWatcher());
        const opened = slices;
        sources.push(() => sliceCacheStats(opened.stats));
        store = withSliceCache(
          store,
          opened,
          new DigestDirectory((sha256) => readSliceDigests(services.pool, sha256), await catalogWatcher()),
          {
            readaheadSlices: sliceCache.readaheadSlices,
            storageTimeoutMs: services.config.storage.timeoutMs,
            clock: services.clock,
          },
        );
      }
      if (caches.blobBytes === 0 || caches.blobMaxObjectBytes === 0) return store;
      const blobs = new SmallBlobCache({ maxBytes: caches.blobBytes, maxObjectBytes: caches.blobMaxObjectBytes });
      sources.push(() => blobs.stats());
      // A remote store's small blob is read whole before its response within the store's timeout.
      return withSmallBlobCache(store, blobs, {
        readWholeMs: inner.kind === 'fs' ? undefined : services.config.storage.timeoutMs,
        clock: services.clock,
      });
    },
    stats: () => sources.map((read) => read()),
    sliceCache: () => slices,
  };
}

function sliceCacheStats(s: SliceCacheStats): CacheStats {
  return { cache: 'slice', hits: s.hitRequests, misses: s.missRequests, entries: s.heldSlices, bytes: s.heldBytes };
}

/** A failed sweep is tried again after this long, so a purge does not wait for the next change. */
const SWEEP_RETRY_MS = 1000;
/** Sweeps run at least this often, so the directory's purge note stays well within the retention. */
const SWEEP_REFRESH_MS = 10 * 60_000;

/**
 * Opens the slice cache and keeps it coherent: on every catalog epoch change (a DELETE, gc or scrub
 * removing a blob's digests, a purge request) the slices of blobs that lost their digests, and of
 * purged blobs, are removed; a sweep that fails is tried again a second later. Once at start too:
 * what changed while the gateway (or this worker) was stopped, purges included, read from the time
 * its directory notes as swept last (storage-adapter/slice-cache/purge-mark.ts); a note older than
 * the requests' retention drops every slice.
 */
async function openSliceCache(services: Services, store: ArtifactStore, watcher: EpochWatcher): Promise<SliceCache> {
  const { sliceCache } = services.config;
  const log = services.log.child({ component: 'slice-cache' });
  const { instance } = services;
  const configured = { dir: sliceCache.dir!, maxBytes: sliceCache.maxBytes, maxFiles: sliceCache.maxFiles };
  // A worker owns its part of the directory and of the bounds; the coordinating process removed
  // what belongs to no worker before it started them (run-primary.ts).
  if (!instance) await removeStrayLayout(configured.dir, 1, log);
  const own = instance ? workerSliceCache(configured, instance.index, instance.workers) : configured;
  const cache = await SliceCache.open({
    ...own,
    minFreeBytes: sliceCache.minFreeBytes,
    maxMemoryBytes: sliceCache.maxMemoryBytes,
    log,
  });
  const remove = async (gone: Set<string>): Promise<void> => {
    if (gone.size === 0) return;
    const removed = await cache.removeBlobs(gone);
    log.info(
      { blobs: gone.size, slices: removed },
      'slice cache: removed the slices of deleted, quarantined or purged blobs',
    );
  };
  const withoutDigests = async (held: string[]): Promise<string[]> => {
    const present = await blobsWithSliceDigests(services.pool, held);
    return held.filter((b) => !present.has(b));
  };

  // A note that cannot be written (a full disk) only makes the next start drop more: not a failure.
  let noteWarned = false;
  const noteSwept = (now: Date): Promise<void> =>
    writePurgeMark(own.dir, now).then(
      () => {
        noteWarned = false;
      },
      (err: unknown) => {
        if (!noteWarned)
          log.warn({ err: { message: (err as Error).message } }, 'slice cache: its purge note could not be written');
        noteWarned = true;
      },
    );

  const held = cache.heldBlobs();
  const atStart = await purgesAtStart(services.pool, await readPurgeMark(own.dir));
  if (atStart.blobs === 'all' && held.length > 0)
    log.info({ dir: own.dir }, 'slice cache: not swept within the purge retention; its slices are dropped');
  await remove(new Set([...(await withoutDigests(held)), ...(atStart.blobs === 'all' ? held : atStart.blobs)]));
  await noteSwept(atStart.now);
  let purgeId = atStart.lastId;

  const sweeps = serialTask({
    async run() {
      const gone = await withoutDigests(cache.heldBlobs());
      const purges = await purgesSince(services.pool, purgeId);
      await remove(new Set([...gone, ...purges.blobs]));
      purgeId = purges.lastId;
      await noteSwept(purges.now);
    },
    retryMs: SWEEP_RETRY_MS,
    everyMs: SWEEP_REFRESH_MS,
    onFailure: (err) =>
      log.warn({ err: { message: (err as Error).message } }, 'slice cache sweep failed; trying again'),
    onRecovery: () => log.info('slice cache sweep works again'),
  });
  watcher.onInvalidate(() => sweeps.schedule());
  services.onClose.push(async () => {
    cache.close();
    await sweeps.close();
  });
  log.info(
    {
      dir: own.dir,
      maxBytes: own.maxBytes,
      maxFiles: own.maxFiles,
      heldBytes: cache.stats.heldBytes,
      heldSlices: cache.stats.heldSlices,
      store: store.kind,
    },
    'slice cache open',
  );
  return cache;
}
