/**
 * Catalog routes: metadata (`GET …/artifacts/{id}` and the package/asset twins), `DELETE` (the
 * catalog entry only; bytes wait for offline gc) and `GET /api/v1/repositories`.
 */
import type { Permission } from '../../policy/auth/authorize.ts';
import { CURSORS, decodeCursor, pageLimit, pageOf } from '../../policy/auth/page.ts';
import type { Catalog } from '../../storage-adapter/catalog/catalog.ts';
import { StorageError } from '../../storage-adapter/errors.ts';
import { metadataOf } from './metadata.ts';
import { publicBase, type PublicBaseOptions } from '../server/public-base.ts';
import { CONTENT_TEMPLATES, keyFromParams } from './paths.ts';
import { sendJson } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import { header, readOnlyError, writePreconditions } from './content-routes.ts';
import { planMetadataResponse } from './response.ts';

/** As every JSON answer (sendJson): no cache keeps it; a client may still revalidate its own copy. */
const METADATA_CACHE_CONTROL = 'no-store';

export interface ArtifactDeps {
  readonly catalog: Catalog;
  readonly writable: boolean;
  /** Repositories the principal holds a grant on, and which one. */
  readableRepositories(principalId: string): Promise<string[]>;
  grant(principalId: string, repository: string): Promise<Permission | undefined>;
  /** Where clients reach the gateway: the path prefix of `contentUrl`; absent → none. */
  readonly base?: PublicBaseOptions | undefined;
}

export function artifactRoutes(deps: ArtifactDeps): Route[] {
  const routes: Route[] = [
    {
      methods: ['GET', 'HEAD'],
      template: '/api/v1/repositories',
      access: 'service',
      async handle({ res, principal, url }) {
        if (!principal) throw new Error('repository listing without a principal');
        const limit = pageLimit(url.searchParams.get('limit') ?? undefined);
        const after = decodeCursor(url.searchParams.get('cursor') ?? undefined, CURSORS.readableRepositories)?.[0];
        const canRead = principal.scopes.has('read') || principal.scopes.has('write');
        // The principal's grants are few and cached (policy/auth/authenticator.ts): paged here, by name.
        const names = (canRead ? await deps.readableRepositories(principal.id) : []).filter(
          (name) => after === undefined || name > after,
        );
        const repositories = [];
        for (const name of names.slice(0, limit + 1)) {
          const permission = await deps.grant(principal.id, name);
          if (permission) repositories.push({ name, permission });
        }
        const page = pageOf(repositories, limit, CURSORS.readableRepositories, (r) => [r.name]);
        sendJson(res, 200, { repositories: page.items, nextCursor: page.nextCursor });
      },
    },
  ];
  for (const kind of ['artifact', 'package', 'asset'] as const) {
    routes.push(
      {
        methods: ['GET', 'HEAD'],
        template: CONTENT_TEMPLATES[kind],
        access: 'read',
        async handle(ctx) {
          const entry = await deps.catalog.get(keyFromParams(kind, ctx.params));
          if (!entry) throw new StorageError('not_found', 'No such artifact.');
          const plan = planMetadataResponse(
            entry,
            {
              ifMatch: header(ctx, 'if-match'),
              ifUnmodifiedSince: header(ctx, 'if-unmodified-since'),
              ifNoneMatch: header(ctx, 'if-none-match'),
              ifModifiedSince: header(ctx, 'if-modified-since'),
            },
            // The clock Node dates the answer by (its Date header).
            Date.now(),
          );
          if (plan.status === 412)
            throw new StorageError('precondition_failed', undefined, { headers: { ...plan.headers } });
          if (plan.status === 304) {
            ctx.res.writeHead(304, { ...plan.headers, 'cache-control': METADATA_CACHE_CONTROL });
            ctx.res.end();
            return;
          }
          const prefix = deps.base ? publicBase(ctx.req, deps.base).prefix : '';
          sendJson(ctx.res, 200, metadataOf(entry, prefix), {
            ...plan.headers,
            'cache-control': METADATA_CACHE_CONTROL,
          });
        },
      },
      {
        methods: ['DELETE'],
        template: CONTENT_TEMPLATES[kind],
        access: 'write',
        audit: 'artifact.delete',
        async handle(ctx) {
          if (!deps.writable) throw readOnlyError();
          const removed = await deps.catalog.remove(keyFromParams(kind, ctx.params), writePreconditions(ctx));
          if (!removed) throw new StorageError('not_found', 'No such artifact.');
          ctx.res.writeHead(204);
          ctx.res.end();
        },
      },
    );
  }
  return routes;
}
