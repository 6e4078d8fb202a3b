import path from 'node:path';
import type { Config, LogLevel, Role, S3Config } from './types.ts';
import type { VariableValues } from './variable-values.ts';
import { availableParallelism } from 'node:os';
import { workerCount, type WorkersSetting } from './worker-count.ts';
import type { SecretSource } from './secret-files.ts';

/**
 * The default ARKVORY_CACHE_MAX_FILES is one slice file per this many bytes of ARKVORY_CACHE_MAX_BYTES:
 * ext4's default bytes-per-inode, so a cache filling a filesystem of its own made with defaults
 * runs out of neither; with slices of 16 KiB or more (8 MiB by default) only the byte bound binds.
 */
const CACHE_BYTES_PER_FILE = 16384;

/** What the cross-variable checks derived (see cross-checks.ts). */
export interface Derived {
  shared: Config['shared'];
  advertiseUrl: string | undefined;
  s3: S3Config | undefined;
  trustedProxies: string[];
  routerBackends: string[] | undefined;
  publicUrl: string | undefined;
  bypassPublishers: string[];
  tls: Config['tls'];
  tracing: Config['tracing'];
  secretSources: Readonly<Record<string, SecretSource>>;
}

/** `url` with its password replaced (each URL of a comma-separated list). */
function withPassword(url: string | undefined, password: string | undefined): string | undefined {
  if (url === undefined || password === undefined) return url;
  return url
    .split(',')
    .map((one) => {
      const u = new URL(one.trim());
      u.password = password;
      return u.toString();
    })
    .join(',');
}

/** The Config of valid values: units converted (seconds → ms), paths resolved against `cwd`. */
export function buildConfig(v: VariableValues, derived: Derived, cwd: string): Config {
  const { shared, advertiseUrl, s3, trustedProxies, routerBackends, publicUrl, bypassPublishers } = derived;
  const maxDownloads = v.num('ARKVORY_MAX_DOWNLOADS');
  const config: Config = {
    role: v.str('ARKVORY_ROLE') as Role,
    host: v.str('ARKVORY_HOST'),
    port: v.num('ARKVORY_PORT'),
    dataDir: path.resolve(cwd, v.str('ARKVORY_DATA_DIR')),
    databaseUrl: withPassword(v.optStr('ARKVORY_DATABASE_URL'), v.optStr('ARKVORY_DATABASE_PASSWORD')),
    databasePoolSize: v.num('ARKVORY_DATABASE_POOL_SIZE'),
    databaseStartupWaitMs: v.num('ARKVORY_DATABASE_STARTUP_WAIT_SECONDS') * 1000,
    databaseQueryTimeoutMs: v.num('ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS'),
    databaseRequireLeastPrivilege: v.values.get('ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE') as boolean,
    redisUrl: withPassword(v.optStr('ARKVORY_REDIS_URL'), v.optStr('ARKVORY_REDIS_PASSWORD')),
    secretSources: derived.secretSources,
    logLevel: v.str('ARKVORY_LOG_LEVEL') as LogLevel,
    shutdownTimeoutMs: v.num('ARKVORY_SHUTDOWN_TIMEOUT_SECONDS') * 1000,
    frontDoor: {
      headersTimeoutMs: v.num('ARKVORY_HEADER_TIMEOUT_SECONDS') * 1000,
      bodyIdleTimeoutMs: v.num('ARKVORY_BODY_TIMEOUT_SECONDS') * 1000,
      sendIdleTimeoutMs: v.num('ARKVORY_SEND_TIMEOUT_SECONDS') * 1000,
      keepAliveTimeoutMs: v.num('ARKVORY_KEEPALIVE_TIMEOUT_SECONDS') * 1000,
      maxConnections: v.optNum('ARKVORY_MAX_CONNECTIONS'),
    },
    metrics: { token: v.optStr('ARKVORY_METRICS_TOKEN'), port: v.optNum('ARKVORY_METRICS_PORT') },
    maxUploadBytes: v.num('ARKVORY_MAX_UPLOAD_BYTES'),
    bandwidth: {
      downloadBytesPerSec: v.num('ARKVORY_DOWNLOAD_BYTES_PER_SECOND'),
      downloadBytesPerSecPerPrincipal: v.num('ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL'),
      uploadBytesPerSec: v.num('ARKVORY_UPLOAD_BYTES_PER_SECOND'),
      uploadBytesPerSecPerPrincipal: v.num('ARKVORY_UPLOAD_BYTES_PER_SECOND_PER_PRINCIPAL'),
    },
    admission: {
      maxDownloads,
      maxDownloadsPerPrincipal: v.optNum('ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL') ?? Math.min(4, maxDownloads),
      maxUploadsPerPrincipal: v.num('ARKVORY_MAX_UPLOADS_PER_PRINCIPAL'),
      queueLength: v.num('ARKVORY_ADMISSION_QUEUE_LENGTH'),
      waitMs: v.num('ARKVORY_ADMISSION_WAIT_SECONDS') * 1000,
    },
    rateLimitsFile: v.optStr('ARKVORY_RATE_LIMITS_FILE'),
    embeddedWorker: v.values.get('ARKVORY_EMBEDDED_WORKER') as boolean,
    workers: workerCount(
      v.values.get('ARKVORY_WORKERS') as WorkersSetting,
      v.str('ARKVORY_ROLE'),
      v.optStr('ARKVORY_DATABASE_URL') !== undefined,
      // The smaller of the CPU affinity and the cgroup CPU quota (libuv reads cpu.max).
      availableParallelism(),
      v.optNum('ARKVORY_MAX_CONNECTIONS'),
    ),
    uploadSessionTtlSeconds: v.num('ARKVORY_UPLOAD_SESSION_TTL_SECONDS'),
    consoleIdleTimeoutMs: v.num('ARKVORY_CONSOLE_IDLE_TIMEOUT_SECONDS') * 1000,
    auditRetentionDays: v.num('ARKVORY_AUDIT_RETENTION_DAYS'),
    usageStats: {
      enabled: v.values.get('ARKVORY_USAGE_STATS') as boolean,
      flushMs: v.num('ARKVORY_USAGE_STATS_FLUSH_SECONDS') * 1000,
    },
    multipart: {
      maxSessionsPerPrincipal: v.num('ARKVORY_MULTIPART_MAX_SESSIONS_PER_PRINCIPAL'),
      maxPendingBytesPerPrincipal: v.num('ARKVORY_MULTIPART_MAX_PENDING_BYTES_PER_PRINCIPAL'),
      maxPartsPerPrincipal: v.num('ARKVORY_MULTIPART_MAX_PARTS_PER_PRINCIPAL'),
    },
    presignMaxExpiresSeconds: v.num('ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS'),
    redisKeyPrefix: v.str('ARKVORY_REDIS_KEY_PREFIX'),
    rateLimitTimeoutMs: v.num('ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS'),
    rateLimitBypassPublishers: bypassPublishers,
    advertiseUrl,
    publicUrl,
    trustedProxies,
    banIpv6PrefixLength: v.num('ARKVORY_BAN_IPV6_PREFIX_LENGTH'),
    rateLimitIpv6PrefixLength: v.num('ARKVORY_RATE_LIMIT_IPV6_PREFIX_LENGTH'),
    router: {
      backends: routerBackends,
      probeIntervalMs: v.num('ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS'),
      connectTimeoutMs: v.num('ARKVORY_ROUTER_CONNECT_TIMEOUT_MILLISECONDS'),
      idleTimeoutMs: v.num('ARKVORY_ROUTER_IDLE_TIMEOUT_SECONDS') * 1000,
      outlier: {
        consecutive5xx: v.num('ARKVORY_ROUTER_OUTLIER_CONSECUTIVE_5XX'),
        baseEjectionMs: v.num('ARKVORY_ROUTER_OUTLIER_BASE_EJECTION_SECONDS') * 1000,
        maxEjectionPercent: v.num('ARKVORY_ROUTER_OUTLIER_MAX_EJECTION_PERCENT'),
      },
    },
    serviceName: v.str('ARKVORY_SERVICE_NAME'),
    rulesService: {
      url: v.optStr('ARKVORY_RULES_SERVICE_URL'),
      timeoutMs: v.num('ARKVORY_RULES_SERVICE_TIMEOUT_MS'),
      maxTtlMs: v.num('ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS') * 1000,
      token: v.optStr('ARKVORY_RULES_SERVICE_TOKEN'),
      ttlSeconds: v.num('ARKVORY_RULES_SERVICE_TTL_SECONDS'),
      tokenGraceMs: v.num('ARKVORY_RULES_SERVICE_TOKEN_GRACE_SECONDS') * 1000,
    },
    caches: {
      catalogEntries: v.num('ARKVORY_CATALOG_CACHE_ENTRIES'),
      catalogBytes: v.num('ARKVORY_CATALOG_CACHE_BYTES'),
      openFileEntries: v.num('ARKVORY_OPEN_FILE_CACHE_ENTRIES'),
      openFileIdleMs: v.num('ARKVORY_OPEN_FILE_CACHE_IDLE_SECONDS') * 1000,
      blobBytes: v.num('ARKVORY_BLOB_CACHE_BYTES'),
      blobMaxObjectBytes: v.num('ARKVORY_BLOB_CACHE_MAX_OBJECT_BYTES'),
    },
    sliceCache: {
      dir: (() => {
        const dir = v.optStr('ARKVORY_CACHE_DIR');
        return dir === undefined ? undefined : path.resolve(cwd, dir);
      })(),
      maxBytes: v.num('ARKVORY_CACHE_MAX_BYTES'),
      maxFiles:
        v.optNum('ARKVORY_CACHE_MAX_FILES') ?? Math.floor(v.num('ARKVORY_CACHE_MAX_BYTES') / CACHE_BYTES_PER_FILE),
      minFreeBytes: v.num('ARKVORY_CACHE_MIN_FREE_BYTES'),
      sliceBytes: v.num('ARKVORY_CACHE_SLICE_BYTES'),
      readaheadSlices: v.num('ARKVORY_CACHE_READAHEAD_SLICES'),
      maxMemoryBytes: v.num('ARKVORY_CACHE_MEMORY_MAX_BYTES'),
    },
    storage: {
      url: v.optStr('ARKVORY_STORAGE_URL'),
      connectTimeoutMs: v.num('ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS'),
      timeoutMs: v.num('ARKVORY_STORAGE_TIMEOUT_SECONDS') * 1000,
      probeIntervalMs: v.num('ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS'),
      s3,
    },
    tls: derived.tls,
    tracing: derived.tracing,
    traceContextFrom: v.str('ARKVORY_TRACE_CONTEXT_FROM') as Config['traceContextFrom'],
    outboundCaFile:
      v.optStr('ARKVORY_TLS_CA_FILE') === undefined ? undefined : path.resolve(cwd, v.str('ARKVORY_TLS_CA_FILE')),
    refusePlainHttpCredentials: v.values.get('ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS') as boolean,
    shared,
  };
  return config;
}
