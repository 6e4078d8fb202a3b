import path from 'node:path';
import { parseBackendList, parseOrigin } from '../router/backend-url.ts';
import { parseTrustedProxies } from '../router/forwarded.ts';
import { parseS3Url, type S3Location } from '../../storage-adapter/s3-location.ts';
import { parseRedisTarget } from '../../policy/rate-limit/redis-target.ts';
import { redactUserinfo } from '../server/redact-url.ts';

/**
 * Every ARKVORY_* variable, declared once. `loadConfig` validates against this table, the README
 * variable table is checked against it (test/contract), and so are the names used in `deploy/`.
 */
export type VariableKind =
  | { type: 'int'; min: number; max: number }
  | { type: 'enum'; values: readonly string[] }
  | { type: 'string' }
  | { type: 'url'; protocols: readonly string[] }
  /** One URL, or several comma-separated (Redis Cluster seed nodes). */
  | { type: 'url-list'; protocols: readonly string[] }
  | { type: 'bool' };

export interface VariableSpec {
  name: string;
  kind: VariableKind;
  /** Default as the operator would write it; undefined = unset (optional). */
  defaultValue?: string;
  secret?: boolean;
  /** A secret whose absence means "open": set but empty is refused rather than read as unset. */
  refuseEmpty?: boolean;
  doc: string;
}

const TiB = 2 ** 40;
const BYTES_PER_SECOND = { type: 'int', min: 0, max: TiB } as const;

export const VARIABLES: readonly VariableSpec[] = [
  {
    name: 'ARKVORY_ROLE',
    kind: { type: 'enum', values: ['api', 'reader', 'worker', 'router', 'rules-service'] },
    defaultValue: 'api',
    doc: 'Process role: `api` (the single writer), `reader`, `worker`, `router` or `rules-service` (the reference Phase 3 rules service, docs/rate-limits.md).',
  },
  {
    name: 'ARKVORY_HOST',
    kind: { type: 'string' },
    defaultValue: '127.0.0.1',
    doc: 'Address the HTTP server binds to.',
  },
  {
    name: 'ARKVORY_PORT',
    kind: { type: 'int', min: 0, max: 65535 },
    defaultValue: '8080',
    doc: 'HTTP port (0 picks a free port and logs it).',
  },
  {
    name: 'ARKVORY_DATA_DIR',
    kind: { type: 'string' },
    defaultValue: './data',
    doc: 'Storage root of the filesystem store; also holds the embedded PostgreSQL (`.pg`) and `admin.key`.',
  },
  {
    name: 'ARKVORY_DATABASE_URL',
    kind: { type: 'url', protocols: ['postgres:', 'postgresql:'] },
    secret: true,
    doc: 'PostgreSQL connection URL. Unset: an embedded PostgreSQL under `<DATA_DIR>/.pg` (standalone only).',
  },
  {
    name: 'ARKVORY_DATABASE_STARTUP_WAIT_SECONDS',
    kind: { type: 'int', min: 0, max: 3600 },
    defaultValue: '60',
    doc: 'How long startup keeps retrying an unreachable PostgreSQL (backoff 0.25 s doubling to 5 s, a warning per attempt) before it exits with code 1; 0 = give up at the first failure.',
  },
  {
    name: 'ARKVORY_DATABASE_POOL_SIZE',
    kind: { type: 'int', min: 1, max: 1000 },
    defaultValue: '10',
    doc: 'Size of the shared `pg` pool (the lease holds one connection more).',
  },
  {
    name: 'ARKVORY_REDIS_URL',
    kind: { type: 'url-list', protocols: ['redis:', 'rediss:'] },
    secret: true,
    doc: 'Redis URL for rate-limit counters; two or more comma-separated URLs are the seed nodes of a Redis Cluster (docs/rate-limits.md). Unset: counters in process memory (standalone only).',
  },
  {
    name: 'ARKVORY_LOG_LEVEL',
    kind: { type: 'enum', values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] },
    defaultValue: 'info',
    doc: 'pino log level.',
  },
  {
    name: 'ARKVORY_METRICS_TOKEN',
    kind: { type: 'string' },
    secret: true,
    refuseEmpty: true,
    doc: 'Bearer token `/metrics` on the main port requires (`Authorization: Bearer <token>`). Unset: `/metrics` on the main port is public. Set but empty: refused at start (an empty token would silently mean public). See docs/metrics.md.',
  },
  {
    name: 'ARKVORY_METRICS_PORT',
    kind: { type: 'int', min: 1, max: 65535 },
    doc: 'Serve `/metrics` on this port on 127.0.0.1 only, instead of the main port. Unset: `/metrics` on the main port.',
  },
  {
    name: 'ARKVORY_SHUTDOWN_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 0, max: 3600 },
    defaultValue: '30',
    doc: 'How long in-flight requests may run after SIGTERM/SIGINT before they are cut.',
  },
  {
    name: 'ARKVORY_HEADER_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '30',
    doc: 'Longest time a client may take to send a whole request head (nginx client_header_timeout); then 408 and the connection closes.',
  },
  {
    name: 'ARKVORY_BODY_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '60',
    doc: 'Longest silence inside a request body (nginx client_body_timeout); then 408 `request_timeout` if nothing was answered yet, the connection closes, the upload is dropped and its slot freed. Must exceed ARKVORY_ADMISSION_WAIT_SECONDS.',
  },
  {
    name: 'ARKVORY_SEND_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '60',
    doc: 'Longest time a client may take no response byte (nginx send_timeout); then the response is cut and its slot freed. Must exceed ARKVORY_ADMISSION_WAIT_SECONDS.',
  },
  {
    name: 'ARKVORY_KEEPALIVE_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '5',
    doc: 'How long an idle keep-alive connection stays open between requests (nginx keepalive_timeout).',
  },
  {
    name: 'ARKVORY_MAX_CONNECTIONS',
    kind: { type: 'int', min: 8, max: 1000000 },
    doc: 'Open client connections served normally; past it idle keep-alive connections are closed, then new ones get a fast 503 (health checks still answered). Unset: (descriptor limit − 96) / 2. Keep it below half the descriptor limit (`ulimit -n`, systemd `LimitNOFILE`).',
  },
  {
    name: 'ARKVORY_MAX_UPLOAD_BYTES',
    kind: { type: 'int', min: 1, max: 2 ** 50 },
    defaultValue: '10737418240',
    doc: 'Largest accepted upload body; larger → 413 `payload_too_large`.',
  },
  {
    name: 'ARKVORY_DOWNLOAD_BYTES_PER_SECOND',
    kind: BYTES_PER_SECOND,
    defaultValue: '0',
    doc: 'Process-wide download ceiling (0 = no ceiling). In the shared profile it can only lower the share.',
  },
  {
    name: 'ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL',
    kind: BYTES_PER_SECOND,
    defaultValue: '0',
    doc: 'Download ceiling per principal (0 = no ceiling).',
  },
  {
    name: 'ARKVORY_UPLOAD_BYTES_PER_SECOND',
    kind: BYTES_PER_SECOND,
    defaultValue: '0',
    doc: 'Process-wide upload ceiling (0 = no ceiling).',
  },
  {
    name: 'ARKVORY_UPLOAD_BYTES_PER_SECOND_PER_PRINCIPAL',
    kind: BYTES_PER_SECOND,
    defaultValue: '0',
    doc: 'Upload ceiling per principal (0 = no ceiling).',
  },
  {
    name: 'ARKVORY_MAX_DOWNLOADS',
    kind: { type: 'int', min: 1, max: 100000 },
    defaultValue: '256',
    doc: 'Process-wide cap on concurrent downloads.',
  },
  {
    name: 'ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL',
    kind: { type: 'int', min: 1, max: 100000 },
    doc: 'Concurrent downloads per principal. Default min(4, MAX_DOWNLOADS).',
  },
  {
    name: 'ARKVORY_MAX_UPLOADS_PER_PRINCIPAL',
    kind: { type: 'int', min: 1, max: 1000 },
    defaultValue: '1',
    doc: 'Concurrent mutating uploads per principal.',
  },
  {
    name: 'ARKVORY_ADMISSION_QUEUE_LENGTH',
    kind: { type: 'int', min: 0, max: 100000 },
    defaultValue: '64',
    doc: 'Requests that may wait for an admission slot per principal and direction; beyond → 429 `busy`.',
  },
  {
    name: 'ARKVORY_ADMISSION_WAIT_SECONDS',
    kind: { type: 'int', min: 0, max: 3600 },
    defaultValue: '30',
    doc: 'Longest wait for an admission slot; beyond → 429 `busy`.',
  },
  {
    name: 'ARKVORY_EMBEDDED_WORKER',
    kind: { type: 'bool' },
    defaultValue: '1',
    doc: 'Writer only: run the multipart completion worker inside the writer process (1) or leave it to a separate `ARKVORY_ROLE=worker` process (0).',
  },
  {
    name: 'ARKVORY_UPLOAD_SESSION_TTL_SECONDS',
    kind: { type: 'int', min: 60, max: 2592000 },
    defaultValue: '86400',
    doc: 'Multipart upload sessions expire this long after they start; their parts are then removed.',
  },
  {
    name: 'ARKVORY_RATE_LIMITS_FILE',
    kind: { type: 'string' },
    doc: 'YAML rate-limit rule file (the file tier). Unset: no file tier.',
  },
  {
    name: 'ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS',
    kind: { type: 'string' },
    doc: 'Comma-separated principal names allowed to publish bypass (`skip`) rate-limit rules through the admin API and the console (spec 2.1 guardrail). Unset: nobody; bypasses come only from the operator file or the CLI. Others get 403 `forbidden` naming the rule.',
  },
  {
    name: 'ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS',
    kind: { type: 'int', min: 1, max: 60000 },
    defaultValue: '250',
    doc: 'Longest a rate-limit check waits for Redis; slower (or Redis down) → the check fails open (allowed, counted, logged).',
  },
  {
    name: 'ARKVORY_REDIS_KEY_PREFIX',
    kind: { type: 'string' },
    defaultValue: 'arkvory:',
    doc: 'Prefix of every Redis key (rate-limit counters `<prefix>rl:…`, rule documents `<prefix>ratelimit:rules:…`); lets gateway groups share one Redis.',
  },
  {
    name: 'ARKVORY_GATEWAY_SLOTS',
    kind: { type: 'int', min: 2, max: 16 },
    doc: 'Shared profile: total gateways sharing the download budget (writer included). Unset: standalone.',
  },
  {
    name: 'ARKVORY_GATEWAY_SLOT',
    kind: { type: 'int', min: 0, max: 15 },
    doc: "Shared profile: this gateway's slot (writer 0, readers 1..SLOTS-1).",
  },
  {
    name: 'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND',
    kind: BYTES_PER_SECOND,
    doc: 'Shared profile: the global download budget, split floor(rate / SLOTS) per gateway.',
  },
  {
    name: 'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL',
    kind: BYTES_PER_SECOND,
    doc: 'Shared profile: global per-principal download budget (0 = off), split like the global one.',
  },
  {
    name: 'ARKVORY_ADVERTISE_URL',
    kind: { type: 'url', protocols: ['http:', 'https:'] },
    doc: 'Shared profile: the origin (`http://10.0.0.5:8080`, no path) at which routers reach this gateway; recorded with its lease. Unset: routers reading the leases skip this gateway.',
  },
  {
    name: 'ARKVORY_TRUSTED_PROXIES',
    kind: { type: 'string' },
    doc: 'Comma-separated IPs/CIDR blocks (routers, nginx, HAProxy) whose `X-Forwarded-For` is believed for the client address. Unset: the socket peer is the client.',
  },
  {
    name: 'ARKVORY_ROUTER_BACKENDS',
    kind: { type: 'string' },
    doc: 'Router: a static list of gateway origins, comma-separated, the writer first. Unset: discovered from the live leases (needs ARKVORY_DATABASE_URL).',
  },
  {
    name: 'ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS',
    kind: { type: 'int', min: 100, max: 60000 },
    defaultValue: '2000',
    doc: "Router: how often leases are read and every gateway's `/health/status` is probed; a failing gateway leaves the pool within 2 intervals.",
  },
  {
    name: 'ARKVORY_ROUTER_CONNECT_TIMEOUT_MILLISECONDS',
    kind: { type: 'int', min: 50, max: 60000 },
    defaultValue: '3000',
    doc: 'Router: longest wait for a TCP connection to a gateway; then 502 `upstream_unreachable` (GET/HEAD: one retry elsewhere).',
  },
  {
    name: 'ARKVORY_ROUTER_IDLE_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '120',
    doc: 'Router: longest silence on an upstream connection (no byte either way); before the response → 504 `upstream_timeout`, after → the response is cut.',
  },
  {
    name: 'ARKVORY_SERVICE_NAME',
    kind: { type: 'string' },
    defaultValue: 'arkvory',
    doc: "This gateway group's service name, sent with every rules-service query so rules for one service never reach another that shares a limiter name (`^[a-z0-9][a-z0-9_.-]{0,63}$`).",
  },
  {
    name: 'ARKVORY_RULES_SERVICE_URL',
    kind: { type: 'url', protocols: ['http:', 'https:'] },
    doc: 'Phase 3: base URL of an external rate-limit rules service whose per-identifier rules are evaluated before the local tiers (docs/rate-limits.md). Unset: local rules only.',
  },
  {
    name: 'ARKVORY_RULES_SERVICE_TIMEOUT_MS',
    kind: { type: 'int', min: 1, max: 60000 },
    defaultValue: '100',
    doc: 'Longest a rate-limit check waits for the rules service on a cache miss; slower, unreachable or invalid → the local rules apply (counted, logged).',
  },
  {
    name: 'ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS',
    kind: { type: 'int', min: 1, max: 86400 },
    defaultValue: '60',
    doc: 'Upper bound on how long a rules-service answer is cached (the service proposes `ttl_s`); worst-case propagation of a service-side change is this plus the timeout.',
  },
  {
    name: 'ARKVORY_RULES_SERVICE_TOKEN',
    kind: { type: 'string' },
    secret: true,
    refuseEmpty: true,
    doc: 'Shared bearer token for `POST /api/v1/rules/query`: the gateway sends it, the rules-service role requires it. Unset: the query route is open (bind the service to a private address). Set but empty: refused at start.',
  },
  {
    name: 'ARKVORY_RULES_SERVICE_TTL_SECONDS',
    kind: { type: 'int', min: 0, max: 86400 },
    defaultValue: '30',
    doc: 'Role rules-service: the `ttl_s` it answers, i.e. how long gateways may cache its rules (0 = do not cache).',
  },
  {
    name: 'ARKVORY_STORAGE_URL',
    kind: { type: 'url', protocols: ['http:', 'https:', 's3:'] },
    doc: 'Base URL of a static-HTTP store (e.g. nginx with WebDAV PUT/DELETE/MOVE on the storage host), or `s3://<bucket>/<optional prefix>` for an S3-compatible store, used instead of the directory store; `ARKVORY_DATA_DIR` then only holds the embedded PostgreSQL and `admin.key`. See docs/storage-and-content.md.',
  },
  {
    name: 'ARKVORY_S3_ENDPOINT',
    kind: { type: 'url', protocols: ['http:', 'https:'] },
    doc: 'S3 store: the S3 API origin (`http://10.0.0.30:8333`, path-style requests) of a non-AWS server (SeaweedFS, MinIO, Ceph RGW, Garage, R2). Unset: `https://s3.<region>.amazonaws.com`. Credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and optionally `AWS_SESSION_TOKEN`.',
  },
  {
    name: 'ARKVORY_S3_REGION',
    kind: { type: 'string' },
    defaultValue: 'us-east-1',
    doc: 'S3 store: the region requests are signed for (SigV4).',
  },
  {
    name: 'ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS',
    kind: { type: 'int', min: 50, max: 60000 },
    defaultValue: '3000',
    doc: 'Static-HTTP and S3 stores: longest wait for a TCP connection; then 504 `upstream_timeout` (refused → 502 `upstream_unreachable`).',
  },
  {
    name: 'ARKVORY_STORAGE_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '30',
    doc: 'Static-HTTP and S3 stores: longest wait for response headers and longest silence inside a body; before the first byte → 504 `upstream_timeout`, after → the response is cut.',
  },
  {
    name: 'ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS',
    kind: { type: 'int', min: 60, max: 31536000 },
    defaultValue: '604800',
    doc: 'Longest lifetime a pre-signed link may ask for (`POST …/presign`, `arkvory presign --expires`); longer → 400 `invalid_request`. See docs/clients.md.',
  },
  {
    name: 'ARKVORY_CATALOG_CACHE_ENTRIES',
    kind: { type: 'int', min: 0, max: 10_000_000 },
    defaultValue: '100000',
    doc: 'Catalog rows kept in memory so a hot read costs no database round trip (0 = no cache). A DELETE reaches every gateway within 2 s (docs/storage-and-content.md).',
  },
  {
    name: 'ARKVORY_CATALOG_CACHE_BYTES',
    kind: { type: 'int', min: 0, max: TiB },
    defaultValue: '67108864',
    doc: 'Upper bound on the memory the cached catalog rows take (estimated per row).',
  },
  {
    name: 'ARKVORY_OPEN_FILE_CACHE_ENTRIES',
    kind: { type: 'int', min: 0, max: 1_000_000 },
    defaultValue: '1024',
    doc: 'Directory store: blob file descriptors kept open for reuse (0 = open and close per request).',
  },
  {
    name: 'ARKVORY_OPEN_FILE_CACHE_IDLE_SECONDS',
    kind: { type: 'int', min: 1, max: 86400 },
    defaultValue: '60',
    doc: 'A cached blob descriptor unused this long is closed.',
  },
  {
    name: 'ARKVORY_BLOB_CACHE_BYTES',
    kind: { type: 'int', min: 0, max: TiB },
    defaultValue: '33554432',
    doc: 'Total bytes of small blobs kept in memory, checked against their sha256 when loaded (0 = no cache). Any store.',
  },
  {
    name: 'ARKVORY_BLOB_CACHE_MAX_OBJECT_BYTES',
    kind: { type: 'int', min: 0, max: 2 ** 30 },
    defaultValue: '262144',
    doc: 'Largest blob the small-blob cache holds.',
  },
];

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
  readonly uploadSessionTtlSeconds: number;
  readonly redisKeyPrefix: string;
  readonly rateLimitTimeoutMs: number;
  /** Principal names that may publish `skip` rules over HTTP (spec 2.1); empty = nobody. */
  readonly rateLimitBypassPublishers: readonly string[];
  /** Origin recorded with the lease for routers (shared profile). */
  readonly advertiseUrl: string | undefined;
  /** Validated ARKVORY_TRUSTED_PROXIES entries; compile with `createTrustedProxies`. */
  readonly trustedProxies: readonly string[];
  readonly router: {
    /** Static gateways, writer first; undefined = discovered from the leases. */
    readonly backends: readonly string[] | undefined;
    readonly probeIntervalMs: number;
    readonly connectTimeoutMs: number;
    readonly idleTimeoutMs: number;
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
  /** The static-HTTP or S3 store; undefined = the filesystem store under `dataDir`. */
  readonly storage: {
    readonly url: string | undefined;
    readonly connectTimeoutMs: number;
    readonly timeoutMs: number;
    /** Set when `url` is `s3://…`. */
    readonly s3: S3Config | undefined;
  };
  readonly shared: {
    readonly slots: number;
    readonly slot: number;
    readonly downloadBytesPerSec: number;
    readonly downloadBytesPerSecPerPrincipal: number;
  } | null;
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

export const CONFIG_ERROR_CODE = 'invalid_config' as const;

export class ConfigError extends Error {
  readonly code = CONFIG_ERROR_CODE;
  override readonly name = 'ConfigError';
  /** One line per problem: `ARKVORY_X: expected …, got "…"`. */
  readonly problems: readonly string[];
  constructor(problems: readonly string[], options?: { cause?: unknown }) {
    super(problems.join('\n'), options);
    this.problems = problems;
  }
}

/** Variables the test harness reads; they configure the tests, never a gateway. */
const IGNORED_PREFIXES = ['ARKVORY_TEST_'];

function describeKind(kind: VariableKind): string {
  switch (kind.type) {
    case 'int':
      return `an integer from ${kind.min} to ${kind.max}`;
    case 'enum':
      return `one of ${kind.values.join('|')}`;
    case 'string':
      return 'a non-empty string';
    case 'url':
      return `a URL with scheme ${kind.protocols.map((p) => p.replace(':', '://')).join(' or ')}`;
    case 'url-list':
      return `a URL with scheme ${kind.protocols.map((p) => p.replace(':', '://')).join(' or ')}, or a comma-separated list of them`;
    case 'bool':
      return '1/0/true/false';
  }
}

export function describeAllowed(spec: VariableSpec): string {
  return describeKind(spec.kind);
}

function parseValue(spec: VariableSpec, raw: string): { ok: true; value: string | number | boolean } | { ok: false } {
  const kind = spec.kind;
  switch (kind.type) {
    case 'int': {
      if (!/^(0|[1-9][0-9]*)$/.test(raw)) return { ok: false };
      const n = Number(raw);
      if (!Number.isSafeInteger(n) || n < kind.min || n > kind.max) return { ok: false };
      return { ok: true, value: n };
    }
    case 'enum':
      return kind.values.includes(raw) ? { ok: true, value: raw } : { ok: false };
    case 'string':
      return raw.length > 0 && !raw.includes('\0') ? { ok: true, value: raw } : { ok: false };
    case 'url': {
      try {
        const u = new URL(raw);
        return kind.protocols.includes(u.protocol) ? { ok: true, value: raw } : { ok: false };
      } catch {
        return { ok: false };
      }
    }
    case 'url-list': {
      for (const part of raw.split(',')) {
        try {
          if (!kind.protocols.includes(new URL(part.trim()).protocol)) return { ok: false };
        } catch {
          return { ok: false };
        }
      }
      return { ok: true, value: raw };
    }
    case 'bool':
      if (['1', 'true'].includes(raw)) return { ok: true, value: true };
      if (['0', 'false'].includes(raw)) return { ok: true, value: false };
      return { ok: false };
  }
}

/** A value as a problem line may show it: secrets not at all, URLs without their user info. */
function shown(spec: VariableSpec | undefined, raw: string): string {
  if (spec?.secret) return '<redacted>';
  return JSON.stringify(redactUserinfo(raw.length > 200 ? `${raw.slice(0, 200)}…` : raw));
}

/**
 * Parses and validates every ARKVORY_* variable once. All problems are collected and thrown
 * together as one ConfigError, in one pass: the cross-variable checks run even when another
 * variable is bad, skipping only those that depend on a variable that failed. No problem line
 * carries a secret or the user info of a URL. The result is deep-frozen.
 */
export function loadConfig(env: Readonly<Record<string, string | undefined>>, cwd = process.cwd()): Config {
  const problems: string[] = [];
  const known = new Map(VARIABLES.map((v) => [v.name, v]));
  for (const name of Object.keys(env)) {
    if (!name.startsWith('ARKVORY_') || IGNORED_PREFIXES.some((p) => name.startsWith(p))) continue;
    if (!known.has(name)) problems.push(`${name}: unknown variable (a typo?); see the README variable table`);
  }
  const values = new Map<string, string | number | boolean | undefined>();
  /** Variables whose own value is bad: checks that need them are skipped (already reported). */
  const failed = new Set<string>();
  for (const spec of VARIABLES) {
    const raw = env[spec.name];
    if (raw === '' && spec.refuseEmpty) {
      failed.add(spec.name);
      problems.push(
        `${spec.name}: set but empty; give a non-empty secret, or unset the variable to leave it open on purpose`,
      );
      continue;
    }
    const text = raw === undefined || raw === '' ? spec.defaultValue : raw;
    if (text === undefined) {
      values.set(spec.name, undefined);
      continue;
    }
    const parsed = parseValue(spec, text);
    if (parsed.ok) values.set(spec.name, parsed.value);
    else {
      failed.add(spec.name);
      problems.push(`${spec.name}: expected ${describeKind(spec.kind)}, got ${shown(spec, text)}`);
    }
  }
  const anyFailed = (...names: string[]) => names.some((n) => failed.has(n));
  const num = (name: string): number => values.get(name) as number;
  const optNum = (name: string): number | undefined => values.get(name) as number | undefined;
  const str = (name: string): string => values.get(name) as string;
  const optStr = (name: string): string | undefined => values.get(name) as string | undefined;

  let shared: Config['shared'] = null;
  const sharedFailed = anyFailed(
    'ARKVORY_ROLE',
    'ARKVORY_GATEWAY_SLOTS',
    'ARKVORY_GATEWAY_SLOT',
    'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND',
    'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL',
  );
  if (!sharedFailed) {
    const slots = optNum('ARKVORY_GATEWAY_SLOTS');
    const slot = optNum('ARKVORY_GATEWAY_SLOT');
    const sharedRate = optNum('ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND');
    const sharedPerPrincipal = optNum('ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL');
    const role = str('ARKVORY_ROLE');
    if (slots === undefined) {
      for (const name of [
        'ARKVORY_GATEWAY_SLOT',
        'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND',
        'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL',
      ]) {
        if (values.get(name) !== undefined)
          problems.push(
            `${name}: only valid with ARKVORY_GATEWAY_SLOTS (the shared profile); got ${shown(known.get(name), String(values.get(name)))}`,
          );
      }
      if (role === 'reader')
        problems.push(
          'ARKVORY_ROLE: "reader" needs the shared profile (set ARKVORY_GATEWAY_SLOTS, ARKVORY_GATEWAY_SLOT and ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND)',
        );
    } else {
      const minRate = slots * 65536;
      if (sharedRate === undefined)
        problems.push(
          `ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: required with ARKVORY_GATEWAY_SLOTS; expected an integer from ${minRate} to ${TiB}`,
        );
      else if (sharedRate < minRate)
        problems.push(
          `ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: expected an integer from ${minRate} (SLOTS × 65536) to ${TiB}, got "${sharedRate}"`,
        );
      if (sharedPerPrincipal !== undefined && sharedPerPrincipal !== 0 && sharedPerPrincipal < minRate)
        problems.push(
          `ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: expected 0 or an integer from ${minRate} (SLOTS × 65536) to ${TiB}, got "${sharedPerPrincipal}"`,
        );
      if (slot === undefined)
        problems.push(
          `ARKVORY_GATEWAY_SLOT: required with ARKVORY_GATEWAY_SLOTS; expected 0 for the writer or 1 to ${slots - 1} for a reader`,
        );
      else if (role === 'api' && slot !== 0)
        problems.push(`ARKVORY_GATEWAY_SLOT: the writer (ARKVORY_ROLE=api) is always slot 0, got "${slot}"`);
      else if (role === 'reader' && (slot < 1 || slot > slots - 1))
        problems.push(`ARKVORY_GATEWAY_SLOT: a reader takes a slot from 1 to ${slots - 1}, got "${slot}"`);
      if (sharedRate !== undefined && slot !== undefined) {
        shared = {
          slots,
          slot,
          downloadBytesPerSec: sharedRate,
          downloadBytesPerSecPerPrincipal: sharedPerPrincipal ?? 0,
        };
      }
    }
  }
  let advertiseUrl: string | undefined;
  let s3: S3Config | undefined;
  let trustedProxies: string[] = [];
  let routerBackends: string[] | undefined;
  {
    const role = failed.has('ARKVORY_ROLE') ? undefined : str('ARKVORY_ROLE');
    const advertise = optStr('ARKVORY_ADVERTISE_URL');
    if (advertise !== undefined) {
      const parsed = parseOrigin(advertise);
      if (!parsed.ok) problems.push(`ARKVORY_ADVERTISE_URL: ${parsed.problem}`);
      else if (sharedFailed)
        advertiseUrl = parsed.value; // whether it is shared is unknown: reported above
      else if (!shared)
        problems.push(
          'ARKVORY_ADVERTISE_URL: only recorded in the shared profile (set ARKVORY_GATEWAY_SLOTS); a standalone gateway is listed in ARKVORY_ROUTER_BACKENDS instead',
        );
      else advertiseUrl = parsed.value;
    }
    const storageUrl = optStr('ARKVORY_STORAGE_URL');
    if (storageUrl !== undefined) {
      const u = new URL(storageUrl);
      // The gateway sends no credentials to the store (restrict it by network), and a query or
      // fragment would be silently dropped from every object name.
      if (u.username || u.password)
        problems.push(
          'ARKVORY_STORAGE_URL: credentials in the URL are not supported; restrict the store to the gateways by network instead, got "<redacted>"',
        );
      else if (u.protocol === 's3:') {
        const parsed = parseS3Url(storageUrl);
        if (!parsed.ok) problems.push(`ARKVORY_STORAGE_URL: ${parsed.problem}`);
        const accessKeyId = env.AWS_ACCESS_KEY_ID;
        const secretAccessKey = env.AWS_SECRET_ACCESS_KEY;
        if (!accessKeyId)
          problems.push(
            'AWS_ACCESS_KEY_ID: required with an s3:// ARKVORY_STORAGE_URL (the S3 store signs every request)',
          );
        if (!secretAccessKey)
          problems.push(
            'AWS_SECRET_ACCESS_KEY: required with an s3:// ARKVORY_STORAGE_URL (the S3 store signs every request)',
          );
        const region = str('ARKVORY_S3_REGION');
        const endpoint = failed.has('ARKVORY_S3_ENDPOINT') ? undefined : optStr('ARKVORY_S3_ENDPOINT');
        // Requests go to `<origin>/<bucket>/<key>`: a path or query on the endpoint would be dropped.
        if (
          endpoint !== undefined &&
          (new URL(endpoint).pathname !== '/' || new URL(endpoint).search || new URL(endpoint).username)
        ) {
          problems.push(
            `ARKVORY_S3_ENDPOINT: expected an origin such as http://10.0.0.30:8333 (no path, query or credentials), got "${new URL(endpoint).origin}…"`,
          );
        }
        if (parsed.ok && accessKeyId && secretAccessKey) {
          s3 = {
            location: parsed.value,
            endpoint: optStr('ARKVORY_S3_ENDPOINT') ?? `https://s3.${region}.amazonaws.com`,
            region,
            credentials: { accessKeyId, secretAccessKey, sessionToken: env.AWS_SESSION_TOKEN || undefined },
          };
        }
      } else if (u.search || u.hash)
        problems.push(
          `ARKVORY_STORAGE_URL: expected a base URL without query or fragment (e.g. http://10.0.0.20:8081/arkvory/), got ${shown(undefined, storageUrl)}`,
        );
      else if (optStr('ARKVORY_S3_ENDPOINT') !== undefined)
        problems.push('ARKVORY_S3_ENDPOINT: only used with an s3:// ARKVORY_STORAGE_URL');
    } else if (optStr('ARKVORY_S3_ENDPOINT') !== undefined)
      problems.push('ARKVORY_S3_ENDPOINT: only used with an s3:// ARKVORY_STORAGE_URL');
    const redisUrl = optStr('ARKVORY_REDIS_URL');
    if (redisUrl !== undefined) {
      const parsed = parseRedisTarget(redisUrl);
      if (!parsed.ok) problems.push(`ARKVORY_REDIS_URL: ${parsed.problem}, got "<redacted>"`);
      // A brace in the prefix would become the hash tag of every key and put them all in one slot.
      else if (parsed.target.kind === 'cluster' && /[{}]/.test(str('ARKVORY_REDIS_KEY_PREFIX')))
        problems.push(
          `ARKVORY_REDIS_KEY_PREFIX: must not contain { or } with a Redis Cluster (keys carry their own hash tags), got ${JSON.stringify(str('ARKVORY_REDIS_KEY_PREFIX'))}`,
        );
    }
    const trusted = parseTrustedProxies(optStr('ARKVORY_TRUSTED_PROXIES'));
    if (trusted.ok) trustedProxies = trusted.value;
    else problems.push(`ARKVORY_TRUSTED_PROXIES: ${trusted.problem}`);
    const backends = optStr('ARKVORY_ROUTER_BACKENDS');
    if (backends !== undefined) {
      const parsed = parseBackendList(backends);
      if (role === undefined) {
        if (!parsed.ok) problems.push(`ARKVORY_ROUTER_BACKENDS: ${parsed.problem}`);
      } else if (role !== 'router')
        problems.push(`ARKVORY_ROUTER_BACKENDS: only valid with ARKVORY_ROLE=router, got role "${role}"`);
      else if (!parsed.ok) problems.push(`ARKVORY_ROUTER_BACKENDS: ${parsed.problem}`);
      else routerBackends = parsed.value;
    } else if (
      role === 'router' &&
      optStr('ARKVORY_DATABASE_URL') === undefined &&
      !failed.has('ARKVORY_DATABASE_URL')
    ) {
      problems.push(
        'ARKVORY_ROLE: "router" finds its gateways in the lease table (set ARKVORY_DATABASE_URL) or in a static list (set ARKVORY_ROUTER_BACKENDS)',
      );
    }
  }
  const bypassPublishers: string[] = [];
  {
    const raw = optStr('ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS');
    for (const name of raw === undefined ? [] : raw.split(',').map((n) => n.trim())) {
      if (!/^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$/.test(name))
        problems.push(
          `ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: expected comma-separated principal names, got ${shown(undefined, name)}`,
        );
      else if (!bypassPublishers.includes(name)) bypassPublishers.push(name);
    }
  }
  {
    const serviceName = str('ARKVORY_SERVICE_NAME');
    if (!failed.has('ARKVORY_SERVICE_NAME') && !/^[a-z0-9][a-z0-9_.-]{0,63}$/.test(serviceName))
      problems.push(`ARKVORY_SERVICE_NAME: expected ^[a-z0-9][a-z0-9_.-]{0,63}$, got ${JSON.stringify(serviceName)}`);
    if (
      str('ARKVORY_ROLE') === 'rules-service' &&
      optStr('ARKVORY_DATABASE_URL') === undefined &&
      !failed.has('ARKVORY_DATABASE_URL')
    )
      problems.push('ARKVORY_ROLE: "rules-service" keeps its overrides in PostgreSQL; set ARKVORY_DATABASE_URL');
  }
  if (problems.length === 0) {
    // A request waiting for its slot moves no byte: the idle timeouts must outlast that wait.
    const wait = num('ARKVORY_ADMISSION_WAIT_SECONDS');
    for (const name of ['ARKVORY_BODY_TIMEOUT_SECONDS', 'ARKVORY_SEND_TIMEOUT_SECONDS']) {
      if (num(name) <= wait)
        problems.push(
          `${name}: expected more than ARKVORY_ADMISSION_WAIT_SECONDS (${wait}), or a queued request is cut before its slot comes; got "${num(name)}"`,
        );
    }
  }
  // Belt and braces: whatever a helper echoed, no problem line carries a URL's user info.
  if (problems.length > 0) throw new ConfigError(problems.map(redactUserinfo));

  const maxDownloads = num('ARKVORY_MAX_DOWNLOADS');
  const config: Config = {
    role: str('ARKVORY_ROLE') as Role,
    host: str('ARKVORY_HOST'),
    port: num('ARKVORY_PORT'),
    dataDir: path.resolve(cwd, str('ARKVORY_DATA_DIR')),
    databaseUrl: optStr('ARKVORY_DATABASE_URL'),
    databasePoolSize: num('ARKVORY_DATABASE_POOL_SIZE'),
    databaseStartupWaitMs: num('ARKVORY_DATABASE_STARTUP_WAIT_SECONDS') * 1000,
    redisUrl: optStr('ARKVORY_REDIS_URL'),
    logLevel: str('ARKVORY_LOG_LEVEL') as LogLevel,
    shutdownTimeoutMs: num('ARKVORY_SHUTDOWN_TIMEOUT_SECONDS') * 1000,
    frontDoor: {
      headersTimeoutMs: num('ARKVORY_HEADER_TIMEOUT_SECONDS') * 1000,
      bodyIdleTimeoutMs: num('ARKVORY_BODY_TIMEOUT_SECONDS') * 1000,
      sendIdleTimeoutMs: num('ARKVORY_SEND_TIMEOUT_SECONDS') * 1000,
      keepAliveTimeoutMs: num('ARKVORY_KEEPALIVE_TIMEOUT_SECONDS') * 1000,
      maxConnections: optNum('ARKVORY_MAX_CONNECTIONS'),
    },
    metrics: { token: optStr('ARKVORY_METRICS_TOKEN'), port: optNum('ARKVORY_METRICS_PORT') },
    maxUploadBytes: num('ARKVORY_MAX_UPLOAD_BYTES'),
    bandwidth: {
      downloadBytesPerSec: num('ARKVORY_DOWNLOAD_BYTES_PER_SECOND'),
      downloadBytesPerSecPerPrincipal: num('ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL'),
      uploadBytesPerSec: num('ARKVORY_UPLOAD_BYTES_PER_SECOND'),
      uploadBytesPerSecPerPrincipal: num('ARKVORY_UPLOAD_BYTES_PER_SECOND_PER_PRINCIPAL'),
    },
    admission: {
      maxDownloads,
      maxDownloadsPerPrincipal: optNum('ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL') ?? Math.min(4, maxDownloads),
      maxUploadsPerPrincipal: num('ARKVORY_MAX_UPLOADS_PER_PRINCIPAL'),
      queueLength: num('ARKVORY_ADMISSION_QUEUE_LENGTH'),
      waitMs: num('ARKVORY_ADMISSION_WAIT_SECONDS') * 1000,
    },
    rateLimitsFile: optStr('ARKVORY_RATE_LIMITS_FILE'),
    embeddedWorker: values.get('ARKVORY_EMBEDDED_WORKER') as boolean,
    uploadSessionTtlSeconds: num('ARKVORY_UPLOAD_SESSION_TTL_SECONDS'),
    presignMaxExpiresSeconds: num('ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS'),
    redisKeyPrefix: str('ARKVORY_REDIS_KEY_PREFIX'),
    rateLimitTimeoutMs: num('ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS'),
    rateLimitBypassPublishers: bypassPublishers,
    advertiseUrl,
    trustedProxies,
    router: {
      backends: routerBackends,
      probeIntervalMs: num('ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS'),
      connectTimeoutMs: num('ARKVORY_ROUTER_CONNECT_TIMEOUT_MILLISECONDS'),
      idleTimeoutMs: num('ARKVORY_ROUTER_IDLE_TIMEOUT_SECONDS') * 1000,
    },
    serviceName: str('ARKVORY_SERVICE_NAME'),
    rulesService: {
      url: optStr('ARKVORY_RULES_SERVICE_URL'),
      timeoutMs: num('ARKVORY_RULES_SERVICE_TIMEOUT_MS'),
      maxTtlMs: num('ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS') * 1000,
      token: optStr('ARKVORY_RULES_SERVICE_TOKEN'),
      ttlSeconds: num('ARKVORY_RULES_SERVICE_TTL_SECONDS'),
    },
    caches: {
      catalogEntries: num('ARKVORY_CATALOG_CACHE_ENTRIES'),
      catalogBytes: num('ARKVORY_CATALOG_CACHE_BYTES'),
      openFileEntries: num('ARKVORY_OPEN_FILE_CACHE_ENTRIES'),
      openFileIdleMs: num('ARKVORY_OPEN_FILE_CACHE_IDLE_SECONDS') * 1000,
      blobBytes: num('ARKVORY_BLOB_CACHE_BYTES'),
      blobMaxObjectBytes: num('ARKVORY_BLOB_CACHE_MAX_OBJECT_BYTES'),
    },
    storage: {
      url: optStr('ARKVORY_STORAGE_URL'),
      connectTimeoutMs: num('ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS'),
      timeoutMs: num('ARKVORY_STORAGE_TIMEOUT_SECONDS') * 1000,
      s3,
    },
    shared,
  };
  return deepFreeze(config);
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}
