/**
 * `/api/v1/admin/rate-limits…` (admin scope): show the effective rules tier by tier (one page of
 * limiters at a time, like every listing), publish a
 * batch (limiter → rules) atomically into the published tier, and delete one published rule.
 * Publishing a bypass (`skip`) rule needs the publisher in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS.
 */
import { formatProblem, RateLimitError, type RuleRegistry } from '../../policy/rate-limit/index.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { Principal } from '../../policy/auth/principal.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import { sendJson } from '../server/http-errors.ts';
import { readJsonBody } from '../server/request-body.ts';
import { publishedRuleNames } from '../audit/admin-details.ts';
import { pageQuery } from './auth-admin-routes.ts';

const BASE = '/api/v1/admin/rate-limits';

/** Engine errors → policy codes the HTTP table knows. */
export function toPolicyError(err: unknown): unknown {
  if (!(err instanceof RateLimitError)) return err;
  switch (err.code) {
    case 'invalid_rules':
      return new PolicyError('invalid_request', `Invalid rules: ${err.problems.map(formatProblem).join('; ')}`, {
        cause: err,
      });
    case 'invalid_regex':
      return new PolicyError('invalid_request', `Invalid rules: ${err.message}`, { cause: err });
    case 'unknown_limiter':
    case 'unknown_rule':
      return new PolicyError('not_found', err.message, { cause: err });
    case 'bypass_not_allowed':
      return new PolicyError('forbidden', err.message, { cause: err });
    case 'rules_over_bounds':
      return new PolicyError('rules_too_large', `${err.message}: ${err.problems.map(formatProblem).join('; ')}`, {
        cause: err,
      });
    case 'store_unavailable':
      return new PolicyError(
        'unavailable',
        'The rate-limit rule store is unavailable; nothing was changed. Retry later.',
        { cause: err },
      );
    case 'store_timeout':
      // Writes stop at the timeout and only fail so when nothing was written (bounded-write.ts).
      return new PolicyError(
        'unavailable',
        'The rate-limit rule store did not answer in time; nothing was changed. Retry later.',
        { cause: err },
      );
    case 'store_outcome_unknown':
      return new PolicyError('rules_outcome_unknown', undefined, { cause: err });
  }
}

/**
 * A rule change the store may have made without saying so (`rules_outcome_unknown`: its COMMIT cut,
 * or no answer): recorded all the same, with `outcome: unknown`, so a change that did land is never
 * missing from the audit trail. Returns `err` for the route to throw.
 */
export function auditUnknownOutcome(ctx: RequestContext, err: unknown, details: Record<string, unknown> = {}): unknown {
  if ((err as { code?: unknown } | undefined)?.code === 'rules_outcome_unknown') {
    ctx.actionTaken = true;
    ctx.auditDetails = { outcome: 'unknown', ...details };
  }
  return err;
}

async function mapped<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw toPolicyError(err);
  }
}

/** Spec 2.1: only the named principals may publish bypass (`skip`) rules over HTTP. */
export function mayPublishBypass(principal: Principal | undefined, bypassPublishers: readonly string[]): boolean {
  return principal !== undefined && bypassPublishers.includes(principal.name);
}

export function rateLimitAdminRoutes(registry: RuleRegistry, bypassPublishers: readonly string[] = []): Route[] {
  return [
    {
      methods: ['GET'],
      template: BASE,
      access: 'admin',
      async handle({ res, url }) {
        const page = await mapped(() => registry.showPage(pageQuery(url)));
        sendJson(res, 200, { limiters: page.items, nextCursor: page.nextCursor });
      },
    },
    {
      methods: ['PUT'],
      template: BASE,
      access: 'admin',
      audit: 'rate_limit.publish',
      async handle(ctx) {
        const body = await readJsonBody(ctx.req, 1024 * 1024);
        const published = await mapped(() =>
          registry.publish(body, { allowSkip: mayPublishBypass(ctx.principal, bypassPublishers) }),
        ).catch((err: unknown) => {
          throw auditUnknownOutcome(ctx, err, { names: publishedRuleNames(body) });
        });
        ctx.auditDetails = { ...published, names: publishedRuleNames(body) };
        sendJson(ctx.res, 200, { published });
      },
    },
    {
      methods: ['GET'],
      template: `${BASE}/:limiter`,
      access: 'admin',
      async handle({ res, params }) {
        const [view] = await mapped(() => registry.show(params.limiter!));
        sendJson(res, 200, view);
      },
    },
    {
      methods: ['DELETE'],
      template: `${BASE}/:limiter/rules/:rule`,
      access: 'admin',
      audit: 'rate_limit.unpublish',
      async handle(ctx) {
        await mapped(() => registry.unpublish(ctx.params.limiter!, ctx.params.rule!)).catch((err: unknown) => {
          throw auditUnknownOutcome(ctx, err);
        });
        ctx.res.writeHead(204).end();
      },
    },
  ];
}
