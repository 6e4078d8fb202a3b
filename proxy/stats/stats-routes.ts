/**
 * `/api/v1/admin/stats/…` (admin scope, the writer): usage statistics summed over every gateway,
 * as of their last flush: the most downloaded artifacts, the published ones not downloaded for N
 * days, and requests and bytes per principal and day; each paged by `?limit=&cursor=` (`nextCursor`):
 * a `limit` of at most 1000 with no cursor left every row past the first 1000 out of reach.
 */
import type pg from 'pg';
import { sendJson } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import { parseArtifactStatsQuery, parsePrincipalStatsQuery } from './stats-query.ts';
import { mostDownloaded, notDownloadedFor, principalDays } from './usage-store.ts';

export function statsRoutes(pool: pg.Pool): Route[] {
  return [
    {
      methods: ['GET'],
      template: '/api/v1/admin/stats/artifacts',
      access: 'admin',
      async handle({ res, url }) {
        const q = (name: string) => url.searchParams.get(name) ?? undefined;
        const query = parseArtifactStatsQuery({
          view: q('view'),
          days: q('days'),
          repository: q('repository'),
          limit: q('limit'),
        });
        const paged = { ...query, cursor: q('cursor') };
        const page = query.view === 'top' ? await mostDownloaded(pool, paged) : await notDownloadedFor(pool, paged);
        sendJson(res, 200, {
          view: query.view,
          ...(query.view === 'idle' ? { days: query.days } : {}),
          artifacts: page.items,
          nextCursor: page.nextCursor,
        });
      },
    },
    {
      methods: ['GET'],
      template: '/api/v1/admin/stats/principals',
      access: 'admin',
      async handle({ res, url }) {
        const q = (name: string) => url.searchParams.get(name) ?? undefined;
        const query = parsePrincipalStatsQuery({
          principal: q('principal'),
          since: q('since'),
          until: q('until'),
          limit: q('limit'),
        });
        const page = await principalDays(pool, { ...query, cursor: q('cursor') });
        sendJson(res, 200, { days: page.items, nextCursor: page.nextCursor });
      },
    },
  ];
}
