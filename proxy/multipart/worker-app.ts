import { createStorageQuotas } from '../../policy/quota/storage-quotas.ts';
import { createCatalog } from '../../storage-adapter/catalog/catalog.ts';
import type { ArtifactStore } from '../../storage-adapter/store.ts';
import { UploadSessions } from '../../storage-adapter/multipart/sessions.ts';
import type { MultipartLimits } from '../../storage-adapter/multipart/bounds.ts';
import { CompletionWorker } from './completion-worker.ts';
import type { Gate, Route } from '../server/route-types.ts';
import { healthRoutes } from '../server/health-routes.ts';
import { multipartRoutes } from './multipart-routes.ts';
import type { ContentMeters } from '../content/content-routes.ts';
import type { Services } from '../server/services.ts';
import { openStore, rotatedConfig } from '../content/storage.ts';
import { registerUploadMetrics } from '../metrics/upload-metrics.ts';
import { createTrustedProxies } from '../router/forwarded.ts';

function multipartLimits(services: Services): MultipartLimits {
  return { maxUploadBytes: services.config.maxUploadBytes, ...services.config.multipart };
}

function startWorker(services: Services, store: ArtifactStore, sessions: UploadSessions): CompletionWorker {
  const worker = new CompletionWorker({
    pool: services.pool,
    databaseUrl: services.databaseUrl,
    store,
    catalog: createCatalog(services.pool, { sliceBytes: services.config.sliceCache.sliceBytes }),
    sessions,
    quotas: store.writable ? createStorageQuotas(services.pool) : undefined,
    log: services.log.child({ component: 'worker' }),
    // The coordinator of this process already holds the shared maintenance barrier.
    holdMaintenanceBarrier: false,
  });
  // An assembly already running may finish during the shutdown grace; otherwise it is retried.
  services.onClose.push(() => worker.stop(services.config.shutdownTimeoutMs));
  // Fenced, the process holds the shared maintenance barrier no more (its lease connection holds it),
  // so offline gc may start: stop at once; the job is queued again by the worker active next.
  services.coordinator.onFenced(() => {
    services.log.warn({ event: 'worker.fenced' }, 'completion worker stopped: this process is fenced');
    void worker.stop(0);
  });
  services.readiness.push(() => ({ worker: { active: worker.isActive } }));
  return worker;
}

/**
 * Multipart routes for the writer (readers get none: every mutating method is read_only there), and
 * the completion worker inside the writer when ARKVORY_EMBEDDED_WORKER=1.
 */
export async function startMultipart(
  services: Services,
  store: ArtifactStore,
  meters: ContentMeters,
): Promise<{ routes: Route[] }> {
  if (services.config.role !== 'api') return { routes: [] };
  const sessions = new UploadSessions({
    pool: services.pool,
    parts: store.parts,
    ttlSeconds: services.config.uploadSessionTtlSeconds,
    limits: multipartLimits(services),
  });
  if (services.config.embeddedWorker) await startWorker(services, store, sessions).start();
  return {
    routes: multipartRoutes({
      sessions,
      maxPartBytes: services.config.maxUploadBytes,
      writable: store.writable,
      meters,
      quotas: store.writable ? createStorageQuotas(services.pool) : undefined,
      base: {
        trusted: createTrustedProxies(services.config.trustedProxies),
        publicUrl: services.config.publicUrl,
      },
    }),
  };
}

/** `ARKVORY_ROLE=worker`: the completion worker and the health routes, nothing else. */
export async function buildWorkerApp(services: Services): Promise<{ routes: Route[]; gates: Gate[] }> {
  const store = await openStore(services.config, 'worker', services.pool, {
    current: rotatedConfig(services),
  });
  services.onClose.push(() => store.close());
  if (services.metrics) registerUploadMetrics(services.metrics.registry, store);
  const sessions = new UploadSessions({
    pool: services.pool,
    parts: store.parts,
    ttlSeconds: services.config.uploadSessionTtlSeconds,
    limits: multipartLimits(services),
  });
  await startWorker(services, store, sessions).start();
  // No auth gate runs here, so only the public health routes are served.
  return { routes: healthRoutes(services).filter((r) => r.access === 'public'), gates: [] };
}
