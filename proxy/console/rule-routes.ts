/**
 * The console's rule editor: the effective rules of every limiter tier by tier (with shadowing
 * annotations), publish (through the registry's one validator; problems come back with their key
 * paths so the page shows each beside its field) and unpublish.
 */
import { PolicyError } from '../../policy/errors.ts';
import { formatPath, RateLimitError, type RuleRegistry } from '../../policy/rate-limit/index.ts';
import { auditUnknownOutcome, mayPublishBypass, toPolicyError } from '../admin/rate-limit-admin-routes.ts';
import { pageQuery } from '../admin/auth-admin-routes.ts';
import { loadRuleFiles } from '../gates/rate-limit-rule-files.ts';
import { sendJson } from '../server/http-errors.ts';
import type { Route } from '../server/route-types.ts';
import { readJsonBody } from '../server/request-body.ts';
import { publishedRuleNames } from '../audit/admin-details.ts';
import { api, audited } from './console-http.ts';
import { annotateTiers } from './shadowing.ts';

export async function ruleRoutes(registry: RuleRegistry, bypassPublishers: readonly string[]): Promise<Route[]> {
  // The shipped limiter list: descriptions and the properties a rule may use, for the editor.
  const { available } = await loadRuleFiles(undefined);
  return [
    api(['GET'], 'rate-limits', async (ctx) => {
      const page = await mapped(() => registry.showPage(pageQuery(ctx.url)));
      sendJson(ctx.res, 200, {
        nextCursor: page.nextCursor,
        limiters: page.items.map((v) => ({
          limiter: v.limiter,
          description: available.get(v.limiter)?.description ?? '',
          properties: available.get(v.limiter)?.available_properties ?? [],
          source: v.source,
          tiers: annotateTiers(v.tiers),
        })),
      });
    }),
    audited('rate_limit.publish', ['PUT'], 'rate-limits', async (ctx) => {
      const body = await readJsonBody(ctx.req, 1024 * 1024);
      try {
        const published = await registry.publish(body, {
          allowSkip: mayPublishBypass(ctx.principal, bypassPublishers),
        });
        ctx.auditDetails = { ...published, names: publishedRuleNames(body) };
        sendJson(ctx.res, 200, { published });
      } catch (err) {
        if (err instanceof RateLimitError && err.code === 'invalid_rules') {
          const problems = err.problems.map((p) => ({
            path: p.path,
            where: formatPath(p.path),
            message: p.message,
            ...(p.rule ? { rule: p.rule } : {}),
          }));
          throw new PolicyError('invalid_request', `Invalid rules: ${problems.length} problem(s).`, {
            cause: err,
            details: { problems },
          });
        }
        throw auditUnknownOutcome(ctx, toPolicyError(err), { names: publishedRuleNames(body) });
      }
    }),
    audited('rate_limit.unpublish', ['DELETE'], 'rate-limits/:limiter/rules/:rule', async (ctx) => {
      await mapped(() => registry.unpublish(ctx.params.limiter!, ctx.params.rule!)).catch((err: unknown) => {
        throw auditUnknownOutcome(ctx, err);
      });
      ctx.res.writeHead(204, { 'cache-control': 'no-store' }).end();
    }),
  ];
}

async function mapped<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw toPolicyError(err);
  }
}
