/**
 * The console's access view (a page of principals with their first keys and grants, the first
 * repositories, and the listings that continue them), its
 * ceilings view (a page of groups with their first members, a page of repository ceilings, and the
 * listings that continue them) and their changes, which are the admin API's own handlers served
 * under `/console/api/`.
 */
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { authAdminRoutes, pageQuery } from '../admin/auth-admin-routes.ts';
import { ceilingAdminRoutes } from '../admin/ceiling-admin-routes.ts';
import { sendJson } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import type { HttpMethod } from '../server/route-table.ts';
import type { Services } from '../server/services.ts';
import { api } from './console-http.ts';

export function accessRoutes(services: Services): Route[] {
  const store = new AdminStore(services.pool);
  const adminRoutes = [...authAdminRoutes(services), ...ceilingAdminRoutes(services)];
  /** The admin API's own handler for `method /api/v1/admin<path>`, served under /console/api. */
  const mirror = (method: HttpMethod, path: string): Route => {
    const source = adminRoutes.find((r) => r.methods.includes(method) && r.template === `/api/v1/admin${path}`);
    if (!source) throw new Error(`no admin route ${method} ${path}`);
    return { ...api([method], path.slice(1), source.handle), audit: source.audit ?? null };
  };
  return [
    // One statement for the whole page (policy/auth/admin-store.ts `accessView`), whatever its size;
    // each principal's keys and grants and the repositories are bounded, with where each continues.
    // The repositories come with the first page only: a page past it ("more principals") is principals.
    api(['GET'], 'access', async (ctx) => {
      const view = await store.accessView(pageQuery(ctx.url));
      sendJson(ctx.res, 200, {
        principals: view.principals.items,
        nextCursor: view.principals.nextCursor,
        ...(view.repositories
          ? { repositories: view.repositories.items, repositoriesNextCursor: view.repositories.nextCursor }
          : {}),
      });
    }),
    mirror('GET', '/principals/:principal/keys'),
    mirror('GET', '/grants'),
    mirror('GET', '/repositories'),
    mirror('POST', '/principals'),
    mirror('POST', '/principals/:principal/keys'),
    mirror('PUT', '/principals/:principal/bandwidth-weight'),
    mirror('POST', '/keys/:keyId/revoke'),
    mirror('PUT', '/grants/:principal/:repository'),
    // The first page of each listing, and where each continues (the routes below): the view listed
    // every group with every member, and every repository with a ceiling, in one answer.
    api(['GET'], 'ceilings', async (ctx) => {
      const [groups, repositories] = await Promise.all([store.listGroupsPage(), store.listRepositoryCeilingsPage()]);
      sendJson(ctx.res, 200, {
        groups: groups.items,
        groupsNextCursor: groups.nextCursor,
        repositories: repositories.items,
        repositoriesNextCursor: repositories.nextCursor,
      });
    }),
    mirror('GET', '/groups'),
    mirror('GET', '/groups/:group/members'),
    mirror('GET', '/repository-ceilings'),
    mirror('PUT', '/groups/:group'),
    mirror('DELETE', '/groups/:group'),
    mirror('PUT', '/groups/:group/members/:principal'),
    mirror('DELETE', '/groups/:group/members/:principal'),
    mirror('PUT', '/repositories/:repository/ceilings'),
  ];
}
