/**
 * `/api/v1/admin/cache…` (admin scope): this gateway's slice cache counters, and purging blobs
 * from every gateway's slice cache. A purge is a row in `arkvory_cache_purges` whose insert bumps
 * the catalog epoch: each gateway removes the named blobs' slices within the catalog cache's bound
 * (this one at once). Purging never touches the store: the next read fetches and verifies again.
 */
import type pg from 'pg';
import type { Catalog } from '../../storage-adapter/catalog/catalog.ts';
import { requestCachePurge } from '../../storage-adapter/catalog/slice-rows.ts';
import { isSha256Hex } from '../../storage-adapter/paths.ts';
import type { SliceCache } from '../../storage-adapter/slice-cache/index.ts';
import { GatewayError } from '../server/errors.ts';
import { sendJson } from '../server/http-errors.ts';
import { readJsonBody } from '../server/request-body.ts';
import type { Route } from '../server/route-types.ts';

const BASE = '/api/v1/admin/cache';

export interface CacheAdminDeps {
  readonly pool: pg.Pool;
  readonly catalog: Catalog;
  readonly sliceCache: () => SliceCache | undefined;
}

/** The blobs a purge body names: `{"sha256": "<hex>"}` or `{"repository": "r", "artifact": "id"}`. */
async function blobsNamed(deps: CacheAdminDeps, body: unknown): Promise<string[]> {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  if (typeof b.sha256 === 'string' && Object.keys(b).length === 1) {
    if (!isSha256Hex(b.sha256)) throw new GatewayError('invalid_request', '"sha256" must be 64 lowercase hex digits.');
    return [b.sha256];
  }
  if (typeof b.repository === 'string' && typeof b.artifact === 'string' && Object.keys(b).length === 2) {
    const entry = await deps.catalog.get({
      repository: b.repository,
      kind: 'artifact',
      name: b.artifact,
      version: '',
      asset: '',
    });
    if (!entry) throw new GatewayError('not_found', `No artifact ${b.artifact} in repository ${b.repository}.`);
    return [entry.sha256];
  }
  throw new GatewayError(
    'invalid_request',
    'Name what to purge: {"sha256": "<hex>"} or {"repository": "<repo>", "artifact": "<id>"}.',
  );
}

export function cacheAdminRoutes(deps: CacheAdminDeps): Route[] {
  return [
    {
      methods: ['GET'],
      template: BASE,
      access: 'admin',
      async handle({ res }) {
        const cache = deps.sliceCache();
        sendJson(res, 200, cache ? { enabled: true, dir: cache.dir, ...cache.stats } : { enabled: false });
      },
    },
    {
      methods: ['POST'],
      template: `${BASE}/purge`,
      access: 'admin',
      audit: 'cache.purge',
      async handle(ctx) {
        const { req, res } = ctx;
        const body = await readJsonBody(req, 64 * 1024);
        const blobs = await blobsNamed(deps, body);
        ctx.auditDetails = { ...body, purged: blobs };
        await requestCachePurge(deps.pool, blobs);
        const removedHere = (await deps.sliceCache()?.removeBlobs(blobs)) ?? 0;
        sendJson(res, 200, { purged: blobs, removedHere });
      },
    },
  ];
}
