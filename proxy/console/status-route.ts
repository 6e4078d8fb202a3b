/**
 * `GET /console/api/status`: this gateway, the shared-profile slots and their health, admission and
 * live transfers, bandwidth ceilings with five minutes of one-second samples, recent rate-limit
 * blocks, the slice cache's hit ratio and size (null without one), and the first page of the
 * storage quotas with their usage (docs/storage-quotas.md).
 */
import { createStorageQuotas } from '../../policy/quota/storage-quotas.ts';
import { workerShare } from '../../storage-adapter/slice-cache/index.ts';
import { quotaBody } from '../admin/quota-admin-routes.ts';
import { sendJson } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import type { Services } from '../server/services.ts';
import { api } from './console-http.ts';
import type { RateSamples } from './rate-samples.ts';
import { createHealthProber, rateLimitBlocks, readSlots, sliceCacheView } from './status.ts';

export function statusRoute(services: Services, samples: RateSamples): Route {
  const { clock, pool, transfers, config, lifecycle, coordinator } = services;
  const quotas = createStorageQuotas(pool);
  const probe = createHealthProber({ timeoutMs: 1000, cacheMs: 1500, monotonicMs: () => clock.monotonicMs() });
  const quotaPage = async () => {
    const page = await quotas.listPage();
    return { quotas: page.items.map(quotaBody), quotasNextCursor: page.nextCursor };
  };
  return api(['GET'], 'status', async (ctx) => {
    const slots = config.shared ? await readSlots(pool) : [];
    const slotViews = await Promise.all(
      slots.map(async (s) => {
        const self = s.owner === coordinator.owner;
        const live = s.expiresInSeconds > 0;
        const health = self
          ? lifecycle.state
          : !live
            ? 'expired'
            : s.advertiseUrl
              ? await probe(s.advertiseUrl)
              : 'not advertised';
        const { owner: _owner, ...rest } = s;
        return { ...rest, self, live, health };
      }),
    );
    const admission = transfers.admission.snapshot();
    const live = transfers.live.list();
    const governor = (d: 'download' | 'upload') => {
      const g = transfers.governors[d].snapshot();
      return {
        bytesPerSecond: g.rateBytesPerSec,
        bytesPerSecondPerPrincipal: g.perPrincipalBytesPerSec,
        waitingQuanta: g.waitingQuanta,
      };
    };
    const counts = (d: 'downloads' | 'uploads') => ({
      active: admission[d].active,
      queued: admission[d].queued,
      rejected: admission[d].rejected,
    });
    sendJson(ctx.res, 200, {
      gateway: {
        role: config.role,
        profile: config.shared ? 'shared' : 'standalone',
        slot: config.shared?.slot ?? null,
        slots: config.shared?.slots ?? null,
        state: lifecycle.state,
        permitted: coordinator.isPermitted(),
      },
      slots: slotViews,
      // The oldest transfers and how many more there are: the table is as long as the queues of
      // every principal together, and the view asks every 2 seconds.
      transfers: {
        downloads: counts('downloads'),
        uploads: counts('uploads'),
        live,
        liveNotShown: transfers.live.size - live.length,
      },
      bandwidth: {
        ceilings: {
          download: governor('download'),
          upload: governor('upload'),
          sharedDownloadBytesPerSecond: config.shared?.downloadBytesPerSec ?? null,
        },
        samples: samples.samples(),
      },
      rateLimits: { blocks: await rateLimitBlocks() },
      sliceCache: services.metrics ? await sliceCacheView(services.metrics.registry, sliceCacheBound(services)) : null,
      // The first page, as `GET /api/v1/admin/quotas` gives it (its `nextCursor` continues there):
      // each quota's usage is a query of its own, and the view asks every 2 seconds.
      ...(await quotaPage()),
    });
  });
}

/** The bound the answering process's slice cache holds against: a worker's share with several workers. */
function sliceCacheBound({ config, instance }: Services): number {
  const { maxBytes } = config.sliceCache;
  return instance ? workerShare(maxBytes, instance.workers) : maxBytes;
}
