/**
 * Rate limiting at the HTTP edge: builds the Redis client (or the in-memory default), the tiered rule
 * registry and the gateway's three limiters, and exposes
 *  - `gate`: the `gateway_request` check on every request (after auth) plus the `transfer_bytes`
 *    peek before and check after the body moved;
 *  - `guardAuth(authGate)`: wraps the auth gate so failed authentications count in `auth_failure`
 *    (a banned address gets 429 before its key is even looked at; a success clears the failures).
 */
import { readFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';
import { PolicyError } from '../../policy/errors.ts';
import {
  ANONYMOUS,
  createLimiter,
  createMemoryStore,
  createPgRuleDocuments,
  createRateLimitMetrics,
  createRemoteRules,
  createRulesServiceClient,
  createRulesServiceMetrics,
  createRedisRuleDocuments,
  createRedisStore,
  createRuleRegistry,
  formatProblem,
  layeredRules,
  parseAvailableLimiters,
  parseRateLimits,
  parseRedisTarget,
  ruleDocumentsPrefix,
  type AvailableLimiters,
  type Identifier,
  type Limiter,
  type RateLimitResult,
  type RemoteRules,
  type RulesServiceMetrics,
  type RuleLayer,
  type RuleRegistry,
  type RuleSpec,
} from '../../policy/rate-limit/index.ts';
import type { Gate, RequestContext } from '../server/http-server.ts';
import { clientAddress, createTrustedProxies, type TrustedProxies } from '../router/forwarded.ts';
import { redactUserinfo } from '../server/redact-url.ts';
import type { Services } from '../server/services.ts';

export const AVAILABLE_LIMITERS_FILE = new URL('../../policy/rate-limit/available_limiters.yaml', import.meta.url);
export class RateLimitConfigError extends Error {
  override readonly name = 'RateLimitConfigError';
  readonly code = 'invalid_rules' as const;
  readonly lines: readonly string[];
  constructor(lines: readonly string[]) {
    super(`invalid rate-limit rules:\n${lines.map((l) => `  ${l}`).join('\n')}`);
    this.lines = lines;
  }
}

/** What became of ARKVORY_RATE_LIMITS_FILE at start: not set, loaded, absent, or refused. */
export type RulesFileStatus = 'unset' | 'loaded' | 'missing' | 'invalid';

export interface RuleFiles {
  available: AvailableLimiters;
  fileRules: Map<string, RuleSpec[]>;
  fileStatus: RulesFileStatus;
  /** For `invalid`: one `file:line: …` line per problem. */
  fileProblems: string[];
}

/**
 * Reads the shipped limiter list (a problem there is our bug: it throws) and the operator file.
 * The file is optional (spec 2.7, 2.8: "ignored if it does not exist"), and a violation in it is
 * raised, caught and logged by the caller (spec 2.8.2), never fatal: none of its rules is applied
 * and the stored file tier is left as it was. `arkvory ratelimit validate` is the gate before a deploy.
 */
export async function loadRuleFiles(rateLimitsFile: string | undefined): Promise<RuleFiles> {
  const shipped = parseAvailableLimiters(await readFile(AVAILABLE_LIMITERS_FILE, 'utf8'), 'available_limiters.yaml');
  if (shipped.problems.length) throw new RateLimitConfigError(shipped.problems.map(formatProblem));
  const none = (fileStatus: RulesFileStatus, fileProblems: string[] = []): RuleFiles => ({
    available: shipped.available,
    fileRules: new Map(),
    fileStatus,
    fileProblems,
  });
  if (!rateLimitsFile) return none('unset');
  let text: string;
  try {
    text = await readFile(rateLimitsFile, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return none('missing');
    return none('invalid', [
      `${rateLimitsFile}: cannot read ARKVORY_RATE_LIMITS_FILE (${code ?? (err as Error).message})`,
    ]);
  }
  const parsed = parseRateLimits(text, rateLimitsFile, shipped.available);
  if (parsed.problems.length) return none('invalid', parsed.problems.map(formatProblem));
  return { available: shipped.available, fileRules: parsed.rateLimits, fileStatus: 'loaded', fileProblems: [] };
}

/** A single Redis or a Redis Cluster client: the rate-limit store works with either. */
export type RateLimitRedis = Redis | Cluster;

/**
 * The ioredis client for counters and rule documents: bounded waits, no offline queue (fail fast).
 * Several comma-separated URLs are the seeds of a Redis Cluster (policy/rate-limit/redis-target.ts).
 */
export function createRateLimitRedis(url: string, log: Logger, clock: Clock): RateLimitRedis {
  const parsed = parseRedisTarget(url);
  if (!parsed.ok) throw new Error(`ARKVORY_REDIS_URL: ${parsed.problem}`);
  const { target } = parsed;
  const perConnection = {
    connectTimeout: 2000,
    commandTimeout: 2000,
    maxRetriesPerRequest: 0,
    connectionName: 'arkvory-rate-limit',
  };
  const redis: RateLimitRedis =
    target.kind === 'single'
      ? new Redis(target.url, {
          ...perConnection,
          lazyConnect: true,
          enableOfflineQueue: false,
          enableAutoPipelining: true,
          retryStrategy: (times) => Math.min(100 * times, 2000),
        })
      : new Cluster([...target.nodes], {
          lazyConnect: true,
          enableOfflineQueue: false,
          // No auto-pipelining: a cluster pipeline must stay in one slot, and concurrent checks touch many.
          enableAutoPipelining: false,
          // Reconnect to the seeds forever (as the single client does); a failover is followed
          // through MOVED answers and a slot refresh, each bounded by the command timeout.
          clusterRetryStrategy: (times) => Math.min(100 * times, 2000),
          retryDelayOnFailover: 100,
          retryDelayOnClusterDown: 100,
          slotsRefreshTimeout: 2000,
          redisOptions: {
            ...perConnection,
            ...(target.username ? { username: target.username } : {}),
            ...(target.password ? { password: target.password } : {}),
            ...(target.tls ? { tls: {} } : {}),
          },
        });
  let lastLogMs = -Infinity;
  redis.on('error', (err: Error & { code?: string }) => {
    const now = clock.monotonicMs();
    if (now - lastLogMs < 10_000) return;
    lastLogMs = now;
    log.warn(
      { code: err.code ?? 'store_unavailable', message: err.message },
      'rate-limit Redis connection error (checks fail open until it is back)',
    );
  });
  return redis;
}

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
  }
  const store = redis ? createRedisStore(redis) : createMemoryStore();
  const documents = redis
    ? createRedisRuleDocuments(redis, ruleDocumentsPrefix(config.redisKeyPrefix, redis.isCluster))
    : createPgRuleDocuments(services.pool);
  // An invalid file must not wipe the file tier other gateways seeded into a shared store.
  const registry = createRuleRegistry({
    documents,
    available,
    fileRules,
    replaceFileTier: fileStatus !== 'invalid',
    clock,
    log,
    ...(options.refreshIntervalMs ? { refreshIntervalMs: options.refreshIntervalMs } : {}),
  });
  await registry.start();
  services.onClose.push(() => registry.stop());
  const metrics = createRateLimitMetrics();
  const deps = {
    store,
    clock,
    log,
    metrics,
    timeoutMs: config.rateLimitTimeoutMs,
    keyPrefix: `${config.redisKeyPrefix}rl:`,
  };
  const local: RuleLayer = { name: 'local', rulesFor: (limiter: string) => registry.rules(limiter) };
  // Phase 3 (spec 3.1): the rules service's answers come before every local tier.
  const remote = openRemoteRules(services, available, log, createRulesServiceMetrics());
  const layers = remote ? [remote, local] : [local];
  const limiter = (name: string) => createLimiter(deps, { name, rules: layeredRules(name, layers) });
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
      rulesService: config.rulesService.url === undefined ? null : redactUserinfo(config.rulesService.url),
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
    gate: createRateLimitGate({ request, transferBytes, clock, trusted }),
    guardAuth: (authGate) => guardAuthGate(authGate, authFailure, clock, trusted),
  };
}

/** The remote rules layer over undici, or undefined when no rules service is configured. */
function openRemoteRules(
  services: Services,
  available: AvailableLimiters,
  log: Logger,
  metrics: RulesServiceMetrics,
): RemoteRules | undefined {
  const { config, clock } = services;
  const { url, timeoutMs, maxTtlMs, token } = config.rulesService;
  if (!url) return undefined;
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

const NO_TRUSTED_PROXIES = createTrustedProxies([]);

/** The client address: the socket peer, or behind ARKVORY_TRUSTED_PROXIES the forwarded client. */
export function clientIp(ctx: RequestContext, trusted: TrustedProxies = NO_TRUSTED_PROXIES): string {
  return clientAddress(ctx.req, trusted);
}

export function requestType(
  ctx: Pick<RequestContext, 'route' | 'access' | 'req'>,
): 'read' | 'write' | 'admin' | 'health' {
  if (ctx.route.startsWith('/health/') || ctx.route === '/metrics') return 'health';
  if (ctx.access === 'admin' || ctx.route.startsWith('/api/v1/admin/') || ctx.route === '/api/v1/admin') return 'admin';
  const method = ctx.req.method ?? 'GET';
  return method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? 'read' : 'write';
}

/** The `gateway_request` identifier: exactly the properties declared in available_limiters.yaml. */
export function requestIdentifier(ctx: RequestContext, trusted: TrustedProxies = NO_TRUSTED_PROXIES): Identifier {
  return {
    principal: ctx.principal?.id ?? ANONYMOUS,
    ip: clientIp(ctx, trusted),
    method: ctx.req.method ?? 'GET',
    repository: ctx.params.repo,
    route: ctx.route,
    request_type: requestType(ctx),
  };
}

/**
 * IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy` names the
 * rule with its quota `q` and window `w`; `RateLimit` gives what is left `r` and seconds to reset `t`.
 */
export function rateLimitHeaders(result: RateLimitResult, nowMs: number): Record<string, string> {
  if (!result.rule || !result.info) return {};
  const { info } = result;
  const resetS = Math.max(0, Math.ceil((info.resetAtMs - nowMs) / 1000));
  const name = result.rule.name;
  const headers: Record<string, string> = {
    'ratelimit-policy': `"${name}";q=${Math.floor(info.resolvedLimit)};w=${Math.max(1, Math.round(info.resolvedPeriodS))}`,
    ratelimit: `"${name}";r=${Math.floor(info.remaining)};t=${resetS}`,
  };
  if (result.action === 'block') headers['retry-after'] = String(Math.max(1, resetS));
  return headers;
}

function blocked(result: RateLimitResult, nowMs: number, message?: string): PolicyError {
  return new PolicyError('rate_limited', message, { headers: rateLimitHeaders(result, nowMs) });
}

export function createRateLimitGate(deps: {
  request: Limiter;
  transferBytes: Limiter;
  clock: Clock;
  trusted?: TrustedProxies;
}): Gate {
  const { request, transferBytes, clock } = deps;
  const trusted = deps.trusted ?? NO_TRUSTED_PROXIES;
  return async (ctx) => {
    const identifier = requestIdentifier(ctx, trusted);
    const result = await request.check(identifier);
    if (result.action === 'block') throw blocked(result, clock.wallMs());
    if (result.exceeded)
      ctx.log.info(
        { limiter: request.name, rule: result.rule?.name, code: 'rate_limited', shadow: true },
        'shadow rate limit exceeded',
      );
    if (result.rule?.action === 'limit' && result.info) {
      for (const [name, value] of Object.entries(rateLimitHeaders(result, clock.wallMs())))
        ctx.res.setHeader(name, value);
    }
    if (identifier.request_type === 'health') return;

    const transferId: Identifier = {
      ...identifier,
      direction: identifier.method === 'GET' || identifier.method === 'HEAD' ? 'download' : 'upload',
    };
    const peek = await transferBytes.peek(transferId);
    if (peek.action === 'block') throw blocked(peek, clock.wallMs(), 'Transfer volume quota exhausted; retry later.');
    if (peek.evaluations.length === 0) return; // no transfer rule applies: nothing to count afterwards
    const socket = ctx.req.socket as Socket;
    const writtenAtStart = socket.bytesWritten;
    const readAtStart = socket.bytesRead;
    ctx.res.once('close', () => {
      const bytes = socket.bytesWritten - writtenAtStart + (socket.bytesRead - readAtStart);
      if (bytes > 0) void transferBytes.check(transferId, { cost: bytes });
    });
  };
}

/**
 * Counts failed authentications by address in `auth_failure`. A banned (or over-limit) address is
 * refused with 429 before authentication (Retry-After from the ban's end); a 401 counts one failure,
 * and the failure that starts a ban (enforced or shadow) is logged. A success clears the address's
 * counters and bans, shadow bans included (spec 1.5: a successful login discards the failures before
 * it); the clear is skipped when the peek saw no state at all, so a clean address costs no write.
 */
export function guardAuthGate(
  authGate: Gate,
  authFailure: Limiter,
  clock: Clock,
  trusted: TrustedProxies = NO_TRUSTED_PROXIES,
): Gate {
  return async (ctx) => {
    if (ctx.access === 'public') return authGate(ctx);
    const identifier: Identifier = { ip: clientIp(ctx, trusted) };
    const before = await authFailure.peek(identifier, { cost: 0 });
    if (before.action === 'block')
      throw blocked(before, clock.wallMs(), 'Too many failed authentications from this address; retry later.');
    try {
      await authGate(ctx);
    } catch (err) {
      if ((err as { code?: unknown }).code === 'unauthorized') {
        const result = await authFailure.check(identifier);
        // Log the failure that starts a ban, not every failure during a (shadow) ban.
        const wasBanned = new Set(before.evaluations.filter((e) => e.result === 'banned').map((e) => e.rule.name));
        const banned = result.evaluations.filter((e) => e.result === 'banned' && !wasBanned.has(e.rule.name));
        if (banned.length > 0) {
          const shadow = banned.every((e) => e.rule.action === 'log');
          ctx.log.warn(
            {
              limiter: authFailure.name,
              rules: banned.map((e) => e.rule.name),
              ip: identifier.ip,
              shadow,
              code: 'rate_limited',
              retryAfterS: Math.max(1, Math.ceil(((result.info?.resetAtMs ?? clock.wallMs()) - clock.wallMs()) / 1000)),
            },
            shadow
              ? 'address would be banned after failed authentications (shadow rule)'
              : 'address banned after failed authentications',
          );
        }
      }
      throw err;
    }
    const hadState = before.evaluations.some((e) => e.result !== 'allow' || e.count > 0);
    if (ctx.principal && hadState) await authFailure.clear(identifier);
  };
}
