/**
 * Every ARKVORY_* variable (and the OTEL_* ones tracing takes), declared once. `loadConfig` validates against this table, the README
 * variable table is checked against it (test/contract), and so are the names used in `deploy/`.
 */
export type VariableKind =
  /** With `auto`, the word `auto` is also taken (the value is then decided at start, see its doc). */
  | { type: 'int'; min: number; max: number; auto?: true }
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
  /** A secret callers are checked against: an example's placeholder (placeholder-secrets.ts) is refused. */
  refusePlaceholder?: boolean;
  doc: string;
}

import { TLS_VARIABLES } from './tls-variables.ts';
import { TRACING_VARIABLES } from './tracing-variables.ts';
import { SECRET_FILE_VARIABLES } from './secret-files.ts';

export const TiB = 2 ** 40;
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
    doc: 'PostgreSQL connection URL. Unset: an embedded PostgreSQL under `<DATA_DIR>/.pg` (standalone only). TLS: `sslmode=verify-full`; a mode that does not verify the certificate (`no-verify`, or libpq’s with `uselibpqcompat=true`) is refused (docs/tls.md). `require_auth=scram-sha-256` (libpq’s parameter, also `!password` and other methods) makes every connection refuse a server that asks for the password in clear text or for none; the embedded PostgreSQL’s connections always carry it.',
  },
  {
    name: 'ARKVORY_DATABASE_PASSWORD',
    kind: { type: 'string' },
    secret: true,
    doc: 'PostgreSQL password, replacing the one in ARKVORY_DATABASE_URL (so the URL itself holds none). Usually given as `ARKVORY_DATABASE_PASSWORD_FILE`.',
  },
  {
    name: 'ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE',
    kind: { type: 'bool' },
    defaultValue: '0',
    doc: "Refuse to start (exit 1) when the database login is a superuser, owns the schema or holds privileges on the schema's objects beyond its role's, instead of warning (`arkvory_database_login_privileged`, `arkvory doctor`); a rotated URL or password naming such a login is not taken. A login missing a grant its role needs is refused either way, naming the grant. See docs/deploy.md.",
  },
  {
    name: 'ARKVORY_DATABASE_STARTUP_WAIT_SECONDS',
    kind: { type: 'int', min: 0, max: 3600 },
    defaultValue: '60',
    doc: 'How long a gateway or the rules service keeps retrying an unreachable PostgreSQL at startup (backoff 0.25 s doubling to 5 s, a warning per attempt; SIGTERM meanwhile exits 0) before it exits with code 1; 0 = give up at the first failure.',
  },
  {
    name: 'ARKVORY_DATABASE_POOL_SIZE',
    kind: { type: 'int', min: 1, max: 1000 },
    defaultValue: '10',
    doc: 'Size of the shared `pg` pool (the lease holds one connection more).',
  },
  {
    name: 'ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS',
    kind: { type: 'int', min: 100, max: 600000 },
    defaultValue: '5000',
    doc: 'Longest a request’s statement (gateways and the rules service) waits for PostgreSQL’s answer, and for a pool connection (a hung server, a link that drops packets): past it the request answers 503 `unavailable` with `Retry-After: 1` and the connection is closed, not reused (docs/deploy.md, “When PostgreSQL hangs”). Usage flushes, audit rows and audit retention keep their own bounds; migrations, backup, restore, gc and the other commands have none.',
  },
  {
    name: 'ARKVORY_REDIS_URL',
    kind: { type: 'url-list', protocols: ['redis:', 'rediss:'] },
    secret: true,
    doc: 'Redis URL for rate-limit counters; two or more comma-separated URLs are the seed nodes of a Redis Cluster (docs/rate-limits.md). Unset: counters in process memory (standalone only).',
  },
  {
    name: 'ARKVORY_REDIS_PASSWORD',
    kind: { type: 'string' },
    secret: true,
    doc: 'Redis password (of the ACL user named in ARKVORY_REDIS_URL, or `default`), replacing any in the URL. Usually given as `ARKVORY_REDIS_PASSWORD_FILE`.',
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
    refusePlaceholder: true,
    doc: "Bearer token `/metrics` on the main port requires (`Authorization: Bearer <token>`). Unset: `/metrics` on the main port is public. Set but empty: refused at start (an empty token would silently mean public). An example's placeholder (`change-me…`, `changeme…`, `replace-with…`, `replace-me…`, `<…>`) is refused at start too: anyone who read the example could send it. See docs/metrics.md.",
  },
  {
    name: 'ARKVORY_METRICS_PORT',
    kind: { type: 'int', min: 1, max: 65535 },
    doc: "Serve `/metrics` on this port on 127.0.0.1 only, instead of the main port. Unset: `/metrics` on the main port. Router: its own metrics are served only here (the main port proxies `/metrics` to the writer). Rules service: its listener's metrics (connections, the served certificate) are served only here (docs/metrics.md).",
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
    doc: "Longest silence inside a request body (nginx client_body_timeout); then 408 `request_timeout` if nothing was answered yet, the connection closes, the upload is dropped and its slot freed. A wait for the bandwidth governors (the gateway pacing the upload) is not the client's silence and does not count. Must exceed ARKVORY_ADMISSION_WAIT_SECONDS.",
  },
  {
    name: 'ARKVORY_SEND_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '60',
    doc: "Longest time a client may take no response byte (nginx send_timeout); then the response is cut and its slot freed. A wait for the bandwidth governors (the gateway pacing the download) is not the client's silence and does not count. Must exceed ARKVORY_ADMISSION_WAIT_SECONDS.",
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
    doc: "Open client connections served normally; past it idle keep-alive connections are closed, then the oldest that have not sent a request yet, then new ones get a fast 503 (health checks still answered). Unset: the largest bound whose descriptors fit each process's limit (`ulimit -n`, systemd `LimitNOFILE`): 2 per connection + 32 + 64 reserved, + the TLS handshakes in progress (bound / 8, at least 16) on a TLS listener; (limit − 96) / 2 on plain HTTP. Set, it is the instance's: with `ARKVORY_WORKERS` N, each worker serves floor(bound / N), so it must be at least N; a bound whose share needs more descriptors than the limit refuses the start (exit 2, naming the largest that fits). The start logs the bounds chosen (`front door: …`).",
  },
  {
    name: 'ARKVORY_MAX_UPLOAD_BYTES',
    kind: { type: 'int', min: 1, max: 2 ** 50 },
    defaultValue: '10737418240',
    doc: 'Largest accepted upload body; larger → 413 `payload_too_large`. Also bounds a multipart upload as a whole: a part that takes its parts past it, or a completion of more → 413 `upload_too_large`. With an s3:// store at most 53687091200000 (one S3 multipart upload: 10 000 parts of 5 GiB); there a body of unknown length (chunked) goes up in parts of max(8 MiB, this ÷ 10 000), one part in memory at a time.',
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
    name: 'ARKVORY_WORKERS',
    kind: { type: 'int', min: 1, max: 256, auto: true },
    defaultValue: '1',
    doc: 'Worker processes serving the port of this one instance (docs/architecture.md, "Workers"); its limits, bans and counters stay those of one gateway. Above 1: role `api` or `reader` (standalone or shared profile) with ARKVORY_DATABASE_URL, or `router`. `auto`: one per core this process may use (`os.availableParallelism()`: its CPU affinity and cgroup quota) for those, 1 for the others and with the embedded PostgreSQL. Workers pay off for large bodies; small requests cost more CPU with them (docs/deploy.md, "Workers").',
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
    name: 'ARKVORY_CONSOLE_IDLE_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 28800 },
    defaultValue: '1800',
    doc: 'Writer only: a console session ends after this long without an operator action (a change, a read the operator asked for, a page load); the page polling its views does not count (docs/console.md). Sessions end after 8 hours whatever this says.',
  },
  {
    name: 'ARKVORY_AUDIT_RETENTION_DAYS',
    kind: { type: 'int', min: 1, max: 36500 },
    defaultValue: '365',
    doc: 'Writer only: audit trail events older than this are pruned (hourly); docs/observability.md.',
  },
  {
    name: 'ARKVORY_USAGE_STATS',
    kind: { type: 'bool' },
    defaultValue: '1',
    doc: 'Writer and readers: count downloads per artifact and requests and bytes per principal and day in memory and add them to the database in batches (docs/observability.md); 0 = off.',
  },
  {
    name: 'ARKVORY_USAGE_STATS_FLUSH_SECONDS',
    kind: { type: 'int', min: 1, max: 300 },
    defaultValue: '10',
    doc: 'How often a gateway adds its usage counts to the database; a crash loses at most this long of counts.',
  },
  {
    name: 'ARKVORY_MULTIPART_MAX_SESSIONS_PER_PRINCIPAL',
    kind: { type: 'int', min: 1, max: 100000 },
    defaultValue: '64',
    doc: 'Multipart sessions one principal may hold open or completing, counted until they are ended and their parts removed (past their expiry too); one more → 429 `too_many_uploads`.',
  },
  {
    name: 'ARKVORY_MULTIPART_MAX_PENDING_BYTES_PER_PRINCIPAL',
    kind: { type: 'int', min: 1, max: 2 ** 50 },
    defaultValue: '21474836480',
    doc: 'Part bytes one principal may have stored in sessions not yet assembled (open or completing); a part past it → 413 `upload_quota_exceeded`. A multipart upload larger than this cannot be completed.',
  },
  {
    name: 'ARKVORY_MULTIPART_MAX_PARTS_PER_PRINCIPAL',
    kind: { type: 'int', min: 1, max: 1000000000 },
    defaultValue: '20000',
    doc: 'Parts (each a file or object on the store, however small) one principal may hold in sessions not yet assembled (open or completing); one more → 429 `too_many_parts`, before its body. A part number sent again replaces its part and is not one more. The default holds two uploads of 10 000 parts (the most S3 allows in one) at once.',
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
    doc: 'Longest a rate-limit check waits for Redis (without Redis, for the coordinating process of an instance with `ARKVORY_WORKERS`); slower (or Redis down) → the check fails open (allowed, counted, logged), or 503 `rate_limit_unavailable` when an applicable rule says `on_store_error: deny`.',
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
    name: 'ARKVORY_PUBLIC_URL',
    kind: { type: 'url', protocols: ['http:', 'https:'] },
    doc: "Where clients reach the gateways (`https://tools.example.com`, or with the path a proxy publishes them under, `https://tools.example.com/arkvory`; no user info, query or fragment): the origin and path prefix of pre-signed links' `url`, of multipart session URLs (`url`, `Location`, `contentUrl`: the prefix) and of the console's redirect and cookie path (the prefix), whatever a request's Host, `X-Forwarded-Host` or `X-Forwarded-Prefix` says. Unset: from each request: its Host (over HTTP/2 `:authority`), or a trusted proxy's `X-Forwarded-Host` (else its `Forwarded` `host=`), its scheme (ARKVORY_TRUSTED_PROXIES) and a trusted proxy's `X-Forwarded-Prefix`. Set it wherever clients may reach a gateway with a Host of their choosing (docs/clients.md, \"Pre-signed links\").",
  },
  {
    name: 'ARKVORY_TRUSTED_PROXIES',
    kind: { type: 'string' },
    doc: "Comma-separated IPs/CIDR blocks (routers, nginx, HAProxy) whose `X-Forwarded-For` (or, from a proxy that sends only `Forwarded`, its `for=` nodes) is believed for the client address, and whose word on the client's scheme counts (the last `X-Forwarded-Proto` entry, else its own `Forwarded` element's `proto=`: the console cookie's `Secure`, pre-signed links' origin, ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS, the server spans' `url.scheme`; anyone else's is ignored), and whose `traceparent` sampled flag tracing follows (a router's sampling decision; docs/tracing.md), or `none`. Unset: nobody, in every role; loopback is not trusted by itself (any local process, a port-forward or a TCP tunnel connects from there), so a router, nginx or HAProxy on the gateway's own host is listed too (`127.0.0.1,::1`). A gateway warns once per untrusted peer that sends forwarding headers, and `arkvory doctor` reports it (docs/router.md).",
  },
  {
    name: 'ARKVORY_BAN_IPV6_PREFIX_LENGTH',
    kind: { type: 'int', min: 1, max: 128 },
    defaultValue: '64',
    doc: 'How much of an IPv6 client address the `auth_failure` ban is keyed by (one host usually owns a whole /64); 128 = the exact address. IPv4 addresses are keyed whole, IPv4-mapped ones and those a NAT64/SIIT translator names in 64:ff9b::/96 too.',
  },
  {
    name: 'ARKVORY_RATE_LIMIT_IPV6_PREFIX_LENGTH',
    kind: { type: 'int', min: 1, max: 128 },
    defaultValue: '64',
    doc: 'How much of an IPv6 client address the `ip` of the `gateway_request` and `transfer_bytes` rate limits is (`2001:db8:1:2::/64`: one host usually owns a whole /64 and could otherwise walk through 2^64 addresses past every per-address limit); 128 = the exact address. IPv4 addresses, IPv4-mapped IPv6 ones and those a NAT64/SIIT translator names in 64:ff9b::/96 too, are keyed whole. Logs and the audit keep the full address.',
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
    doc: 'Router: longest wait for a TCP connection to a gateway; then 502 `gateway_unreachable` (GET/HEAD: one retry elsewhere).',
  },
  {
    name: 'ARKVORY_ROUTER_IDLE_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '120',
    doc: 'Router: longest silence on an upstream connection (no byte either way), checked by a sweep every quarter of it (at most 1 s): cut never earlier and at most two sweeps later (docs/router.md); before the response → 504 `gateway_timeout`, after → the response is cut. A silence the client holds (its upload body still to come, or an answer it has not taken) does not count: ARKVORY_BODY_TIMEOUT_SECONDS and ARKVORY_SEND_TIMEOUT_SECONDS apply to it.',
  },
  {
    name: 'ARKVORY_ROUTER_OUTLIER_CONSECUTIVE_5XX',
    kind: { type: 'int', min: 0, max: 1000 },
    defaultValue: '5',
    doc: 'Router: failures of its own in a row on reads (no answer, or a 502/503/504 another gateway did not give for the same read) after which a gateway is ejected from reads for a backoff period, before its probe notices (docs/router.md, "Outlier detection"); 0 = off.',
  },
  {
    name: 'ARKVORY_ROUTER_OUTLIER_BASE_EJECTION_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '30',
    doc: "Router: an ejection lasts this times the gateway's recent ejections (at most 10 times this).",
  },
  {
    name: 'ARKVORY_ROUTER_OUTLIER_MAX_EJECTION_PERCENT',
    kind: { type: 'int', min: 0, max: 100 },
    defaultValue: '50',
    doc: 'Router: most gateways ejected at once, in percent of the known ones (rounded down, at least one while two or more are known, never all).',
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
    refusePlaceholder: true,
    doc: "Shared bearer token for `POST /api/v1/rules/query`: the gateway sends it, the rules-service role requires it. Unset: the query route is open (bind the service to a private address). Set but empty, or an example's placeholder (`change-me…`, `replace-with…`, `<…>`, as for ARKVORY_METRICS_TOKEN): refused at start.",
  },
  {
    name: 'ARKVORY_RULES_SERVICE_TOKEN_GRACE_SECONDS',
    kind: { type: 'int', min: 0, max: 86400 },
    defaultValue: '600',
    doc: 'Role rules-service: after its token rotates (`ARKVORY_RULES_SERVICE_TOKEN_FILE` changed), how long the previous token is still accepted, so gateways can be given the new one in the meantime. 0: the old token stops at once.',
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
    name: 'ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS',
    kind: { type: 'int', min: 100, max: 60000 },
    defaultValue: '2000',
    doc: 'How often a gateway probes its store (directory: the mount and `storage-id`; static HTTP and S3: a GET of `storage-id`), each probe bounded by 0.9 interval of the gateway’s running time (the time its timers fire late is not counted); the state (`ok`, `degraded`, `unreachable`) is in `/health/status` and routers stop sending reads to a gateway whose store is unreachable (docs/router.md, "Store health").',
  },
  {
    name: 'ARKVORY_STORAGE_TIMEOUT_SECONDS',
    kind: { type: 'int', min: 1, max: 3600 },
    defaultValue: '30',
    doc: 'Static-HTTP and S3 stores: longest wait for response headers, longest silence inside a body, longest time a store takes no byte of an upload, and longest a small answer read whole (an error, a listing, `storage-id`) takes to arrive (and a small blob read whole for the blob cache, or a small answer waiting for its slice check, before it goes on uncached or unchecked: docs/storage-and-content.md); before the first byte → 504 `upstream_timeout`, after → the response is cut.',
  },
  {
    name: 'ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS',
    kind: { type: 'int', min: 60, max: 31536000 },
    defaultValue: '604800',
    doc: 'Longest lifetime a pre-signed link may ask for (`POST …/presign`, `arkvory presign --expires`); longer → 400 `invalid_request`. Checked again on every use: a link made for longer than the current value, or with more than it left (60 s clock slack), is 401 `unauthorized` like an expired one, so lowering it shortens links already issued. See docs/clients.md.',
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
    doc: 'A cached blob descriptor unused this long is closed; every half of it, descriptors of blob files an upload has since replaced are dropped.',
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
  {
    name: 'ARKVORY_CACHE_DIR',
    kind: { type: 'string' },
    doc: 'Static-HTTP and S3 stores: a local directory for the slice cache (verified slices of blobs on disk; unset = no cache). With `ARKVORY_WORKERS` N above 1 each worker keeps its own part in `w0/` … `w<N-1>/` under it (a slice read through two workers may be kept by both), and at start the instance removes what another layout or worker count left there. Deleting it while the gateway is stopped is a cold start. One instance per directory, enforced: each bounds and evicts only its own slices and clears the rest of its layout at start, so an instance holds `instance.lock` in the directory from its start until it stops (a lock the kernel drops when the process dies, even by SIGKILL: a crash never blocks the restart), and a second instance given the same directory refuses to start with exit code 1 and code `cache_dir_in_use` naming the holding process, touching nothing there; a directory holding other things and nothing of a slice cache (only empty ones, a filesystem holding only `lost+found`, or its own are taken) is refused the same way, code `cache_dir_not_a_cache`; the workers of one instance use it under the hold of their coordinating process, and workers a killed coordinating process left draining hold off the next start until they exit. The shipped systemd units give the writer and each reader their own under /var/cache/arkvory. See docs/storage-and-content.md, "Cache".',
  },
  {
    name: 'ARKVORY_CACHE_MAX_BYTES',
    kind: { type: 'int', min: 1048576, max: 1024 * TiB },
    defaultValue: '10737418240',
    doc: "Upper bound on the disk the slice cache's slices take (each counted in whole 4 KiB blocks); least recently used slices are evicted first. It is the instance's: with `ARKVORY_WORKERS` N, each worker keeps at most floor(bound / N).",
  },
  {
    name: 'ARKVORY_CACHE_MAX_FILES',
    kind: { type: 'int', min: 1, max: 2 ** 32 },
    doc: "Upper bound on the slice cache's files (slices held plus being written): a slice of a few bytes still takes an inode, which ARKVORY_CACHE_MAX_BYTES does not see; least recently used slices are evicted first. Default: ARKVORY_CACHE_MAX_BYTES / 16384 (ext4's default of one inode per 16 KiB), so it binds only when the average slice is smaller than 16 KiB. It is the instance's: with `ARKVORY_WORKERS` N, each worker keeps at most floor(bound / N) files.",
  },
  {
    name: 'ARKVORY_CACHE_MIN_FREE_BYTES',
    kind: { type: 'int', min: 0, max: 1024 * TiB },
    defaultValue: '1073741824',
    doc: 'Free space the slice cache leaves on its filesystem: it evicts, or relays from the store without keeping, rather than go below it.',
  },
  {
    name: 'ARKVORY_CACHE_SLICE_BYTES',
    kind: { type: 'int', min: 65536, max: 268435456 },
    defaultValue: '8388608',
    doc: 'Slice size new blobs are digested with at publish (and by scrub for older blobs); the cache fetches and verifies a blob in slices of the size recorded for it.',
  },
  {
    name: 'ARKVORY_CACHE_MEMORY_MAX_BYTES',
    kind: { type: 'int', min: 1048576, max: 1024 * TiB },
    defaultValue: '335544320',
    doc: 'Upper bound on the bytes of slices the slice cache holds in memory, per process (each worker its own): slices being fetched, waiting for the disk, or sent from memory because they cannot be kept (the cache\'s disk full, below `ARKVORY_CACHE_MIN_FREE_BYTES`, failing writes), which a slow client holds while it reads them. Default 320 MiB, eight download windows at the default slice size and readahead. Past it a download reads without readahead and waits for room up to `ARKVORY_STORAGE_TIMEOUT_SECONDS`, then is answered 503 `slice_cache_memory_full` with `Retry-After` (before its status line) or cut (mid-response); slices on disk and slices other downloads are fetching cost nothing and are always served. See docs/storage-and-content.md, "Cache".',
  },
  {
    name: 'ARKVORY_CACHE_READAHEAD_SLICES',
    kind: { type: 'int', min: 0, max: 64 },
    defaultValue: '4',
    doc: 'Slices a read of several slices fetches ahead from the store on a miss (the window); the missing ones come with one ranged GET, and the window is topped up once fewer than half of it are left.',
  },
  ...TLS_VARIABLES,
  ...TRACING_VARIABLES,
  ...SECRET_FILE_VARIABLES.map(
    ({ file, fills, what, rotates }): VariableSpec => ({
      name: file,
      kind: { type: 'string' },
      doc: `A file holding ${what} (\`${fills}\`), ${rotates ? 'read at start and again on SIGHUP and when the file changes (a new value is used for new connections and requests once it checks out; a bad one is refused, the old one kept, `arkvory_secret_rotation_failures_total`)' : 'read at start only (restart after changing it)'}; it must be readable by the service user only (mode 0400/0600), else the start is refused. Not together with \`${fills}\`. See docs/deploy.md, "Rotation runbook".`,
    }),
  ),
];
