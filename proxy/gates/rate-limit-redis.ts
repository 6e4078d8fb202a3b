/**
 * The Redis client (single node or Cluster) that holds rate-limit counters and rule documents.
 */
import { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';
import { parseRedisTarget } from '../../policy/rate-limit/index.ts';

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
