/**
 * Opens the store (directory or static HTTP) for this role (writer creates and binds the root, reader verifies),
 * and returns the content and catalog routes. Startup fails with `storage_mismatch` when the root
 * and the database disagree.
 */
import type { Permission } from '../../policy/auth/authorize.ts';
import type { PresignedLinks } from '../../policy/auth/presigned-links.ts';
import { createCatalog } from '../../storage-adapter/catalog/catalog.ts';
import { createStorageQuotas } from '../../policy/quota/storage-quotas.ts';
import type { ArtifactStore } from '../../storage-adapter/store.ts';
import { createContentCaches } from './caches.ts';
import type { Route } from '../server/route-types.ts';
import { gatewayStaging, openStore, removeRetiredStaging, rotatedConfig } from './storage.ts';
import { artifactRoutes } from './artifact-routes.ts';
import { contentRoutes, type ContentDeps, type ContentMeters } from './content-routes.ts';
import { presignRoutes } from './presign-routes.ts';
import { cacheAdminRoutes } from '../admin/cache-admin-routes.ts';
import { quotaAdminRoutes } from '../admin/quota-admin-routes.ts';
import type { Services } from '../server/services.ts';
import { registerSliceCacheMetrics } from '../metrics/slice-cache-metrics.ts';
import { registerCacheMetrics } from '../metrics/cache-metrics.ts';
import { registerUploadMetrics } from '../metrics/upload-metrics.ts';
import { registerStoreHealthMetrics } from '../metrics/store-health-metrics.ts';
import { StoreHealth, storeHealthBody, storeHealthOptions } from '../store-health/store-health.ts';
import { createStoreMonitor } from '../store-health/store-monitor.ts';
import { trackStoreHealth } from '../store-health/tracked-store.ts';
import { traceStore } from '../tracing/traced-store.ts';
import { createTrustedProxies } from '../router/forwarded.ts';

export interface ContentModuleDeps {
  readableRepositories(principalId: string): Promise<string[]>;
  grant(principalId: string, repository: string): Promise<Permission | undefined>;
  /** Bandwidth governors; absent → unthrottled. */
  meters?: ContentMeters;
  /** Pre-signed links (`POST …/presign`); absent → no presign routes. */
  links?: PresignedLinks;
  /** The request's authorization asked again before an upload is published (content-routes.ts). */
  reauthorize?: ContentDeps['reauthorize'];
}

export async function openContentModule(
  services: Services,
  deps: ContentModuleDeps,
): Promise<{ routes: Route[]; store: ArtifactStore }> {
  const { config } = services;
  const caches = createContentCaches(services);
  const ownStaging = config.role === 'reader' ? undefined : gatewayStaging(config, services.instance?.index);
  const opened = await openStore(config, config.role === 'reader' ? 'reader' : 'writer', services.pool, {
    openFiles: caches.openFiles,
    current: rotatedConfig(services),
    keepTmp: services.instance?.joinsServing,
    // Each writer process stages in a directory of its own, which its replacement empties: a killed
    // process's staged uploads go when it is replaced, not at an offline gc.
    ownStaging,
  });
  // The first process of a start also empties the indexes no process of it runs (fewer workers
  // than before). Housekeeping: a store that fails it now still serves, and gc removes them later.
  if (opened.kind !== 'fs' && ownStaging !== undefined && !services.instance?.joinsServing)
    await removeRetiredStaging(opened.tree, ownStaging).then(
      (removed) => {
        if (removed.length > 0)
          services.log.info({ removed }, 'removed the staging directories of worker indexes this start does not run');
      },
      (err: unknown) =>
        services.log.warn(
          { err: { message: (err as Error).message } },
          'could not remove the staging directories of worker indexes this start does not run; offline gc will',
        ),
    );
  // Store health: probed on its own period and fed by the store calls (inside the small-blob cache,
  // so a blob held in memory is served whatever the store's state).
  const intervalMs = config.storage.probeIntervalMs;
  const health = new StoreHealth(storeHealthOptions(intervalMs), services.clock);
  const monitor = createStoreMonitor({
    identity: opened.identity,
    storageId: opened.storageId,
    health,
    intervalMs,
    log: services.log.child({ component: 'store-health' }),
  });
  monitor.start();
  services.onClose.push(() => monitor.stop());
  services.status.push(() => ({ store: storeHealthBody(health.snapshot()) }));
  const tracked = trackStoreHealth(opened, health);
  const store = await caches.store(services.tracing ? traceStore(tracked, services.tracing.tracer) : tracked);
  services.onClose.push(() => store.close());
  if (services.metrics) {
    registerStoreHealthMetrics(services.metrics.registry, health);
    registerCacheMetrics(services.metrics.registry, () => caches.stats());
    registerUploadMetrics(services.metrics.registry, store);
    registerSliceCacheMetrics(services.metrics.registry, () => caches.sliceCache()?.stats);
  }
  services.log.info(
    { storageId: store.storageId, writable: store.writable, store: store.kind, location: store.location },
    'storage root verified',
  );
  const quotas = store.writable ? createStorageQuotas(services.pool) : undefined;
  const catalog = await caches.catalog(createCatalog(services.pool, { sliceBytes: config.sliceCache.sliceBytes }));
  // Where clients reach the gateway: the origin and path prefix of the URLs its answers name.
  const base = { trusted: createTrustedProxies(config.trustedProxies), publicUrl: config.publicUrl };
  const routes = [
    ...contentRoutes({
      store,
      catalog,
      maxUploadBytes: config.maxUploadBytes,
      meters: deps.meters,
      quotas,
      reauthorize: deps.reauthorize,
      base,
    }),
    ...artifactRoutes({
      catalog,
      writable: store.writable,
      readableRepositories: (id) => deps.readableRepositories(id),
      grant: (id, repo) => deps.grant(id, repo),
      base,
    }),
    ...(deps.links
      ? presignRoutes({
          links: deps.links,
          catalog,
          maxExpiresSeconds: config.presignMaxExpiresSeconds,
          ...base,
        })
      : []),
    ...cacheAdminRoutes({ pool: services.pool, catalog, sliceCache: () => caches.sliceCache() }),
    ...(quotas ? quotaAdminRoutes(quotas) : []),
  ];
  return { routes, store };
}
