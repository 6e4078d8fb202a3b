/**
 * `/api/v1/admin/quotas…` (admin scope, writer): storage quotas per repository and per principal,
 * with their usage (docs/storage-quotas.md). A principal is named by name or id; its quota is kept
 * under its id. A change is audited as `arkvory quota` records it: the scope and the subject's id
 * (the route's parameter alone names neither the scope nor which principal a name meant).
 */
import { quoted } from '../../lib/quoted.ts';
import { noSuchPrincipal } from '../../policy/auth/admin-store.ts';
import type { QuotaScope } from '../../policy/quota/quota-check.ts';
import type { QuotaUsage, StorageQuotas } from '../../policy/quota/storage-quotas.ts';
import { GatewayError } from '../server/errors.ts';
import { sendJson } from '../server/http-errors.ts';
import { pageQuery } from './auth-admin-routes.ts';
import { readJsonBody } from '../server/request-body.ts';
import type { RequestContext, Route } from '../server/route-types.ts';

const BASE = '/api/v1/admin/quotas';
/** The path segment of each scope. */
const SEGMENT: Record<QuotaScope, string> = { repository: 'repositories', principal: 'principals' };

/** The wire form (snake_case, as every admin body). */
export function quotaBody(usage: QuotaUsage): Record<string, unknown> {
  return {
    scope: usage.scope,
    subject: usage.subject,
    limitBytes: usage.limitBytes,
    storedBytes: usage.storedBytes,
    reservedBytes: usage.reservedBytes,
    usageBytes: usage.storedBytes + usage.reservedBytes,
    remainingBytes: usage.remainingBytes,
  };
}

/** The largest limit: bigint column, but JSON numbers are exact only to 2^53 − 1. */
const MAX_LIMIT_BYTES = Number.MAX_SAFE_INTEGER;

function limitOf(body: Record<string, unknown>): number {
  const limit = body.limitBytes;
  if (Object.keys(body).some((k) => k !== 'limitBytes') || typeof limit !== 'number')
    throw new GatewayError('invalid_request', 'Send {"limitBytes": <integer ≥ 0>}.');
  if (!Number.isSafeInteger(limit) || limit < 0)
    throw new GatewayError('invalid_request', `limitBytes must be an integer from 0 to ${MAX_LIMIT_BYTES}.`);
  return limit;
}

export function quotaAdminRoutes(quotas: StorageQuotas): Route[] {
  const subject = async (scope: QuotaScope, ctx: RequestContext): Promise<string> => {
    const named = ctx.params.subject!;
    const found = await quotas.subjectOf(scope, named);
    if (found === undefined) {
      // A key pasted where a principal belongs is not quoted back (into the answer and the log).
      if (scope !== 'repository') throw noSuchPrincipal(named);
      throw new GatewayError('invalid_request', `${quoted(named)} is not a repository name.`);
    }
    return found;
  };
  /** The subject's usage; 404 for a repository that does not exist (a typo), as `PUT` refuses it. */
  const usage = async (scope: QuotaScope, id: string, ctx: RequestContext): Promise<QuotaUsage> => {
    const shown = await quotas.show(scope, id);
    if (shown === undefined) throw new GatewayError('not_found', `No ${scope} ${ctx.params.subject}.`);
    return shown;
  };
  const routes: Route[] = [
    {
      methods: ['GET'],
      template: BASE,
      access: 'admin',
      async handle({ res, url }) {
        const page = await quotas.listPage(pageQuery(url));
        sendJson(res, 200, { quotas: page.items.map(quotaBody), nextCursor: page.nextCursor });
      },
    },
  ];
  for (const scope of ['repository', 'principal'] as const) {
    const template = `${BASE}/${SEGMENT[scope]}/:subject`;
    routes.push(
      {
        methods: ['GET'],
        template,
        access: 'admin',
        async handle(ctx) {
          sendJson(ctx.res, 200, quotaBody(await usage(scope, await subject(scope, ctx), ctx)));
        },
      },
      {
        methods: ['PUT'],
        template,
        access: 'admin',
        audit: 'quota.set',
        async handle(ctx) {
          const limitBytes = limitOf(await readJsonBody(ctx.req, 4096));
          const id = await subject(scope, ctx);
          if (!(await quotas.set(scope, id, limitBytes)))
            throw new GatewayError('not_found', `No ${scope} ${ctx.params.subject}.`);
          ctx.auditTarget = { scope, subject: id };
          ctx.auditDetails = { limitBytes };
          // Set: the usage read for the answer may still fail, and the change stands.
          ctx.actionTaken = true;
          sendJson(ctx.res, 200, quotaBody(await usage(scope, id, ctx)));
        },
      },
      {
        methods: ['DELETE'],
        template,
        access: 'admin',
        audit: 'quota.remove',
        async handle(ctx) {
          const id = await subject(scope, ctx);
          if (!(await quotas.remove(scope, id)))
            throw new GatewayError('not_found', `No ${scope} quota is set for ${ctx.params.subject}.`);
          ctx.auditTarget = { scope, subject: id };
          ctx.res.writeHead(204).end();
        },
      },
    );
  }
  return routes;
}
