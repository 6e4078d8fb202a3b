/**
 * Console sessions: sign in with an admin key (in the Authorization header, never a URL or form),
 * resume after a reload, sign out. The session cookie is HttpOnly, SameSite=Strict; over https it is
 * `__Host-arkvory_console` (Secure, Path=/), over plain HTTP `arkvory_console` (Path=/console).
 */
import type { Principal } from '../../policy/auth/principal.ts';
import type { AuditAction } from '../audit/audit-event.ts';
import { PolicyError } from '../../policy/errors.ts';
import { sendJson } from '../server/http-errors.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import { audited, isHttps, page } from './console-http.ts';
import type { TrustedProxies } from '../router/forwarded.ts';
import { publicBase } from '../server/public-base.ts';
import {
  clearedSessionCookie,
  type ConsoleSession,
  disabledSince,
  isSessionId,
  readSessionId,
  type SessionStore,
  sessionCookie,
} from './sessions.ts';

export function sessionRoutes(deps: {
  sessions: SessionStore;
  /** The session a `/console/api/` request was authenticated with. */
  sessionOf(ctx: RequestContext): ConsoleSession | undefined;
  /** The auth gate's own check (the session's key is verified again on resume). */
  authenticate(authorization: string): Promise<Principal>;
  /** ARKVORY_TRUSTED_PROXIES: only they say the browser's scheme (its cookie's name and `Secure`). */
  trusted: TrustedProxies;
  /** ARKVORY_PUBLIC_URL: its path prefix, else a trusted proxy's, is the plain-HTTP cookie's path. */
  publicUrl?: string | undefined;
}): Route[] {
  const { sessions } = deps;
  const prefixOf = (ctx: RequestContext) => publicBase(ctx.req, deps).prefix;
  const sessionBody = (session: ConsoleSession) => ({
    principal: { id: session.principalId, name: session.principalName },
    csrfToken: session.csrfToken,
    expiresInSeconds: session.expiresInSeconds,
  });
  return [
    // Sign-in: the key comes in the Authorization header (the auth gate checks it and the admin
    // scope), never in a URL or a form field that could be logged or cached.
    // A sign-in the auth gate refused (a bad key, one without the admin scope) is recorded too, as
    // `console.sign_in_failed`: an operator looks for these in the trail (bounded per address).
    withRefusalAudit(
      'console.sign_in_failed',
      audited('console.sign_in', ['POST'], '/console/session', async (ctx) => {
        const { principal } = ctx;
        const authorization = ctx.req.headers.authorization;
        if (!principal || !authorization) throw new PolicyError('unauthorized');
        // The session this browser held is ended, not only replaced in its cookie jar: a copy of its
        // id (taken in clear, or left on a shared machine) must not outlive the sign-in that follows.
        const previous = readSessionId(ctx.req.headers.cookie, isHttps(ctx.req, deps.trusted));
        if (isSessionId(previous)) await sessions.delete(previous);
        const session = await sessions.create(principal, authorization);
        ctx.log.info({ principal: principal.id, code: 'console_sign_in' }, 'console session opened');
        sendJson(
          ctx.res,
          201,
          { signedIn: true, ...sessionBody(session) },
          { 'set-cookie': sessionCookie(session.id, isHttps(ctx.req, deps.trusted), prefixOf(ctx)) },
        );
      }),
    ),
    // Resume after a reload: the page cannot read its HttpOnly cookie, so it asks. Public, so a
    // page opened before sign-in is not counted as a failed authentication.
    page(['GET'], '/console/session', async (ctx) => {
      const session = await sessions.get(readSessionId(ctx.req.headers.cookie, isHttps(ctx.req, deps.trusted)));
      let live = session !== undefined;
      if (session) {
        try {
          const principal = await deps.authenticate(session.authorization);
          // Disabled (and enabled again) since it was opened: the session stays void (docs/auth.md).
          if (disabledSince(session, principal.disabledAtMs)) throw new PolicyError('unauthorized');
          // A page load is an operator's: it restarts the idle clock (the page's polls do not).
          if (isOwnPageLoad(ctx)) await sessions.touch(session.id);
        } catch (err) {
          if ((err as { code?: unknown }).code !== 'unauthorized') throw err;
          await sessions.delete(session.id);
          live = false;
        }
      }
      sendJson(ctx.res, 200, live && session ? { signedIn: true, ...sessionBody(session) } : { signedIn: false });
    }),
    audited('console.sign_out', ['DELETE'], 'session', async (ctx) => {
      await sessions.delete(deps.sessionOf(ctx)!.id);
      ctx.res
        .writeHead(204, {
          'set-cookie': clearedSessionCookie(isHttps(ctx.req, deps.trusted), prefixOf(ctx)),
          'cache-control': 'no-store',
        })
        .end();
    }),
  ];
}

/**
 * Whether a resume is the console page's own (its `fetch` is same-origin) or a client outside
 * browsers (no Fetch Metadata). A page of another origin on the same site gets the SameSite=Strict
 * cookie sent along when it loads `/console/session` as an image or a frame; it cannot read the
 * answer, but counting its loads as page loads let it hold an unattended console open for the whole
 * absolute lifetime.
 */
function isOwnPageLoad(ctx: RequestContext): boolean {
  const site = ctx.req.headers['sec-fetch-site'];
  return site === undefined || site === 'same-origin';
}

/** `route`, with the attempts the gates refuse recorded in the audit trail as `action` (`Route.auditRefusal`). */
function withRefusalAudit(action: AuditAction, route: Route): Route {
  return { ...route, auditRefusal: action };
}
