/**
 * The reference Phase 3 rules service (`arkvory rules-service serve`, or `arkvory serve` with
 * ARKVORY_ROLE=rules-service): answers the gateways' rule queries from per-principal and
 * per-repository overrides in PostgreSQL, edited through its admin routes (the gateway's admin keys)
 * and `arkvory rules-service set|unset|list`. No storage, no lease, no Redis: several can run side
 * by side on one database. SIGTERM/SIGINT: stop accepting, drain, exit 0.
 */
import type { Logger } from 'pino';
import { pendingMigrations } from '../../migrations/runner.ts';
import { Authenticator } from '../../policy/auth/authenticator.ts';
import { systemClock } from '../../policy/clock.ts';
import { createOverrideStore } from '../../policy/rate-limit/rule-overrides.ts';
import { createAuthGate, transportPolicy } from '../gates/auth-gate.ts';
import type { Config } from '../config/config.ts';
import { createPool } from '../server/database.ts';
import { checkDatabasePrivileges } from '../server/privilege-startup.ts';
import { createGatewayServer } from '../server/http-server.ts';
import { createRequestAudit } from '../audit/request-audit.ts';
import { createTrustedProxies } from '../router/forwarded.ts';
import { Lifecycle } from '../server/lifecycle.ts';
import { logStartupFailure } from '../server/startup-failure.ts';
import { watchStopSignals } from '../server/stop-signals.ts';
import { loadRuleFiles } from '../gates/rate-limit-rule-files.ts';
import { rulesServiceRoutes } from './rules-service-routes.ts';
import { schemeOf } from '../server/listener.ts';
import { openListenerTls, type ServedTls } from '../tls/served-tls.ts';

const EXIT_OK = 0;
const EXIT_FAILURE = 1;

export async function runRulesService(config: Config, log: Logger): Promise<number> {
  const lifecycle = new Lifecycle();
  const signals = watchStopSignals(log, () => lifecycle.set('draining', 'shutdown'));

  const databaseUrl = config.databaseUrl!; // loadConfig requires it for this role
  const pool = createPool(databaseUrl, config.databasePoolSize, log, 'arkvory-rules-service');
  const auth = new Authenticator({ pool, databaseUrl, clock: systemClock, log: log.child({ component: 'auth' }) });
  let authStarted = false;
  let server: ReturnType<typeof createGatewayServer> | undefined;
  let code = EXIT_OK;
  let tls: ServedTls | undefined;
  try {
    await checkDatabasePrivileges(config, pool, log);
    tls = await openListenerTls(config.tls, { clock: systemClock, log: log.child({ component: 'tls' }) });
    const pending = await pendingMigrations(pool);
    if (pending.length)
      throw new Error(
        `the database schema is behind this code (${pending.length} pending migration(s), first ${pending[0]!.version}); run \`npm run migrate\` with the same ARKVORY_DATABASE_URL`,
      );
    const { available } = await loadRuleFiles(undefined);
    await auth.start();
    authStarted = true;
    const routes = rulesServiceRoutes({
      store: createOverrideStore(pool),
      available,
      ttlSeconds: config.rulesService.ttlSeconds,
      token: config.rulesService.token,
      lifecycle,
      bypassPublishers: config.rateLimitBypassPublishers,
    });
    server = createGatewayServer({
      routes,
      gates: [createAuthGate(auth, lifecycle, undefined, undefined, transportPolicy(config, systemClock))],
      log,
      limits: config.frontDoor,
      tls,
      audit: createRequestAudit({
        pool,
        log: log.child({ component: 'audit' }),
        trusted: createTrustedProxies(config.trustedProxies),
      }),
    });
    const address = await server.listen(config.port, config.host);
    tls?.start();
    if (!signals.requested) lifecycle.set('serving');
    log.info(
      {
        role: 'rules-service',
        url: `${schemeOf(server.server)}://${address.address}:${address.port}`,
        port: address.port,
        ttlSeconds: config.rulesService.ttlSeconds,
        queryTokenRequired: config.rulesService.token !== undefined,
      },
      'listening',
    );
  } catch (err) {
    logStartupFailure(log, err);
    code = EXIT_FAILURE;
  }
  if (code === EXIT_OK && !signals.requested) await signals.stopped;
  try {
    if (server?.server.listening) await server.close(config.shutdownTimeoutMs);
  } catch (err) {
    log.error({ err }, 'shutdown step failed');
  }
  tls?.close();
  if (authStarted) await auth.stop().catch(() => {});
  await pool.end().catch(() => {});
  log.info({ code }, 'stopped');
  return code;
}
