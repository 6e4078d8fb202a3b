import type { SecretSource } from './secret-files.ts';
import type { S3Location } from '../../storage-adapter/s3/index.ts';

export type Role = 'api' | 'reader' | 'worker' | 'router' | 'rules-service';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface Config {
  readonly role: Role;
  readonly host: string;
  readonly port: number;
  readonly dataDir: string;
  readonly databaseUrl: string | undefined;
  readonly databasePoolSize: number;
  /** Startup retries an unreachable PostgreSQL this long, then exits 1. */
  readonly databaseStartupWaitMs: number;
  /** Longest wait of the gateway's request-path statements for an answer, and for a connection. */
  readonly databaseQueryTimeoutMs: number;
  /** Refuse a superuser or schema-owner login instead of warning. */
  readonly databaseRequireLeastPrivilege: boolean;
  /** Where each secret came from (env, file or unset), by the variable it fills; never a value. */
  readonly secretSources: Readonly<Record<string, SecretSource>>;
  readonly redisUrl: string | undefined;
  readonly logLevel: LogLevel;
  readonly shutdownTimeoutMs: number;
  /** Timeouts and the connection bound of the HTTP front door (proxy/server/front-door.ts). */
  readonly frontDoor: {
    readonly headersTimeoutMs: number;
    readonly bodyIdleTimeoutMs: number;
    readonly sendIdleTimeoutMs: number;
    readonly keepAliveTimeoutMs: number;
    readonly maxConnections: number | undefined;
  };
  readonly metrics: {
    /** Bearer token for `/metrics` on the main port; undefined = public. */
    readonly token: string | undefined;
    /** A loopback-only port for `/metrics`; undefined = on the main port. */
    readonly port: number | undefined;
  };
  readonly maxUploadBytes: number;
  readonly bandwidth: {
    readonly downloadBytesPerSec: number;
    readonly downloadBytesPerSecPerPrincipal: number;
    readonly uploadBytesPerSec: number;
    readonly uploadBytesPerSecPerPrincipal: number;
  };
  readonly admission: {
    readonly maxDownloads: number;
    readonly maxDownloadsPerPrincipal: number;
    readonly maxUploadsPerPrincipal: number;
    readonly queueLength: number;
    readonly waitMs: number;
  };
  readonly rateLimitsFile: string | undefined;
  readonly embeddedWorker: boolean;
  /** ARKVORY_WORKERS: the processes serving this instance's port (proxy/workers/). */
  readonly workers: number;
  readonly uploadSessionTtlSeconds: number;
  /** ARKVORY_CONSOLE_IDLE_TIMEOUT_SECONDS: a console session without an operator's action this long ends. */
  readonly consoleIdleTimeoutMs: number;
  /** Audit trail events older than this many days are pruned by the writer (proxy/audit/). */
  readonly auditRetentionDays: number;
  /** Usage statistics (proxy/stats/): counted in memory, flushed every `flushMs`. */
  readonly usageStats: { readonly enabled: boolean; readonly flushMs: number };
  /** Per-principal bounds on multipart sessions (storage-adapter/multipart/sessions.ts). */
  readonly multipart: {
    readonly maxSessionsPerPrincipal: number;
    readonly maxPendingBytesPerPrincipal: number;
    readonly maxPartsPerPrincipal: number;
  };
  readonly redisKeyPrefix: string;
  readonly rateLimitTimeoutMs: number;
  /** Principal names that may publish `skip` rules over HTTP (spec 2.1); empty = nobody. */
  readonly rateLimitBypassPublishers: readonly string[];
  /** Origin recorded with the lease for routers (shared profile). */
  readonly advertiseUrl: string | undefined;
  /** ARKVORY_PUBLIC_URL as `parsePublicUrl` gives it (origin and path, no trailing slash); undefined: from each request. */
  readonly publicUrl: string | undefined;
  /** Validated ARKVORY_TRUSTED_PROXIES entries; compile with `createTrustedProxies`. */
  readonly trustedProxies: readonly string[];
  /** ARKVORY_BAN_IPV6_PREFIX_LENGTH: the IPv6 prefix an `auth_failure` ban covers. */
  readonly banIpv6PrefixLength: number;
  /** ARKVORY_RATE_LIMIT_IPV6_PREFIX_LENGTH: the IPv6 prefix the `ip` of request and transfer rate limits is. */
  readonly rateLimitIpv6PrefixLength: number;
  readonly router: {
    /** Static gateways, writer first; undefined = discovered from the leases. */
    readonly backends: readonly string[] | undefined;
    readonly probeIntervalMs: number;
    readonly connectTimeoutMs: number;
    readonly idleTimeoutMs: number;
    /** Outlier detection on reads (docs/router.md, "Outlier detection"); consecutive5xx 0 = off. */
    readonly outlier: {
      readonly consecutive5xx: number;
      readonly baseEjectionMs: number;
      readonly maxEjectionPercent: number;
    };
  };
  /** This gateway group's name in rules-service queries (spec 3.1). */
  readonly serviceName: string;
  readonly rulesService: {
    /** Base URL of the Phase 3 rules service; undefined = local rules only. */
    readonly url: string | undefined;
    readonly timeoutMs: number;
    readonly maxTtlMs: number;
    readonly token: string | undefined;
    /** Role rules-service: the TTL it answers. */
    readonly ttlSeconds: number;
    /** Role rules-service: how long a rotated-out token is still accepted. */
    readonly tokenGraceMs: number;
  };
  /** Longest lifetime of a pre-signed link, seconds. */
  readonly presignMaxExpiresSeconds: number;
  /** In-process caches of the read path (docs/storage-and-content.md, "Caches"). */
  readonly caches: {
    readonly catalogEntries: number;
    readonly catalogBytes: number;
    readonly openFileEntries: number;
    readonly openFileIdleMs: number;
    readonly blobBytes: number;
    readonly blobMaxObjectBytes: number;
  };
  /** The slice cache in front of a static-HTTP or S3 store (docs/storage-and-content.md, "Cache"). */
  readonly sliceCache: {
    /** Undefined: no cache. */
    readonly dir: string | undefined;
    readonly maxBytes: number;
    /** Slice files (each an inode, however small); by default one per 16 KiB of `maxBytes`. */
    readonly maxFiles: number;
    readonly minFreeBytes: number;
    /** The slice size publish and scrub record digests with. */
    readonly sliceBytes: number;
    readonly readaheadSlices: number;
    /** Bytes of slices held in memory (fills), per process: ARKVORY_CACHE_MEMORY_MAX_BYTES. */
    readonly maxMemoryBytes: number;
  };
  /** The static-HTTP or S3 store; undefined = the filesystem store under `dataDir`. */
  readonly storage: {
    readonly url: string | undefined;
    readonly connectTimeoutMs: number;
    readonly timeoutMs: number;
    /** How often the gateway probes its store (docs/router.md, "Store health"). */
    readonly probeIntervalMs: number;
    /** Set when `url` is `s3://…`. */
    readonly s3: S3Config | undefined;
  };
  /** The listener's certificate (docs/tls.md); undefined = plain HTTP. */
  readonly tls:
    | {
        readonly certFile: string;
        readonly keyFile: string;
        readonly clientCaFile: string | undefined;
        readonly clientCert: 'off' | 'optional' | 'require';
        /** The Strict-Transport-Security value every answer carries (ARKVORY_TLS_HSTS); undefined = none. */
        readonly hsts: string | undefined;
      }
    | undefined;
  /** OpenTelemetry tracing (OTEL_* variables, docs/tracing.md); undefined = off. */
  readonly tracing: TracingConfig | undefined;
  /**
   * Whose `traceparent`/`tracestate` a request may continue; a router with tracing off passes on
   * only those it would continue (docs/tracing.md).
   */
  readonly traceContextFrom: 'any' | 'trusted-proxies' | 'none';
  /** Extra CAs trusted for every outgoing TLS connection (ARKVORY_TLS_CA_FILE). */
  readonly outboundCaFile: string | undefined;
  /** A gateway refuses credentials over plain HTTP from non-loopback peers (403 `tls_required`). */
  readonly refusePlainHttpCredentials: boolean;
  readonly shared: {
    readonly slots: number;
    readonly slot: number;
    readonly downloadBytesPerSec: number;
    readonly downloadBytesPerSecPerPrincipal: number;
  } | null;
}

/** Where spans go and which are kept (docs/tracing.md). */
export interface TracingConfig {
  /** The OTLP/HTTP URL spans are posted to. */
  readonly url: string;
  /** Sent with every export (a collector token): a secret, never logged. */
  readonly headers: Readonly<Record<string, string>>;
  readonly exportTimeoutMs: number;
  readonly serviceName: string;
  readonly resourceAttributes: Readonly<Record<string, string>>;
  readonly sampler:
    | 'always_on'
    | 'always_off'
    | 'traceidratio'
    | 'parentbased_always_on'
    | 'parentbased_always_off'
    | 'parentbased_traceidratio';
  readonly samplerRatio: number;
  readonly scheduleDelayMs: number;
  readonly batchTimeoutMs: number;
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  /** `enduser.id` on server spans. */
  readonly recordPrincipal: boolean;
}

/** The S3 store's location and credentials (from the standard AWS_* variables; never logged). */
export interface S3Config {
  readonly location: S3Location;
  readonly endpoint: string;
  readonly region: string;
  readonly credentials: {
    readonly accessKeyId: string;
    readonly secretAccessKey: string;
    readonly sessionToken: string | undefined;
  };
}
