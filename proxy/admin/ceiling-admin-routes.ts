/**
 * `/api/v1/admin/groups…` and `/api/v1/admin/repositories/{repository}/ceilings` (admin scope,
 * writer): groups of principals and the bandwidth ceilings of groups and repositories, the same
 * store the CLI's `arkvory groups` and `arkvory repos ceiling` use (docs/bandwidth-and-admission.md,
 * "Group and repository ceilings"). Gateways apply a change within 2 seconds.
 */
import { quoted } from '../../lib/quoted.ts';
import { AdminStore, type GroupRow } from '../../policy/auth/admin-store.ts';
import { groupDetails } from '../audit/admin-details.ts';
import { GatewayError } from '../server/errors.ts';
import { pageQuery } from './auth-admin-routes.ts';
import { sendJson } from '../server/http-errors.ts';
import { readJsonBody } from '../server/request-body.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import type { Services } from '../server/services.ts';

const BASE = '/api/v1/admin';
const GROUP_FIELDS = ['downloadBytesPerSec', 'uploadBytesPerSec'] as const;
const REPOSITORY_FIELDS = [...GROUP_FIELDS, 'maxTransfers'] as const;

/**
 * The fields of a ceilings body; a field left out keeps its value. The store checks the ranges; here
 * only that nothing else was sent and that each value is a number (a string would not reach its check).
 */
function ceilingsOf<F extends string>(body: Record<string, unknown>, fields: readonly F[]): Partial<Record<F, number>> {
  const out: Partial<Record<F, number>> = {};
  for (const [name, value] of Object.entries(body)) {
    if (!(fields as readonly string[]).includes(name))
      throw new GatewayError('invalid_request', `Unknown field ${quoted(name)}: send any of ${fields.join(', ')}.`);
    if (typeof value !== 'number') throw new GatewayError('invalid_request', `${name} must be a whole number.`);
    out[name as F] = value;
  }
  return out;
}

export function ceilingAdminRoutes(services: Services): Route[] {
  const store = new AdminStore(services.pool);
  /** Answers the group and records its ceilings and (first) members with the route's audit action. */
  const group = (ctx: RequestContext, row: GroupRow) => {
    ctx.auditDetails = groupDetails(row);
    sendJson(ctx.res, 200, row);
  };
  /**
   * Marks the action taken once the store made the change (before it reads the group back): a read
   * that fails then still records it, with what was asked as its details when the group is unread.
   */
  const taken =
    (ctx: RequestContext, asked: Record<string, unknown> = {}) =>
    () => {
      ctx.actionTaken = true;
      ctx.auditDetails = asked;
    };
  return [
    {
      methods: ['GET'],
      template: `${BASE}/groups`,
      access: 'admin',
      async handle({ res, url }) {
        const page = await store.listGroupsPage(pageQuery(url));
        sendJson(res, 200, { groups: page.items, nextCursor: page.nextCursor });
      },
    },
    {
      methods: ['GET'],
      template: `${BASE}/groups/:group`,
      access: 'admin',
      async handle({ res, params }) {
        sendJson(res, 200, await store.findGroup(params.group!));
      },
    },
    {
      methods: ['GET'],
      template: `${BASE}/groups/:group/members`,
      access: 'admin',
      async handle({ res, params, url }) {
        const page = await store.listGroupMembers(params.group!, pageQuery(url));
        sendJson(res, 200, { members: page.items, nextCursor: page.nextCursor });
      },
    },
    {
      methods: ['PUT'],
      template: `${BASE}/groups/:group`,
      access: 'admin',
      audit: 'group.set',
      async handle(ctx) {
        const ceilings = ceilingsOf(await readJsonBody(ctx.req, 4096), GROUP_FIELDS);
        group(ctx, await store.setGroup(ctx.params.group!, ceilings, taken(ctx, { ...ceilings })));
      },
    },
    {
      methods: ['DELETE'],
      template: `${BASE}/groups/:group`,
      access: 'admin',
      audit: 'group.delete',
      async handle(ctx) {
        await store.deleteGroup(ctx.params.group!);
        ctx.res.writeHead(204).end();
      },
    },
    {
      methods: ['PUT'],
      template: `${BASE}/groups/:group/members/:principal`,
      access: 'admin',
      audit: 'group.add_member',
      async handle(ctx) {
        group(ctx, await store.addGroupMember(ctx.params.group!, ctx.params.principal!, taken(ctx)));
      },
    },
    {
      methods: ['DELETE'],
      template: `${BASE}/groups/:group/members/:principal`,
      access: 'admin',
      audit: 'group.remove_member',
      async handle(ctx) {
        group(ctx, await store.removeGroupMember(ctx.params.group!, ctx.params.principal!, taken(ctx)));
      },
    },
    {
      methods: ['GET'],
      template: `${BASE}/repository-ceilings`,
      access: 'admin',
      async handle({ res, url }) {
        const page = await store.listRepositoryCeilingsPage(pageQuery(url));
        sendJson(res, 200, { repositories: page.items, nextCursor: page.nextCursor });
      },
    },
    {
      methods: ['GET'],
      template: `${BASE}/repositories/:repository/ceilings`,
      access: 'admin',
      async handle({ res, params }) {
        sendJson(res, 200, await store.findRepositoryCeilings(params.repository!));
      },
    },
    {
      methods: ['PUT'],
      template: `${BASE}/repositories/:repository/ceilings`,
      access: 'admin',
      audit: 'repository.ceiling',
      async handle(ctx) {
        const ceilings = ceilingsOf(await readJsonBody(ctx.req, 4096), REPOSITORY_FIELDS);
        const row = await store.setRepositoryCeilings(ctx.params.repository!, ceilings);
        ctx.auditDetails = { ...row };
        sendJson(ctx.res, 200, row);
      },
    },
  ];
}
