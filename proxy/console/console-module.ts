/**
 * The operator console (writer only): static page and assets under `/console/`, sign-in with an
 * admin key into a session of the instance (sessions.ts) (HttpOnly, SameSite=Strict cookie; `__Host-`, Path=/ over https), and the
 * JSON the page polls under `/console/api/…`. Every `/console/api/` request is authenticated again
 * with the session's key by the ordinary auth gate (see `credentials`), so scopes, revocation and
 * the rate limiters apply exactly as on the admin API; every state change also needs the session's
 * CSRF token in `X-CSRF-Token`. Changes go through the same code as `/api/v1/admin/…`: the admin
 * store's handlers and the rule registry's publish/unpublish with the one rule schema.
 */
import type { Principal } from '../../policy/auth/principal.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { RuleRegistry } from '../../policy/rate-limit/index.ts';
import { GatewayError } from '../server/errors.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import type { IssuedCredentials } from '../gates/auth-gate.ts';
import type { Services } from '../server/services.ts';
import { accessRoutes } from './access-routes.ts';
import { assetRoutes } from './asset-routes.ts';
import { API_PREFIX, isHttps } from './console-http.ts';
import { RateSamples } from './rate-samples.ts';
import { ruleRoutes } from './rule-routes.ts';
import { sessionRoutes } from './session-routes.ts';
import {
  type ConsoleSession,
  ConsoleSessions,
  CSRF_HEADER,
  consoleSessionOptions,
  csrfMatches,
  localSessionStore,
  readSessionId,
} from './sessions.ts';
import { statusRoute } from './status-route.ts';
import { usageRoutes } from './usage-routes.ts';
import { remoteSessionStore } from '../workers/remote-sessions.ts';
import { createTrustedProxies } from '../router/forwarded.ts';

/** Five minutes of one-second samples for the bandwidth chart. */
export const SAMPLE_SECONDS = 300;

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export interface ConsoleModule {
  /**
   * The credentials the auth gate checks: for `/console/api/…` the key of the request's session
   * (no session → 401, a state change without its CSRF token → 403; a request with the token counts
   * as an operator's action), else the Authorization header.
   */
  credentials(ctx: RequestContext): string | IssuedCredentials | undefined | Promise<IssuedCredentials>;
  /** The routes; the rule registry exists only once rate limiting is open. No side effect. */
  routes(deps: { registry: RuleRegistry }): Promise<Route[]>;
  /** Starts the one-second bandwidth sampler (stopped on close). */
  start(): void;
}

/** `authenticate` is the auth gate's own check (the session's key is verified again on resume). */
export function createConsole(
  services: Services,
  deps: { authenticate(authorization: string): Promise<Principal> },
): ConsoleModule {
  const { clock, transfers, config } = services;
  // The instance's sessions: a worker's are the coordinating process's, over its link.
  const sessions = services.instance
    ? remoteSessionStore(services.instance.link)
    : localSessionStore(new ConsoleSessions(consoleSessionOptions(clock, config.consoleIdleTimeoutMs)));
  const trusted = createTrustedProxies(config.trustedProxies);
  const sessionOf = new WeakMap<RequestContext, ConsoleSession>();
  const samples = new RateSamples(SAMPLE_SECONDS);
  const sample = () => {
    samples.record({
      monotonicMs: clock.monotonicMs(),
      wallMs: clock.wallMs(),
      totals: {
        download: transfers.governors.download.snapshot().grantedBytes,
        upload: transfers.governors.upload.snapshot().grantedBytes,
      },
    });
  };

  const sessionCredentials = async (ctx: RequestContext): Promise<IssuedCredentials> => {
    const session = await sessions.get(readSessionId(ctx.req.headers.cookie, isHttps(ctx.req, trusted)));
    if (!session)
      throw new PolicyError('unauthorized', 'No console session (signed out or expired); sign in with an admin key.', {
        headers: { 'www-authenticate': 'Bearer realm="arkvory"' },
      });
    const withToken = csrfMatches(session, ctx.req.headers[CSRF_HEADER]);
    if (!SAFE_METHODS.has(ctx.req.method ?? 'GET') && !withToken)
      throw new PolicyError('forbidden', 'A console change needs the X-CSRF-Token header of its session.');
    // An operator's action restarts the idle clock, a poll does not: the page sends the token only on
    // changes and on reads an operator asked for, never on its timers. A request without it (or with
    // a wrong one) reads but keeps nothing alive, so neither a forgotten timer nor a copy of the
    // cookie alone holds a session open past its idle bound.
    if (withToken) await sessions.touch(session.id);
    sessionOf.set(ctx, session);
    return { authorization: session.authorization, principalDisabledAtMs: session.principalDisabledAtMs };
  };

  return {
    credentials(ctx) {
      if (!ctx.route.startsWith(API_PREFIX)) return ctx.req.headers.authorization;
      return sessionCredentials(ctx);
    },
    start() {
      sample();
      const timer = setInterval(sample, 1000);
      timer.unref();
      services.onClose.push(() => clearInterval(timer));
    },
    async routes({ registry }) {
      return [
        ...(await assetRoutes({ trusted, publicUrl: config.publicUrl })),
        ...sessionRoutes({
          sessions,
          sessionOf: (ctx) => sessionOf.get(ctx),
          authenticate: deps.authenticate,
          trusted,
          publicUrl: config.publicUrl,
        }),
        statusRoute(services, samples),
        ...(await ruleRoutes(registry, config.rateLimitBypassPublishers)),
        ...accessRoutes(services),
        ...usageRoutes(services.pool),
      ];
    },
  };
}

/**
 * A reader serves no console (it lives on the writer, and the router sends `/console/` there):
 * `/console/` answers 404 saying where to go instead of a bare "no such route".
 */
export function readerConsoleRoutes(): Route[] {
  const pointer: Route['handle'] = async () => {
    throw new GatewayError(
      'not_found',
      'The console runs on the writer (slot 0, ARKVORY_ROLE=api); open /console/ through the router or on the writer.',
    );
  };
  return [
    { methods: ['GET', 'HEAD'], template: '/console', access: 'public', handle: pointer },
    { methods: ['GET', 'HEAD'], template: '/console/', access: 'public', handle: pointer },
  ];
}
