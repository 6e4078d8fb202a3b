import { authorize } from '../policy/auth/authorize.ts';
import type { Authenticator } from '../policy/auth/authenticator.ts';
import { PolicyError } from '../policy/errors.ts';
import type { Gate, RequestContext } from './http-server.ts';
import type { Lifecycle } from './lifecycle.ts';

/**
 * The first gate: authenticates every non-public request, then checks the route's access level
 * against the key's scopes and the principal's grant on `:repo`. A fenced gateway refuses every
 * request subject to authorization with 503 `lease_lost`. `credentials` picks what is checked
 * (default the Authorization header; the console supplies its session's key for its own routes).
 */
export function createAuthGate(auth: Authenticator, lifecycle: Lifecycle, credentials: (ctx: RequestContext) => string | undefined = (ctx) => ctx.req.headers.authorization): Gate {
  return async (ctx) => {
    if (ctx.access === 'public') return;
    if (lifecycle.state === 'fenced') throw new PolicyError('lease_lost');
    const principal = await auth.authenticate(credentials(ctx));
    ctx.principal = principal;
    const needsGrant = ctx.access === 'read' || ctx.access === 'write';
    const repo = ctx.params.repo;
    if (needsGrant && repo === undefined) throw new Error(`route ${ctx.route} has access "${ctx.access}" but no :repo parameter`);
    const grant = needsGrant ? await auth.grant(principal.id, repo!) : undefined;
    const decision = authorize(ctx.access, principal.scopes, grant);
    if (!decision.allow) throw new PolicyError(decision.code);
  };
}
