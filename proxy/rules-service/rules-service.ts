/**
 * The reference Phase 3 rules service (`arkvory rules-service serve`, or `arkvory serve` with
 * ARKVORY_ROLE=rules-service): answers the gateways' rule queries from per-principal and
 * per-repository overrides in PostgreSQL, edited through its admin routes (the gateway's admin keys)
 * and `arkvory rules-service set|unset|list`. No storage, no lease, no Redis: several can run side
 * by side on one database. SIGTERM/SIGINT: stop accepting, drain, exit 0. SIGHUP or a changed secret
 * file: the database password and the query token rotate (the old token accepted for a grace).
 */
import type { Logger } from 'pino';
import { pendingMigrations } from '../../migrations/runner.ts';
import { Authenticator } from '../../policy/auth/authenticator.ts';
import { systemClock } from '../../policy/clock.ts';
import { createOverrideStore } from '../../policy/rate-limit/rule-overrides.ts';
import { createAuthGate, transportPolicy } from '../gates/auth-gate.ts';
import type { Config } from '../config/config.ts';
import { createPool, waitForDatabaseAtStartup } from '../server/database.ts';
import { checkDatabasePrivileges, databaseLoginVerifier } from '../server/privilege-startup.ts';
import { SecretRotation, type StartSecrets } from '../config/secret-rotation.ts';
import { QueryTokens } from './query-tokens.ts';
import { createGatewayServer } from '../server/http-server.ts';
import { type AuditFailures, createRequestAudit } from '../audit/request-audit.ts';
import { createTrustedProxies } from '../router/forwarded.ts';
import { Lifecycle } from '../server/lifecycle.ts';
import { logStartupFailure } from '../server/startup-failure.ts';
import { watchStopSignals } from '../server/stop-signals.ts';
import { loadRuleFiles } from '../gates/rate-limit-rule-files.ts';
import { rulesServiceRoutes } from './rules-service-routes.ts';
import { schemeOf } from '../server/listener.ts';
import { openListenerTls, type ServedTls } from '../tls/served-tls.ts';
import type { MetricsServer } from '../metrics/metrics-endpoint.ts';
import { startRulesServiceMetricsServer } from './rules-service-metrics.ts';

const EXIT_OK = 0;
const EXIT_FAILURE = 1;

export async function runRulesService(
  config: Config,
  log: Logger,
  secrets: StartSecrets = { env: {}, reads: new Map() },
): Promise<number> {
  const lifecycle = new Lifecycle();
  // Cuts a startup wait for the database short: a stop asked for then exits 0 at once.
  const stopping = new AbortController();
  const signals = watchStopSignals(log, () => {
    lifecycle.set('draining', 'shutdown');
    stopping.abort();
  });

  const rotation = new SecretRotation(config, secrets, {
    log: log.child({ component: 'secrets' }),
    verifiers: [databaseLoginVerifier()],
  });
  const tokens = new QueryTokens(config.rulesService.token, config.rulesService.tokenGraceMs);
  rotation.onRotated((previous, next) => {
    if (next.rulesService.token === previous.rulesService.token) return;
    const nowMs = systemClock.monotonicMs();
    if (!tokens.rotate(next.rulesService.token, nowMs)) {
      log.warn(
        { code: 'query_token_not_rotated' },
        'the query token setting is gone or empty after a reload: the token in use stays required (restart without it to open the route)',
      );
      return;
    }
    log.info(
      { graceSeconds: config.rulesService.tokenGraceMs / 1000 },
      `query token rotated; the previous one is accepted for ${config.rulesService.tokenGraceMs / 1000} s more`,
    );
  });
  // loadConfig requires a database URL for this role; each new connection reads the rotated one.
  const databaseUrl = () => rotation.config.databaseUrl!;
  // Bounded as a gateway's pool: a hung PostgreSQL answers a query or an admin call 503 `unavailable`
  // past the deadline and its connection is ended, instead of holding it and every request behind it.
  // Audit rows lift it for a bound of their own; the service runs no migrations.
  const pool = createPool(
    databaseUrl,
    config.databasePoolSize,
    log,
    'arkvory-rules-service',
    config.databaseQueryTimeoutMs,
  );
  const auth = new Authenticator({ pool, databaseUrl, clock: systemClock, log: log.child({ component: 'auth' }) });
  let authStarted = false;
  let server: ReturnType<typeof createGatewayServer> | undefined;
  let code = EXIT_OK;
  let tls: ServedTls | undefined;
  let metricsServer: MetricsServer | undefined;
  try {
    // Before the database: a broken certificate pair refuses the start with its reason at once.
    tls = await openListenerTls(config.tls, { clock: systemClock, log: log.child({ component: 'tls' }) });
    // PostgreSQL may come up after the service (a host boot, a failover): retry with backoff, as a gateway does.
    const reached = await waitForDatabaseAtStartup(() => pool.query('SELECT 1'), {
      config,
      url: databaseUrl,
      log,
      signal: stopping.signal,
    });
    if (reached === 'reachable') {
      await checkDatabasePrivileges(config, pool, log);
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
        tokens,
        clock: systemClock,
        lifecycle,
        bypassPublishers: config.rateLimitBypassPublishers,
      });
      const auditFailures: AuditFailures = { failed: 0, timeout: 0 };
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
          failures: auditFailures,
        }),
      });
      if (config.metrics.port !== undefined)
        metricsServer = await startRulesServiceMetricsServer(
          config.metrics.port,
          { frontDoor: server.frontDoor, tls, auditFailures },
          log.child({ component: 'metrics' }),
        );
      const address = await server.listen(config.port, config.host);
      tls?.start();
      await rotation.start();
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
    }
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
  await metricsServer?.close();
  tls?.close();
  rotation.close();
  if (authStarted) await auth.stop().catch(() => {});
  await pool.end().catch(() => {});
  log.info({ code }, 'stopped');
  return code;
}
