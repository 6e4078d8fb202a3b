/**
 * The Redis client (single node or Cluster) that holds rate-limit counters and rule documents, and
 * the rotation of its credentials (a verifier, and the client taking them for its next connections).
 */
import { createRequire } from 'node:module';
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';
import type { SecretVerifier } from '../config/secret-rotation.ts';
import { parseRedisTarget } from '../../policy/rate-limit/index.ts';

// ioredis (CommonJS) is required on first use, synchronously: a gateway without Redis (the
// embedded default keeps counters in memory) never loads it, about a tenth of a start's CPU.
const requireHere = createRequire(import.meta.url);
const ioredis = () => requireHere('ioredis') as typeof import('ioredis');

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
      ? new (ioredis().Redis)(target.url, {
          ...perConnection,
          lazyConnect: true,
          enableOfflineQueue: false,
          enableAutoPipelining: true,
          retryStrategy: (times) => Math.min(100 * times, 2000),
        })
      : new (ioredis().Cluster)([...target.nodes], {
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

/**
 * ARKVORY_REDIS_URL without its credentials, per seed: what a rotation may not change. Moving to
 * another Redis (host, port, scheme, database) would strand the counters and rule documents of the
 * old one mid-run, so only the user and password rotate; the rest needs a restart.
 */
function redisTargetOf(url: string): string {
  return url
    .split(',')
    .map((one) => {
      const u = new URL(one.trim());
      u.username = '';
      u.password = '';
      return u.toString();
    })
    .join(',');
}

/** The ACL user and password a URL names (`default` when it names no user). */
function credentialsOf(url: string): { username: string | undefined; password: string | undefined } {
  const first = new URL(url.split(',')[0]!.trim());
  return {
    username: first.username ? decodeURIComponent(first.username) : undefined,
    password: first.password ? decodeURIComponent(first.password) : undefined,
  };
}

/**
 * Checks a rotated Redis password (or a URL file whose credentials changed) before the client uses
 * it: a connection of its own, with the client's TLS, sends AUTH with the new user and password and
 * quits. The connection is made without credentials and AUTH sent explicitly, so a refused password
 * is an error even where the `default` user needs none. A cluster is checked on the first seed that
 * answers (its nodes share one ACL, as ioredis assumes).
 */
export function redisCredentialsVerifier(startUrl: string | undefined, timeoutMs = 5000): SecretVerifier {
  const startTarget = startUrl === undefined ? undefined : redisTargetOf(startUrl);
  return {
    what: 'Redis',
    variables: ['ARKVORY_REDIS_URL', 'ARKVORY_REDIS_PASSWORD'],
    changed: (current, next) => current.redisUrl !== next.redisUrl,
    async verify(next) {
      if (next.redisUrl === undefined) return;
      const parsed = parseRedisTarget(next.redisUrl);
      if (!parsed.ok) throw new Error(parsed.problem);
      if (redisTargetOf(next.redisUrl) !== startTarget)
        throw new Error(
          'the new URL names another Redis (host, port, scheme or database); only its credentials rotate, moving needs a restart',
        );
      const { username, password } = credentialsOf(next.redisUrl);
      const { target } = parsed;
      const seeds =
        target.kind === 'single'
          ? [redisTargetOf(target.url)]
          : target.nodes.map((n) => ({ host: n.host, port: n.port, ...(target.tls ? { tls: {} } : {}) }));
      let unreachable: Error | undefined;
      for (const seed of seeds) {
        const options = {
          lazyConnect: true,
          connectTimeout: timeoutMs,
          commandTimeout: timeoutMs,
          maxRetriesPerRequest: 0,
          retryStrategy: () => null,
          enableReadyCheck: false,
          // RESP2: no HELLO before the AUTH below (HELLO would need the credentials it checks).
          protocol: 2 as const,
          disableClientInfo: true,
          connectionName: 'arkvory-rotation',
        };
        const { Redis } = ioredis();
        const client = typeof seed === 'string' ? new Redis(seed, options) : new Redis({ ...seed, ...options });
        client.on('error', () => {});
        try {
          try {
            await client.connect();
          } catch (err) {
            unreachable = err as Error;
            continue;
          }
          if (password === undefined) await client.ping();
          else await client.call('AUTH', username ?? 'default', password);
          await client.quit();
          return;
        } finally {
          client.disconnect();
        }
      }
      throw new Error(`no Redis answered (${unreachable?.message ?? 'no seed'})`);
    },
  };
}

/**
 * Makes the client log in with `url`'s user and password from its next connection or reconnection
 * on; open connections stay as they are (Redis keeps a connection authenticated when its user's
 * passwords change). ioredis reads `options` on each connect; a cluster keeps a copy of its node
 * options in its connection pool and one per node client, so all three take the new credentials.
 */
export function useRedisCredentials(redis: RateLimitRedis, url: string): void {
  const { username, password } = credentialsOf(url);
  const take = (options: { username?: string | undefined; password?: string | undefined }) => {
    options.username = username;
    options.password = password;
  };
  if (redis instanceof ioredis().Redis) {
    take(redis.options);
    return;
  }
  redis.options.redisOptions ??= {};
  take(redis.options.redisOptions);
  // Not public in ioredis's types: the options new node clients are made with (ConnectionPool).
  const pool = (redis as unknown as { connectionPool?: { redisOptions?: Record<string, unknown> } }).connectionPool;
  if (pool?.redisOptions) take(pool.redisOptions);
  for (const node of redis.nodes('all')) take(node.options);
}
