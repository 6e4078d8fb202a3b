/**
 * Starts rate limiting for `serve`: counters (Redis or memory), the tiered rule registry, the optional
 * rules service, and the gateway's three limiters, wired into the gates of rate-limit-gate.ts.
 */
import type { Logger } from 'pino';
import {
  createLimiter,
  createMemoryCounterStore,
  createPgRuleDocuments,
  createRateLimitMetrics,
  createRemoteRules,
  createRulesServiceClient,
  createRulesServiceMetrics,
  createRedisRuleDocuments,
  createRedisCounterStore,
  createRuleRegistry,
  tieredRules,
  ruleDocumentsPrefix,
  type AvailableLimiters,
  type Limiter,
  type RemoteRules,
  type RulesServiceMetrics,
  type TierSource,
  type RuleRegistry,
} from '../../policy/rate-limit/index.ts';
import type { Gate } from '../server/route-types.ts';
import { createTrustedProxies } from '../router/forwarded.ts';
import { redactUrl } from '../../lib/redact-url.ts';
import type { Services } from '../server/services.ts';
import { loadRuleFiles } from './rate-limit-rule-files.ts';
import { type RateLimitRedis, createRateLimitRedis, useRedisCredentials } from './rate-limit-redis.ts';
import { createRateLimitGate, guardAuthGate } from './rate-limit-gate.ts';
import { createUntrustedForwarderReport } from './untrusted-forwarders.ts';

export interface RateLimiting {
  readonly registry: RuleRegistry;
  readonly request: Limiter;
  readonly authFailure: Limiter;
  readonly transferBytes: Limiter;
  readonly counters: 'redis' | 'memory';
  /** After auth: `gateway_request` and `transfer_bytes`. */
  readonly gate: Gate;
  /** Wraps the auth gate with the `auth_failure` limiter. */
  guardAuth(authGate: Gate): Gate;
}

/**
 * Starts rate limiting for `serve`. Throws `RateLimitConfigError` only for a bad shipped limiter
 * list; a missing operator file is logged (no file tier), an invalid one is logged and not applied
 * (the stored file tier stays); Redis being down never throws.
 */
export async function openRateLimiting(
  services: Services,
  options: { refreshIntervalMs?: number } = {},
): Promise<RateLimiting> {
  const { config, clock } = services;
  const log = services.log.child({ component: 'rate-limit' });
  const { available, fileRules, fileStatus, fileProblems } = await loadRuleFiles(config.rateLimitsFile);
  if (fileStatus === 'missing')
    log.warn(
      { file: config.rateLimitsFile, code: 'rules_file_missing' },
      'ARKVORY_RATE_LIMITS_FILE does not exist; running without the file tier (spec 2.7: the file is optional)',
    );
  if (fileStatus === 'invalid')
    log.error(
      { file: config.rateLimitsFile, code: 'invalid_rules', problems: fileProblems },
      'ARKVORY_RATE_LIMITS_FILE is invalid; not applied (the stored file tier, if any, is left as it was) until a restart with a valid file',
    );
  const trusted = createTrustedProxies(config.trustedProxies);
  let redis: RateLimitRedis | undefined;
  if (config.redisUrl) {
    redis = createRateLimitRedis(config.redisUrl, log, clock);
    const client = redis;
    await client
      .connect()
      .catch((err: unknown) =>
        log.warn({ err }, 'rate-limit Redis not reachable at startup; failing open and retrying'),
      );
    services.onClose.push(async () => {
      await client.quit().catch(() => client.disconnect());
    });
    // A rotated password (checked by redisCredentialsVerifier) is used from the next (re)connection.
    services.secrets?.onRotated((previous, next) => {
      if (next.redisUrl !== undefined && next.redisUrl !== previous.redisUrl)
        useRedisCredentials(client, next.redisUrl);
    });
  }
  const store = redis ? createRedisCounterStore(redis) : (services.counters ?? createMemoryCounterStore());
  const documents = redis
    ? createRedisRuleDocuments(redis, ruleDocumentsPrefix(config.redisKeyPrefix, redis.isCluster))
    : createPgRuleDocuments(services.pool);
  const metrics = createRateLimitMetrics();
  // An invalid file must not wipe the file tier other gateways seeded into a shared store.
  const registry = createRuleRegistry({
    documents,
    available,
    fileRules,
    replaceFileTier: fileStatus !== 'invalid',
    clock,
    log,
    ...(options.refreshIntervalMs ? { refreshIntervalMs: options.refreshIntervalMs } : {}),
    // A rule a publish removed (here or on another gateway, seen by the refresh) leaves the metrics.
    onRulesRemoved: (limiter, names) => metrics.forgetRules(limiter, names),
  });
  await registry.start();
  services.onClose.push(() => registry.stop());
  const deps = {
    store,
    clock,
    log,
    metrics,
    timeoutMs: config.rateLimitTimeoutMs,
    keyPrefix: `${config.redisKeyPrefix}rl:`,
  };
  const local: TierSource = { name: 'local', rulesFor: (limiter: string) => registry.rules(limiter) };
  // Phase 3 (spec 3.1): the rules service's answers come before every local tier.
  const remote = openRemoteRules(services, available, log, createRulesServiceMetrics());
  const sources = remote ? [remote, local] : [local];
  const limiter = (name: string) => createLimiter(deps, { name, rules: tieredRules(name, sources) });
  const request = limiter('gateway_request');
  const authFailure = limiter('auth_failure');
  const transferBytes = limiter('transfer_bytes');
  services.readiness.push(() => {
    const status = registry.status();
    return {
      rateLimits: {
        counters: store.kind,
        rules: status.documents,
        rulesFresh: status.lastRefreshError === undefined && status.seeded,
        rulesFile: fileStatus,
        ...(remote ? { rulesService: remote.status().circuit } : {}),
      },
    };
  });
  log.info(
    {
      counters: store.kind,
      rules: documents.kind,
      file: config.rateLimitsFile ?? null,
      rulesService: config.rulesService.url === undefined ? null : redactUrl(config.rulesService.url),
      service: config.serviceName,
    },
    'rate limiting ready',
  );
  return {
    registry,
    request,
    authFailure,
    transferBytes,
    counters: store.kind,
    gate: createRateLimitGate({
      request,
      transferBytes,
      clock,
      trusted,
      ipv6PrefixLength: config.rateLimitIpv6PrefixLength,
    }),
    guardAuth: (authGate) =>
      guardAuthGate(authGate, authFailure, clock, trusted, {
        ipv6PrefixLength: config.banIpv6PrefixLength,
        onUntrustedForwarder: createUntrustedForwarderReport({
          log,
          clock,
          record: (peer) =>
            services.pool
              .query(
                `INSERT INTO arkvory_forwarding_peers (peer, role) VALUES ($1, $2)
                 ON CONFLICT (peer, role) DO UPDATE SET last_seen_at = now()`,
                [peer, config.role],
              )
              .then(() => undefined),
        }),
      }),
  };
}

/** The rules service's tier over undici, or undefined when no rules service is configured. */
function openRemoteRules(
  services: Services,
  available: AvailableLimiters,
  log: Logger,
  metrics: RulesServiceMetrics,
): RemoteRules | undefined {
  const { config, clock } = services;
  const { url, timeoutMs, maxTtlMs } = config.rulesService;
  if (!url) return undefined;
  const { secrets } = services;
  // The token as it is now: a rotated token file reaches the next query.
  const token = secrets ? () => secrets.config.rulesService.token : config.rulesService.token;
  const client = createRulesServiceClient({ url, timeoutMs, token });
  services.onClose.push(() => client.close());
  return createRemoteRules({
    serviceName: config.serviceName,
    available,
    transport: client.transport,
    clock,
    log: log.child({ component: 'rules-service-client' }),
    metrics,
    timeoutMs,
    maxTtlMs,
  });
}
