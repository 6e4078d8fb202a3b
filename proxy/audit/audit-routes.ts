/**
 * `GET /api/v1/admin/audit` (admin scope, the writer): the audit trail newest first, one page at a
 * time, filtered by action (or its noun), principal (id or name) and time (`since` inclusive,
 * `until` exclusive).
 */
import type pg from 'pg';
import { sendJson } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import { parseAuditFilter } from './audit-event.ts';
import { listAudit } from './audit-log.ts';

export function auditRoutes(pool: pg.Pool): Route[] {
  return [
    {
      methods: ['GET'],
      template: '/api/v1/admin/audit',
      access: 'admin',
      async handle({ res, url }) {
        const q = (name: string) => url.searchParams.get(name) ?? undefined;
        const filter = parseAuditFilter({
          action: q('action'),
          principal: q('principal'),
          since: q('since'),
          until: q('until'),
          limit: q('limit'),
          cursor: q('cursor'),
        });
        const page = await listAudit(pool, filter);
        sendJson(res, 200, { events: page.items, nextCursor: page.nextCursor });
      },
    },
  ];
}
