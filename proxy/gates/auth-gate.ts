import { authorize } from '../../policy/auth/authorize.ts';
import { unauthorized, type Authenticator } from '../../policy/auth/authenticator.ts';
import { hasPresignParams } from '../../policy/auth/presign-signature.ts';
import type { PresignedLinks } from '../../policy/auth/presigned-links.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { Permission } from '../../policy/auth/authorize.ts';
import type { Principal } from '../../policy/auth/principal.ts';
import { isPromise } from '../../lib/maybe-promise.ts';
import type { Gate, RequestContext } from '../server/route-types.ts';
import type { Lifecycle } from '../server/lifecycle.ts';

/**
 * Credentials that were issued at a known time (a console session): void when the principal was
 * disabled after `issuedAtWallMs`, even once it is enabled again.
 */
export interface IssuedCredentials {
  readonly authorization: string;
  readonly issuedAtWallMs: number;
}

/**
 * The first gate: authenticates every non-public request, then checks the route's access level
 * against the key's scopes and the principal's grant on `:repo`. A fenced gateway refuses every
 * request subject to authorization with 503 `lease_lost`. `credentials` picks what is checked
 * (default the Authorization header; the console supplies its session's key for its own routes).
 * A request with no Authorization header but a pre-signed link's query parameters is the link's
 * principal (`links`), still subject to the grant and scope checks of its key.
 */
export function createAuthGate(
  auth: Authenticator,
  lifecycle: Lifecycle,
  credentials: (ctx: RequestContext) => string | IssuedCredentials | undefined = (ctx) => ctx.req.headers.authorization,
  links?: PresignedLinks,
): Gate {
  return (ctx) => {
    if (ctx.access === 'public') return;
    if (lifecycle.state === 'fenced') throw new PolicyError('lease_lost');
    if (links && ctx.req.headers.authorization === undefined && hasPresignParams(ctx.url.searchParams))
      return presignedPrincipal(links, ctx).then(({ principal, sha256 }) => {
        ctx.linkSha256 = sha256;
        return admit(auth, ctx, principal);
      });
    const given = credentials(ctx);
    if (typeof given !== 'object') {
      const principal = auth.authenticateNow(given);
      return isPromise(principal) ? principal.then((p) => admit(auth, ctx, p)) : admit(auth, ctx, principal);
    }
    const issuedAt = given.issuedAtWallMs;
    const checked = (p: Principal) => {
      // Re-enabling a principal restores its keys, not sessions opened before it was disabled.
      if (p.disabledAtMs !== undefined && issuedAt < p.disabledAtMs) throw unauthorized();
      return admit(auth, ctx, p);
    };
    const principal = auth.authenticateNow(given.authorization);
    return isPromise(principal) ? principal.then(checked) : checked(principal);
  };
}

/** The route's access level against the principal's scopes and its grant on `:repo` (cached: at once). */
function admit(auth: Authenticator, ctx: RequestContext, principal: Principal): undefined | Promise<void> {
  ctx.principal = principal;
  const needsGrant = ctx.access === 'read' || ctx.access === 'write';
  if (!needsGrant) return decide(ctx, principal, undefined);
  const repo = ctx.params.repo;
  if (repo === undefined) throw new Error(`route ${ctx.route} has access "${ctx.access}" but no :repo parameter`);
  const grant = auth.grantNow(principal.id, repo);
  return isPromise(grant) ? grant.then((g) => decide(ctx, principal, g)) : decide(ctx, principal, grant);
}

function decide(ctx: RequestContext, principal: Principal, grant: Permission | undefined): undefined {
  const decision = authorize(ctx.access, principal.scopes, grant);
  if (!decision.allow) throw new PolicyError(decision.code);
  return undefined;
}

/** A pre-signed link opens GET/HEAD of one content route only; anything else with its parameters is a 401. */
function presignedPrincipal(links: PresignedLinks, ctx: RequestContext) {
  const method = ctx.req.method;
  if ((method !== 'GET' && method !== 'HEAD') || ctx.access !== 'read' || !ctx.route.endsWith('/content'))
    return Promise.reject(unauthorized());
  return links.authenticate(ctx.url.pathname, ctx.url.searchParams);
}
