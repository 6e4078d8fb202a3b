import { Authenticator } from '../../policy/auth/authenticator.ts';
import { PresignedLinks } from '../../policy/auth/presigned-links.ts';
import { changedSinceAuthorized, createAuthGate, requestStillAuthorized, transportPolicy } from '../gates/auth-gate.ts';
import { refuseCrossSiteWrites } from '../gates/cross-site.ts';
import { withBrowserSafeChallenge } from '../gates/challenge.ts';
import { createConsole, readerConsoleRoutes } from '../console/console-module.ts';
import { bootstrapAdmin } from '../admin/bootstrap-admin.ts';
import { openContentModule } from '../content/content-module.ts';
import type { Gate, RequestContext, Route } from './route-types.ts';
import { tracedGate } from '../tracing/traced-gate.ts';
import { ceilingAdminRoutes } from '../admin/ceiling-admin-routes.ts';
import { authAdminRoutes } from '../admin/auth-admin-routes.ts';
import { auditRoutes } from '../audit/audit-routes.ts';
import { statsRoutes } from '../stats/stats-routes.ts';
import { startAuditRetention } from '../audit/audit-retention.ts';
import { healthRoutes } from './health-routes.ts';
import { openRateLimiting } from '../gates/open-rate-limiting.ts';
import { rateLimitAdminRoutes } from '../admin/rate-limit-admin-routes.ts';
import type { Services } from './services.ts';
import { contentMeters, withAdmission } from '../gates/transfers.ts';
import { recheckOnChange } from '../gates/live-transfers.ts';
import { buildWorkerApp, startMultipart } from '../multipart/worker-app.ts';

/**
 * Composes the feature modules for this role into one route list and one ordered gate chain.
 * The order every request meets (docs/architecture.md): the auth_failure ban check and
 * authentication (one gate, guardAuth around the auth gate), then gateway_request rate limiting
 * (and the transfer_bytes peek), then, inside the content routes, admission (withAdmission) and the
 * bandwidth meters that pace the body. Each module owns its routes; the order is fixed here.
 */
export async function buildApp(services: Services): Promise<{ routes: Route[]; gates: Gate[] }> {
  if (services.config.role === 'worker') return buildWorkerApp(services);
  const auth = new Authenticator({
    pool: services.pool,
    databaseUrl: services.databaseUrl,
    clock: services.clock,
    log: services.log.child({ component: 'auth' }),
  });
  await auth.start();
  services.onClose.push(() => auth.stop());
  await bootstrapAdmin(services);
  const links = new PresignedLinks({
    pool: services.pool,
    auth,
    clock: services.clock,
    maxLifetimeSeconds: services.config.presignMaxExpiresSeconds,
  });

  // The auth gate, built below with the console's credentials; an upload asks it again before publishing.
  let authGate: Gate | undefined;
  const content = await openContentModule(services, {
    readableRepositories: (id) => auth.readableRepositories(id),
    grant: (id, repo) => auth.grant(id, repo),
    meters: contentMeters(services.transfers, (repo) => auth.repositoryCeilingsNow(repo)),
    links,
    reauthorize: (ctx) => authGate?.(ctx),
  });
  const multipart = startMultipart(
    services,
    content.store,
    contentMeters(services.transfers, (repo) => auth.repositoryCeilingsNow(repo)),
  );
  // Running downloads are asked again on every auth change and cut once revoked (docs/auth.md).
  const downloads = {
    ask: (ctx: RequestContext) => requestStillAuthorized(auth, ctx),
    changedSince: (ctx: RequestContext) => changedSinceAuthorized(auth, ctx),
  };
  services.onClose.push(recheckOnChange(services.transfers.live, (listener) => auth.onChange(listener)));
  const contentRoutes = [...content.routes, ...(await multipart).routes].map((route) =>
    withAdmission(route, services.transfers, downloads),
  );
  const routes: Route[] = [
    ...healthRoutes(services),
    ...authAdminRoutes(services),
    ...ceilingAdminRoutes(services),
    ...contentRoutes,
  ];
  // The audit trail is the writer's: it records the changes, and only its role may read them back.
  if (services.config.role === 'api') {
    routes.push(...auditRoutes(services.pool));
    routes.push(...statsRoutes(services.pool));
    services.onClose.push(
      startAuditRetention({
        pool: services.pool,
        log: services.log.child({ component: 'audit' }),
        keepDays: services.config.auditRetentionDays,
      }),
    );
  }
  // The console lives on the writer only (DESIGN.md); a reader points there.
  const consoleUi =
    services.config.role === 'api'
      ? createConsole(services, { authenticate: (header) => auth.authenticate(header) })
      : undefined;
  authGate = createAuthGate(
    auth,
    services.lifecycle,
    consoleUi?.credentials,
    links,
    transportPolicy(services.config, services.clock),
  );
  const gates: Gate[] = [authGate];
  // Rate limiting: auth failures are counted around the auth gate; gateway_request runs after it.
  const rateLimiting = await openRateLimiting(services);
  routes.push(...rateLimitAdminRoutes(rateLimiting.registry, services.config.rateLimitBypassPublishers));
  routes.push(...(consoleUi ? await consoleUi.routes({ registry: rateLimiting.registry }) : readerConsoleRoutes()));
  consoleUi?.start();
  gates[0] = withBrowserSafeChallenge(rateLimiting.guardAuth(gates[0]!));
  gates.push(rateLimiting.gate);
  if (services.tracing) {
    gates[0] = tracedGate('arkvory.auth', gates[0]!);
    gates[1] = tracedGate('arkvory.rate_limit', gates[1]!);
  }
  // First: another site's request is refused before its credentials are looked at or counted.
  gates.unshift(refuseCrossSiteWrites);
  return { routes, gates };
}
