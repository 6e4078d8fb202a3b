/**
 * The console's access view (principals with their keys and grants, repositories) and its changes,
 * which are the admin API's own handlers served under `/console/api/`.
 */
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { authAdminRoutes } from '../admin/auth-admin-routes.ts';
import { sendJson } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import type { HttpMethod } from '../server/route-table.ts';
import type { Services } from '../server/services.ts';
import { api } from './console-http.ts';

export function accessRoutes(services: Services): Route[] {
  const store = new AdminStore(services.pool);
  const adminRoutes = authAdminRoutes(services);
  /** The admin API's own handler for `method /api/v1/admin<path>`, served under /console/api. */
  const mirror = (method: HttpMethod, path: string): Route => {
    const source = adminRoutes.find((r) => r.methods.includes(method) && r.template === `/api/v1/admin${path}`);
    if (!source) throw new Error(`no admin route ${method} ${path}`);
    return api([method], path.slice(1), source.handle);
  };
  return [
    api(['GET'], 'access', async (ctx) => {
      const [principals, grants, repositories] = await Promise.all([
        store.listPrincipals(),
        store.listGrants(),
        store.listRepositories(),
      ]);
      const withKeys = await Promise.all(
        principals.map(async (p) => ({
          ...p,
          keys: await store.listKeys(p.id),
          grants: grants
            .filter((g) => g.principalId === p.id)
            .map((g) => ({ repository: g.repository, permission: g.permission })),
        })),
      );
      sendJson(ctx.res, 200, { principals: withKeys, repositories });
    }),
    mirror('POST', '/principals'),
    mirror('POST', '/principals/:principal/keys'),
    mirror('POST', '/keys/:keyId/revoke'),
    mirror('PUT', '/grants/:principal/:repository'),
  ];
}
