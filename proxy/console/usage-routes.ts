/**
 * The console's usage statistics view (docs/observability.md): the admin API's own handlers of
 * `/api/v1/admin/stats/…` served under `/console/api/stats/…`, so the page and the API answer alike.
 */
import type pg from 'pg';
import type { Route } from '../server/route-types.ts';
import { statsRoutes } from '../stats/stats-routes.ts';
import { api } from './console-http.ts';

export function usageRoutes(pool: pg.Pool): Route[] {
  return statsRoutes(pool).map((source) =>
    api(source.methods, source.template.replace('/api/v1/admin/stats/', 'stats/'), source.handle),
  );
}
