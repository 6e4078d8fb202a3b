/**
 * The operator console (writer only): static page and assets under `/console/`, sign-in with an
 * admin key into an in-memory session (HttpOnly, SameSite=Strict cookie, Path=/console), and the
 * JSON the page polls under `/console/api/…`. Every `/console/api/` request is authenticated again
 * with the session's key by the ordinary auth gate (see `credentials`), so scopes, revocation and
 * the rate limiters apply exactly as on the admin API; every state change also needs the session's
 * CSRF token in `X-CSRF-Token`. Changes go through the same code as `/api/v1/admin/…`: the admin
 * store's handlers and the rule registry's publish/unpublish with the one rule schema.
 */
import { readFile } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import type { Principal } from '../../policy/auth/principal.ts';
import { PolicyError } from '../../policy/errors.ts';
import { formatPath, RateLimitError, type RuleRegistry } from '../../policy/rate-limit/index.ts';
import { GatewayError } from '../server/errors.ts';
import { sendJson } from '../server/http-errors.ts';
import type { RequestContext, Route } from '../server/http-server.ts';
import { loadRuleFiles } from '../gates/rate-limit-rule-files.ts';
import { readJsonBody } from '../server/request-body.ts';
import type { HttpMethod } from '../server/route-table.ts';
import { authAdminRoutes } from '../admin/auth-admin-routes.ts';
import { mayPublishBypass, toPolicyError } from '../admin/rate-limit-admin-routes.ts';
import type { Services } from '../server/services.ts';
import { RateSamples } from './rate-samples.ts';
import { annotateTiers } from './shadowing.ts';
import {
  clearedSessionCookie,
  ConsoleSessions,
  CSRF_HEADER,
  csrfMatches,
  readCookie,
  SESSION_COOKIE,
  sessionCookie,
  type ConsoleSession,
} from './sessions.ts';
import { createHealthProber, rateLimitBlocks, readSlots } from './status.ts';

/** Sessions last at most 8 hours and end after 30 minutes without a request. */
export const SESSION_TTL_MS = 8 * 3600_000;
export const SESSION_IDLE_MS = 30 * 60_000;
/** Five minutes of one-second samples for the bandwidth chart. */
export const SAMPLE_SECONDS = 300;

/** Strict CSP: only this origin's script and style files, no inline code, no framing. */
export const CONTENT_SECURITY_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONTENT_SECURITY_POLICY,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

const STATIC_DIR = new URL('./static/', import.meta.url);
const ASSETS: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
};

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const API_PREFIX = '/console/api/';

export interface ConsoleModule {
  /**
   * The credentials the auth gate checks: for `/console/api/…` the key of the request's session
   * (no session → 401, a state change without its CSRF token → 403), else the Authorization header.
   */
  credentials(ctx: RequestContext): string | undefined;
  /** The routes; the rule registry exists only once rate limiting is open. No side effect. */
  routes(deps: { registry: RuleRegistry }): Promise<Route[]>;
  /** Starts the one-second bandwidth sampler (stopped on close). */
  start(): void;
}

function withSecurityHeaders(ctx: RequestContext): void {
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) ctx.res.setHeader(name, value);
}

/** The cookie gets `Secure` when a TLS proxy in front says the page came over https. */
function isHttps(req: IncomingMessage): boolean {
  return (
    String(req.headers['x-forwarded-proto'] ?? '')
      .split(',')[0]!
      .trim() === 'https'
  );
}

/** `authenticate` is the auth gate's own check (the session's key is verified again on resume). */
export function createConsole(
  services: Services,
  deps: { authenticate(authorization: string): Promise<Principal> },
): ConsoleModule {
  const { clock, pool, transfers, config, lifecycle, coordinator } = services;
  const sessions = new ConsoleSessions({ clock, ttlMs: SESSION_TTL_MS, idleMs: SESSION_IDLE_MS, maxSessions: 1000 });
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
  const probe = createHealthProber({ timeoutMs: 1000, cacheMs: 1500, monotonicMs: () => clock.monotonicMs() });

  const credentials = (ctx: RequestContext): string | undefined => {
    if (!ctx.route.startsWith(API_PREFIX)) return ctx.req.headers.authorization;
    const session = sessions.get(readCookie(ctx.req.headers.cookie, SESSION_COOKIE));
    if (!session)
      throw new PolicyError('unauthorized', 'No console session (signed out or expired); sign in with an admin key.', {
        headers: { 'www-authenticate': 'Bearer realm="arkvory"' },
      });
    if (!SAFE_METHODS.has(ctx.req.method ?? 'GET') && !csrfMatches(session, ctx.req.headers[CSRF_HEADER])) {
      throw new PolicyError('forbidden', 'A console change needs the X-CSRF-Token header of its session.');
    }
    sessionOf.set(ctx, session);
    return session.authorization;
  };

  const sessionBody = (session: ConsoleSession) => ({
    principal: { id: session.principalId, name: session.principalName },
    csrfToken: session.csrfToken,
    expiresInSeconds: sessions.remainingSeconds(session),
  });

  const page = (methods: readonly HttpMethod[], template: string, handle: Route['handle']): Route => ({
    methods,
    template,
    access: 'public',
    async handle(ctx) {
      withSecurityHeaders(ctx);
      await handle(ctx);
    },
  });
  const api = (methods: readonly HttpMethod[], template: string, handle: Route['handle']): Route => ({
    methods,
    template: template.startsWith('/console/') ? template : `${API_PREFIX}${template}`,
    access: 'admin',
    async handle(ctx) {
      withSecurityHeaders(ctx);
      await handle(ctx);
    },
  });

  /** The admin API's own handler for `method /api/v1/admin<path>`, served under /console/api. */
  const adminRoutes = authAdminRoutes(services);
  const mirror = (method: HttpMethod, path: string): Route => {
    const source = adminRoutes.find((r) => r.methods.includes(method) && r.template === `/api/v1/admin${path}`);
    if (!source) throw new Error(`no admin route ${method} ${path}`);
    return api([method], path.slice(1), source.handle);
  };
  const store = new AdminStore(pool);

  return {
    credentials,
    start() {
      sample();
      const timer = setInterval(sample, 1000);
      timer.unref();
      services.onClose.push(() => clearInterval(timer));
    },
    async routes({ registry }) {
      const assets = new Map<string, Buffer>();
      for (const name of Object.keys(ASSETS)) assets.set(name, await readFile(new URL(name, STATIC_DIR)));
      // The shipped limiter list: descriptions and the properties a rule may use, for the editor.
      const { available } = await loadRuleFiles(undefined);
      const sendAsset = (ctx: RequestContext, name: string) => {
        const body = assets.get(name)!;
        ctx.res.writeHead(200, {
          'content-type': ASSETS[name]!,
          'content-length': body.length,
          'cache-control': 'no-cache',
        });
        ctx.res.end(ctx.req.method === 'HEAD' ? undefined : body);
      };
      return [
        page(['GET', 'HEAD'], '/console', async ({ res }) => {
          res.writeHead(308, { location: '/console/', 'content-length': 0 }).end();
        }),
        page(['GET', 'HEAD'], '/console/', async (ctx) => sendAsset(ctx, 'index.html')),
        page(['GET', 'HEAD'], '/console/static/:file', async (ctx) => {
          const name = ctx.params.file!;
          if (!Object.hasOwn(ASSETS, name) || name === 'index.html')
            throw new PolicyError('not_found', 'No such console asset.');
          sendAsset(ctx, name);
        }),
        // Sign-in: the key comes in the Authorization header (the auth gate checks it and the admin
        // scope), never in a URL or a form field that could be logged or cached.
        api(['POST'], '/console/session', async (ctx) => {
          const { principal } = ctx;
          const authorization = ctx.req.headers.authorization;
          if (!principal || !authorization) throw new PolicyError('unauthorized');
          const session = sessions.create(principal, authorization);
          ctx.log.info({ principal: principal.id, code: 'console_sign_in' }, 'console session opened');
          sendJson(
            ctx.res,
            201,
            { signedIn: true, ...sessionBody(session) },
            { 'set-cookie': sessionCookie(session.id, SESSION_TTL_MS / 1000, isHttps(ctx.req)) },
          );
        }),
        // Resume after a reload: the page cannot read its HttpOnly cookie, so it asks. Public, so a
        // page opened before sign-in is not counted as a failed authentication.
        page(['GET'], '/console/session', async (ctx) => {
          const session = sessions.get(readCookie(ctx.req.headers.cookie, SESSION_COOKIE));
          let live = session !== undefined;
          if (session) {
            try {
              await deps.authenticate(session.authorization);
            } catch (err) {
              if ((err as { code?: unknown }).code !== 'unauthorized') throw err;
              sessions.delete(session.id);
              live = false;
            }
          }
          sendJson(ctx.res, 200, live && session ? { signedIn: true, ...sessionBody(session) } : { signedIn: false });
        }),
        api(['DELETE'], 'session', async (ctx) => {
          sessions.delete(sessionOf.get(ctx)!.id);
          ctx.res
            .writeHead(204, { 'set-cookie': clearedSessionCookie(isHttps(ctx.req)), 'cache-control': 'no-store' })
            .end();
        }),
        api(['GET'], 'status', async (ctx) => {
          const slots = config.shared ? await readSlots(pool) : [];
          const slotViews = await Promise.all(
            slots.map(async (s) => {
              const self = s.owner === coordinator.owner;
              const live = s.expiresInSeconds > 0;
              const health = self
                ? lifecycle.state
                : !live
                  ? 'expired'
                  : s.advertiseUrl
                    ? await probe(s.advertiseUrl)
                    : 'not advertised';
              const { owner: _owner, ...rest } = s;
              return { ...rest, self, live, health };
            }),
          );
          const admission = transfers.admission.snapshot();
          const governor = (d: 'download' | 'upload') => {
            const g = transfers.governors[d].snapshot();
            return {
              bytesPerSecond: g.rateBytesPerSec,
              bytesPerSecondPerPrincipal: g.perPrincipalBytesPerSec,
              waitingQuanta: g.waitingQuanta,
            };
          };
          sendJson(ctx.res, 200, {
            gateway: {
              role: config.role,
              profile: config.shared ? 'shared' : 'standalone',
              slot: config.shared?.slot ?? null,
              slots: config.shared?.slots ?? null,
              state: lifecycle.state,
              permitted: coordinator.isPermitted(),
            },
            slots: slotViews,
            transfers: {
              downloads: {
                active: admission.downloads.active,
                queued: admission.downloads.queued,
                rejected: admission.downloads.rejected,
              },
              uploads: {
                active: admission.uploads.active,
                queued: admission.uploads.queued,
                rejected: admission.uploads.rejected,
              },
              live: transfers.live.list(),
            },
            bandwidth: {
              ceilings: {
                download: governor('download'),
                upload: governor('upload'),
                sharedDownloadBytesPerSecond: config.shared?.downloadBytesPerSec ?? null,
              },
              samples: samples.samples(),
            },
            rateLimits: { blocks: await rateLimitBlocks() },
          });
        }),
        api(['GET'], 'rate-limits', async (ctx) => {
          const views = await mapped(() => registry.show());
          sendJson(ctx.res, 200, {
            limiters: views.map((v) => ({
              limiter: v.limiter,
              description: available.get(v.limiter)?.description ?? '',
              properties: available.get(v.limiter)?.available_properties ?? [],
              source: v.source,
              tiers: annotateTiers(v.tiers),
            })),
          });
        }),
        api(['PUT'], 'rate-limits', async (ctx) => {
          const body = await readJsonBody(ctx.req, 1024 * 1024);
          try {
            sendJson(ctx.res, 200, {
              published: await registry.publish(body, {
                allowSkip: mayPublishBypass(ctx.principal, config.rateLimitBypassPublishers),
              }),
            });
          } catch (err) {
            if (err instanceof RateLimitError && err.code === 'invalid_rules') {
              // The problems with their key paths, so the page can show each beside its field.
              const problems = err.problems.map((p) => ({
                path: p.path,
                where: formatPath(p.path),
                message: p.message,
                ...(p.rule ? { rule: p.rule } : {}),
              }));
              sendJson(ctx.res, 400, {
                code: 'invalid_request',
                message: `Invalid rules: ${problems.length} problem(s).`,
                problems,
              });
              return;
            }
            throw toPolicyError(err);
          }
        }),
        api(['DELETE'], 'rate-limits/:limiter/rules/:rule', async (ctx) => {
          await mapped(() => registry.unpublish(ctx.params.limiter!, ctx.params.rule!));
          ctx.res.writeHead(204, { 'cache-control': 'no-store' }).end();
        }),
        api(['GET'], 'access', async (ctx) => {
          const [principals, grants, repositories] = await Promise.all([
            store.listPrincipals(),
            store.listGrants(),
            store.listRepositories(),
          ]);
          const withKeys = await Promise.all(
            principals.map(async (p) => ({
              ...p,
              keys: await store.listKeys(p.id),
              grants: grants
                .filter((g) => g.principalId === p.id)
                .map((g) => ({ repository: g.repository, permission: g.permission })),
            })),
          );
          sendJson(ctx.res, 200, { principals: withKeys, repositories });
        }),
        mirror('POST', '/principals'),
        mirror('POST', '/principals/:principal/keys'),
        mirror('POST', '/keys/:keyId/revoke'),
        mirror('PUT', '/grants/:principal/:repository'),
      ];
    },
  };
}

async function mapped<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw toPolicyError(err);
  }
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
