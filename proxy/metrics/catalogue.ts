/**
 * Every metric family the gateway exports, declared once: each source's `register…Metrics` uses it,
 * docs/metrics.md lists it, and the metrics test checks that a live `/metrics` matches it.
 * Labels never carry a principal id, key, path or file name: routes are templates.
 */
import {
  METRIC_NAMES as RATE_LIMIT_METRIC_NAMES,
  RULES_SERVICE_HELP,
  RULES_SERVICE_METRIC,
} from '../../policy/rate-limit/metrics.ts';

export type MetricType = 'counter' | 'gauge' | 'histogram';

export interface MetricSpec {
  readonly name: string;
  readonly type: MetricType;
  readonly labels: readonly string[];
  readonly help: string;
}

/** Request latency buckets in seconds: from a cached HEAD to a long paced download. */
export const REQUEST_SECONDS_BUCKETS = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
] as const;
/** Lease renewal latency buckets in seconds; the permit lasts 8 s from the request start. */
export const RENEWAL_SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8] as const;

export const GATEWAY_METRICS = [
  {
    name: 'arkvory_http_requests_total',
    type: 'counter',
    labels: ['method', 'route', 'status'],
    help: 'Finished HTTP requests by method, route template and status, each answer counted once whatever answered it (503 `unmatched`: the front door refused it over the connection bound or while draining; 499: the client went away before any answer).',
  },
  {
    name: 'arkvory_http_request_duration_seconds',
    type: 'histogram',
    labels: ['method', 'route', 'status'],
    help: 'Time from the request head to the end of the response, by method, route template and status.',
  },
  {
    name: 'arkvory_http_bytes_total',
    type: 'counter',
    labels: ['direction'],
    help: "Bytes per direction, in (received) or out (sent): over HTTP/1.1 on the wire, request and response heads included; over HTTP/2 the streams' body bytes (header blocks and frames are their connection's).",
  },
  {
    name: 'arkvory_http_client_faults_total',
    type: 'counter',
    labels: ['code'],
    help: 'Client faults by error code: 4xx answers to requests no principal accounts for (no key or a bad one, a malformed request, a banned address) and such clients gone (client_aborted), and the answers given before a request existed (a head the HTTP parser refused: invalid_request, or unauthorized for bad bytes in Authorization; a head past its timeout: request_timeout; an unmet Expect: expectation_failed; CONNECT: connect_refused), which arkvory_http_requests_total does not count; every one is counted, their log lines are bounded (5 a minute per code).',
  },
  {
    name: 'arkvory_http_open_connections',
    type: 'gauge',
    labels: [],
    help: 'Client connections open now (proxy/server/front-door.ts).',
  },
  {
    name: 'arkvory_http_max_connections',
    type: 'gauge',
    labels: [],
    help: 'The bound on open client connections (ARKVORY_MAX_CONNECTIONS, or derived so that it, the handshakes in progress and a reserve fit within the descriptor limit).',
  },
  {
    name: 'arkvory_http_max_pending_handshakes',
    type: 'gauge',
    labels: [],
    help: 'The bound on TLS handshakes in progress (an eighth of the connection bound, at least 16); 0 on plain HTTP.',
  },
  {
    name: 'arkvory_http_connections_refused_total',
    type: 'counter',
    labels: [],
    help: 'Connections past the bound: answered 503 (health checks excepted) or closed at once.',
  },
  {
    name: 'arkvory_http_idle_connections_closed_total',
    type: 'counter',
    labels: [],
    help: 'Idle connections closed to make room for new ones at the bound: kept-alive ones between requests, then ones that have not sent a request yet (oldest first).',
  },
  {
    name: 'arkvory_http_client_timeouts_total',
    type: 'counter',
    labels: ['phase'],
    help: 'Connections closed because the client idled past ARKVORY_BODY_TIMEOUT_SECONDS (phase body) or ARKVORY_SEND_TIMEOUT_SECONDS (phase send).',
  },
  {
    name: 'arkvory_http2_open_sessions',
    type: 'gauge',
    labels: [],
    help: 'HTTP/2 connections (sessions) open now on the TLS listener; each is also one of arkvory_http_open_connections.',
  },
  {
    name: 'arkvory_http2_open_streams',
    type: 'gauge',
    labels: [],
    help: 'HTTP/2 streams (requests in progress) open now, over all sessions.',
  },
  {
    name: 'arkvory_http2_sessions_total',
    type: 'counter',
    labels: [],
    help: 'HTTP/2 sessions opened since start.',
  },
  {
    name: 'arkvory_http2_streams_total',
    type: 'counter',
    labels: [],
    help: 'HTTP/2 streams opened since start (one per request).',
  },
  {
    name: 'arkvory_http2_goaway_sent_total',
    type: 'counter',
    labels: ['reason'],
    help: 'GOAWAY frames the front door sent, by reason: idle (no stream within the head or keep-alive timeout), drain (shutdown), ping_flood, settings_flood, rapid_reset (a client over its frame budget: ENHANCE_YOUR_CALM).',
  },
  {
    name: 'arkvory_http2_stream_resets_sent_total',
    type: 'counter',
    labels: ['reason'],
    help: 'RST_STREAM frames the front door sent, by reason: send_timeout (CANCEL: the client took no byte in time), body_timeout (the request body stalled: NO_ERROR after a 408, or CANCEL when the answer had begun or its 408 was not taken), early_answer (NO_ERROR: answered before the body was read), malformed (PROTOCOL_ERROR: a malformed request, DATA past its content-length, reset alone rather than with its connection).',
  },
  {
    name: 'arkvory_http2_stream_resets_received_total',
    type: 'counter',
    labels: [],
    help: 'Streams a client ended with RST_STREAM before their answer ended, whatever the code (a cancelled download, or a rapid-reset attack).',
  },
  {
    name: 'arkvory_http2_send_budget_waits_total',
    type: 'counter',
    labels: [],
    help: "HTTP/2 answers that waited for their connection's send budget: a new stream's handler while 32 answers are in progress there (fewer while bytes are queued), a streamed body's next chunk while 1 MiB is queued toward the client (a client asking faster than it reads, or not reading at all).",
  },
  {
    name: 'arkvory_http2_send_budget_waiting',
    type: 'gauge',
    labels: [],
    help: "HTTP/2 answers waiting now for their connection's send budget, over all sessions.",
  },
  {
    name: 'arkvory_http2_session_errors_total',
    type: 'counter',
    labels: [],
    help: 'HTTP/2 sessions node:http2 ended for a protocol error of the client (malformed or invalid frames, a header list past its bound, unacknowledged PING or SETTINGS floods, too many refused streams).',
  },
  {
    name: 'arkvory_tls_certificate_expiry_timestamp_seconds',
    type: 'gauge',
    labels: ['serial'],
    help: 'Expiry (notAfter, Unix seconds) of the certificate served to new TLS handshakes, by its serial; no series without TLS. Alert on it days ahead.',
  },
  {
    name: 'arkvory_tls_reload_failures_total',
    type: 'counter',
    labels: [],
    help: 'Certificate reloads rejected (unreadable file, key not matching, expired): the previous pair is still served (docs/tls.md).',
  },
  {
    name: 'arkvory_bandwidth_granted_bytes_total',
    type: 'counter',
    labels: ['direction'],
    help: 'Bytes the bandwidth governor granted (granted is not yet delivered).',
  },
  {
    name: 'arkvory_bandwidth_granted_quanta_total',
    type: 'counter',
    labels: ['direction'],
    help: 'Quanta (grants of at most one quantum) the bandwidth governor gave.',
  },
  {
    name: 'arkvory_bandwidth_waited_quanta_total',
    type: 'counter',
    labels: ['direction'],
    help: 'Takes that had to wait for tokens before their grant, refusal or cancellation.',
  },
  {
    name: 'arkvory_bandwidth_late_dropped_bytes_total',
    type: 'counter',
    labels: ['direction'],
    help: 'Ceiling lost because the governor woke later than due while a take waited (event-loop lag, CPU starvation): bytes its full bucket could not hold.',
  },
  {
    name: 'arkvory_bandwidth_waiting_quanta',
    type: 'gauge',
    labels: ['direction'],
    help: 'Takes waiting for tokens now.',
  },
  {
    name: 'arkvory_bandwidth_rejected_total',
    type: 'counter',
    labels: ['direction'],
    help: 'Takes and meters the governor refused with busy (waiting bound or principal table full).',
  },
  {
    name: 'arkvory_bandwidth_unanswered_total',
    type: 'counter',
    labels: ['direction'],
    help: 'Paced takes a worker failed because its coordinating process did not answer a check within 2 s while they waited (stopped, stuck; ARKVORY_WORKERS above 1): each one stream answered 503 `unavailable` before its head or cut after it; 0 on a gateway of one process.',
  },
  {
    name: 'arkvory_bandwidth_limit_bytes_per_second',
    type: 'gauge',
    labels: ['direction', 'scope'],
    help: 'The enforced ceiling (scope process or principal); 0 = no ceiling.',
  },
  {
    name: 'arkvory_workers',
    type: 'gauge',
    labels: ['state'],
    help: 'Processes serving this instance by state (starting, serving, draining): its ARKVORY_WORKERS workers, or 1 for a gateway of one process.',
  },
  {
    name: 'arkvory_worker_restarts_total',
    type: 'counter',
    labels: [],
    help: 'Workers of this instance replaced after their process died (ARKVORY_WORKERS above 1).',
  },
  {
    name: 'arkvory_workers_unanswered',
    type: 'gauge',
    labels: [],
    help: 'Workers whose families this scrape lacks: they did not answer the coordinating process within 2 s (stopped, hung or just died; ARKVORY_WORKERS above 1); 0 when every worker is in it.',
  },
  {
    name: 'arkvory_admission_active',
    type: 'gauge',
    labels: ['kind'],
    help: 'Transfers holding an admission slot now (kind download or upload).',
  },
  {
    name: 'arkvory_admission_queued',
    type: 'gauge',
    labels: ['kind'],
    help: 'Requests waiting for an admission slot now.',
  },
  {
    name: 'arkvory_admission_lent_ready',
    type: 'gauge',
    labels: ['kind'],
    help: 'Admission slots the coordinating process lent its workers beside their admissions that they hold unused now, ready for the same principal; counted in no transfer, given back when a request cannot be admitted at once or after a second unused (ARKVORY_WORKERS above 1; 0 on a gateway of one process).',
  },
  {
    name: 'arkvory_admission_rejected_total',
    type: 'counter',
    labels: ['kind'],
    help: 'Requests refused with 429 busy (queue full or waited too long).',
  },
  {
    name: 'arkvory_lease_state',
    type: 'gauge',
    labels: ['state'],
    help: "This gateway's lease state: 1 for the current one of standalone, held, lapsed, fenced.",
  },
  {
    name: 'arkvory_store_state',
    type: 'gauge',
    labels: ['state'],
    help: "This gateway's artifact store as its probe and its store calls see it: 1 for the current one of ok, degraded, unreachable.",
  },
  {
    name: 'arkvory_store_failures_total',
    type: 'counter',
    labels: ['source'],
    help: "Store failures seen, by source: probe (the periodic storage-id read) or request (a store call of a client request; not an upload whose request body failed, the client's fault).",
  },
  {
    name: 'arkvory_lease_renewals_total',
    type: 'counter',
    labels: ['outcome'],
    help: 'Lease renewal attempts by outcome: confirmed, rejected (no row matched) or failed (query error).',
  },
  {
    name: 'arkvory_lease_renewal_duration_seconds',
    type: 'histogram',
    labels: [],
    help: 'Duration of lease renewal round trips, any outcome.',
  },
  {
    name: 'arkvory_lease_fencing_events_total',
    type: 'counter',
    labels: [],
    help: 'Times this process fenced itself (lease or database ownership lost); at most 1 per process.',
  },
  {
    name: 'arkvory_storage_uploads_total',
    type: 'counter',
    labels: ['outcome'],
    help: 'Upload stagings by outcome: committed (put under their blob name: published, or the same bytes again under their name, in place of what is there), discarded (a conflict, or refused by a storage quota), failed (aborted: client gone, too large, digest mismatch, disk full).',
  },
  {
    name: 'arkvory_cache_hits_total',
    type: 'counter',
    labels: ['cache'],
    help: 'Read-path cache lookups answered from memory, by cache: catalog, open_file or blob.',
  },
  {
    name: 'arkvory_cache_misses_total',
    type: 'counter',
    labels: ['cache'],
    help: 'Read-path cache lookups that went to the database or the store, by cache.',
  },
  { name: 'arkvory_cache_entries', type: 'gauge', labels: ['cache'], help: 'Entries a read-path cache holds now.' },
  {
    name: 'arkvory_cache_bytes',
    type: 'gauge',
    labels: ['cache'],
    help: 'Bytes a read-path cache holds now (catalog: estimated row memory; open_file: sizes of the files held open; blob: blob bytes; slice: bytes of slices on disk).',
  },
  {
    name: 'arkvory_slice_cache_requests_total',
    type: 'counter',
    labels: ['result'],
    help: 'Blob reads through the slice cache (static-HTTP and S3 stores with `ARKVORY_CACHE_DIR`) by `result`: `hit` (every slice from disk), `miss` (at least one slice fetched from the store), `bypass` (no slice digests recorded for the blob yet: relayed uncached).',
  },
  {
    name: 'arkvory_slice_cache_bytes_total',
    type: 'counter',
    labels: ['source'],
    help: 'Response bytes the slice cache handed out by `source`: `hit` (from a verified slice on disk), `miss` (from a fill in progress).',
  },
  {
    name: 'arkvory_slice_cache_origin_bytes_total',
    type: 'counter',
    labels: [],
    help: 'Slice bytes the cache fetched from the store (ranged GETs of whole slices).',
  },
  {
    name: 'arkvory_slice_cache_fills_in_flight',
    type: 'gauge',
    labels: [],
    help: 'Slices being fetched from the store now.',
  },
  {
    name: 'arkvory_slice_cache_waiters',
    type: 'gauge',
    labels: [],
    help: 'Readers now streaming from a fill another reader started (one origin fetch per slice).',
  },
  {
    name: 'arkvory_slice_cache_digest_failures_total',
    type: 'counter',
    labels: ['where'],
    help: 'Slices that did not match the digest recorded at publish, by `where`: `origin` (fetched from the store; not served, not kept, fetched once more, then 502 `slice_digest_mismatch`), `disk` (changed on local disk; removed and fetched again).',
  },
  {
    name: 'arkvory_slice_cache_disk_errors_total',
    type: 'counter',
    labels: [],
    help: 'Slices on local disk whose file could not be opened or read (an I/O error, out of descriptors, a file cut short): each was fetched from the store instead, verified, and its new file replaces the old one; the client is answered either way.',
  },
  {
    name: 'arkvory_slice_cache_evictions_total',
    type: 'counter',
    labels: [],
    help: 'Slices evicted (least recently used) to stay under `ARKVORY_CACHE_MAX_BYTES`, `ARKVORY_CACHE_MAX_FILES` and `ARKVORY_CACHE_MIN_FREE_BYTES`.',
  },
  {
    name: 'arkvory_slice_cache_relayed_fills_total',
    type: 'counter',
    labels: [],
    help: 'Fills relayed to their readers without being kept: no room under the bounds, the disk full, or the disk too far behind the store.',
  },
  {
    name: 'arkvory_slice_cache_abandoned_fills_total',
    type: 'counter',
    labels: [],
    help: 'Fills stopped before they were complete because every client reading them went away (not kept; a later read fetches the slice again).',
  },
  {
    name: 'arkvory_slice_cache_origin_resumes_total',
    type: 'counter',
    labels: [],
    help: 'Store answers that failed or ended in the middle of a run of slices and were read on from where they stopped (at most twice a run; a third stop fails the slice being filled and the rest of the run).',
  },
  {
    name: 'arkvory_slice_cache_held_bytes',
    type: 'gauge',
    labels: [],
    help: 'Disk taken by the verified slices the cache holds (each counted in whole 4 KiB blocks).',
  },
  {
    name: 'arkvory_slice_cache_memory_bytes',
    type: 'gauge',
    labels: [],
    help: 'Slices the cache holds in memory (being fetched, waiting for the disk, or sent from memory because they cannot be kept), per process; at `ARKVORY_CACHE_MEMORY_MAX_BYTES` downloads wait for room, then are answered 503 `slice_cache_memory_full`.',
  },
  {
    name: RATE_LIMIT_METRIC_NAMES.checks,
    type: 'counter',
    labels: ['limiter', 'action', 'matched', 'error'],
    help: 'Rate-limit checks, one per check() call.',
  },
  {
    name: RATE_LIMIT_METRIC_NAMES.ruleEvaluations,
    type: 'counter',
    labels: ['limiter', 'rule', 'action', 'result'],
    help: 'Rule evaluations inside checks.',
  },
  {
    name: RATE_LIMIT_METRIC_NAMES.peeks,
    type: 'counter',
    labels: ['limiter', 'action', 'error'],
    help: 'Rate-limit peeks (no counting).',
  },
  { name: RULES_SERVICE_METRIC, type: 'counter', labels: ['limiter', 'result'], help: RULES_SERVICE_HELP },
  {
    name: 'arkvory_trace_spans_exported_total',
    type: 'counter',
    labels: [],
    help: 'Spans the collector accepted (tracing on, docs/tracing.md); zero with tracing off.',
  },
  {
    name: 'arkvory_trace_spans_dropped_total',
    type: 'counter',
    labels: ['reason'],
    help: 'Spans lost instead of slowing a request, by reason: queue_full (OTEL_BSP_MAX_QUEUE_SIZE spans were already waiting or being sent) or export_failed (the collector refused, was unreachable or had not finished answering within OTEL_EXPORTER_OTLP_TIMEOUT).',
  },
  {
    name: 'arkvory_trace_spans_pending',
    type: 'gauge',
    labels: [],
    help: 'Finished spans waiting for export or being sent now (at most OTEL_BSP_MAX_QUEUE_SIZE).',
  },
  {
    name: 'arkvory_usage_pending_rows',
    type: 'gauge',
    labels: [],
    help: 'Usage statistics rows (an artifact, or a principal and day) counted in memory and not yet in the database: at most 100,000 a process, summed over the workers of an instance (docs/observability.md); near it the database has not taken a flush for a while.',
  },
  {
    name: 'arkvory_usage_dropped_total',
    type: 'counter',
    labels: ['kind'],
    help: 'Downloads and requests (kind) left out of the usage statistics: their row did not fit the 100,000 held while the database took no flush, or a flush whose outcome the database no longer knew was not sent again.',
  },
  {
    name: 'arkvory_usage_flush_failures_total',
    type: 'counter',
    labels: ['reason'],
    help: 'Usage statistics flushes that failed (reason failed: the database refused or the connection broke) or were abandoned after 15 s (timeout); what they held is kept for the next.',
  },
  {
    name: 'arkvory_audit_entries_not_recorded_total',
    type: 'counter',
    labels: ['reason'],
    help: "Audited actions (a writer's admin and publish routes) that stand without their audit row: its insert failed (reason failed: the database refused or the connection broke) or was given up after 5 s (timeout). Each one's whole entry is in an `error` line `audit entry not recorded` (docs/observability.md).",
  },
  {
    name: 'arkvory_database_login_privileged',
    type: 'gauge',
    labels: ['reason'],
    help: "Whether the database login is a superuser, owns the schema or holds privileges beyond its role's (reason excess_grants) (1): more than its role needs (docs/deploy.md); checked at start.",
  },
  {
    name: 'arkvory_secret_rotations_total',
    type: 'counter',
    labels: ['secret'],
    help: 'New values taken from a rotated secret file (on SIGHUP or a file change), by the variable it fills (`ARKVORY_DATABASE_PASSWORD`, `AWS_SECRET_ACCESS_KEY`, ...); a series per secret given as a file (docs/deploy.md, "Rotation runbook").',
  },
  {
    name: 'arkvory_secret_rotation_failures_total',
    type: 'counter',
    labels: ['secret'],
    help: 'Rotations refused (file unreadable or with loose permissions, value invalid, credential refused by its server): the previous value stays in use; by the variable the file fills.',
  },
] as const satisfies readonly MetricSpec[];

/**
 * prom-client's default process and Node.js metrics (`collectDefaultMetrics`), listed by name so
 * the docs and the test cover them too. Families that exist only on some platforms are absent.
 */
export const PROCESS_METRICS = [
  { name: 'process_cpu_user_seconds_total', type: 'counter', labels: [], help: 'User CPU time spent in seconds.' },
  { name: 'process_cpu_system_seconds_total', type: 'counter', labels: [], help: 'System CPU time spent in seconds.' },
  {
    name: 'process_cpu_seconds_total',
    type: 'counter',
    labels: [],
    help: 'Total user and system CPU time spent in seconds.',
  },
  {
    name: 'process_start_time_seconds',
    type: 'gauge',
    labels: [],
    help: 'Start time of the process since unix epoch in seconds.',
  },
  { name: 'process_resident_memory_bytes', type: 'gauge', labels: [], help: 'Resident memory size in bytes.' },
  { name: 'process_virtual_memory_bytes', type: 'gauge', labels: [], help: 'Virtual memory size in bytes.' },
  { name: 'process_heap_bytes', type: 'gauge', labels: [], help: 'Process heap size in bytes.' },
  { name: 'process_open_fds', type: 'gauge', labels: [], help: 'Number of open file descriptors.' },
  { name: 'process_max_fds', type: 'gauge', labels: [], help: 'Maximum number of open file descriptors.' },
  { name: 'nodejs_eventloop_lag_seconds', type: 'gauge', labels: [], help: 'Lag of event loop in seconds.' },
  {
    name: 'nodejs_eventloop_lag_min_seconds',
    type: 'gauge',
    labels: [],
    help: 'The minimum recorded event loop delay.',
  },
  {
    name: 'nodejs_eventloop_lag_max_seconds',
    type: 'gauge',
    labels: [],
    help: 'The maximum recorded event loop delay.',
  },
  {
    name: 'nodejs_eventloop_lag_mean_seconds',
    type: 'gauge',
    labels: [],
    help: 'The mean of the recorded event loop delays.',
  },
  {
    name: 'nodejs_eventloop_lag_stddev_seconds',
    type: 'gauge',
    labels: [],
    help: 'The standard deviation of the recorded event loop delays.',
  },
  {
    name: 'nodejs_eventloop_lag_p50_seconds',
    type: 'gauge',
    labels: [],
    help: 'The 50th percentile of the recorded event loop delays.',
  },
  {
    name: 'nodejs_eventloop_lag_p90_seconds',
    type: 'gauge',
    labels: [],
    help: 'The 90th percentile of the recorded event loop delays.',
  },
  {
    name: 'nodejs_eventloop_lag_p99_seconds',
    type: 'gauge',
    labels: [],
    help: 'The 99th percentile of the recorded event loop delays.',
  },
  {
    name: 'nodejs_active_resources',
    type: 'gauge',
    labels: ['type'],
    help: 'Active resources keeping the event loop alive, by async resource type.',
  },
  { name: 'nodejs_active_resources_total', type: 'gauge', labels: [], help: 'Total number of active resources.' },
  {
    name: 'nodejs_active_handles',
    type: 'gauge',
    labels: ['type'],
    help: 'Number of active libuv handles grouped by handle type.',
  },
  { name: 'nodejs_active_handles_total', type: 'gauge', labels: [], help: 'Total number of active handles.' },
  {
    name: 'nodejs_active_requests',
    type: 'gauge',
    labels: ['type'],
    help: 'Number of active libuv requests grouped by request type.',
  },
  { name: 'nodejs_active_requests_total', type: 'gauge', labels: [], help: 'Total number of active requests.' },
  { name: 'nodejs_heap_size_total_bytes', type: 'gauge', labels: [], help: 'Process heap size from Node.js in bytes.' },
  {
    name: 'nodejs_heap_size_used_bytes',
    type: 'gauge',
    labels: [],
    help: 'Process heap size used from Node.js in bytes.',
  },
  { name: 'nodejs_external_memory_bytes', type: 'gauge', labels: [], help: 'Node.js external memory size in bytes.' },
  {
    name: 'nodejs_heap_space_size_total_bytes',
    type: 'gauge',
    labels: ['space'],
    help: 'Process heap space size total from Node.js in bytes.',
  },
  {
    name: 'nodejs_heap_space_size_used_bytes',
    type: 'gauge',
    labels: ['space'],
    help: 'Process heap space size used from Node.js in bytes.',
  },
  {
    name: 'nodejs_heap_space_size_available_bytes',
    type: 'gauge',
    labels: ['space'],
    help: 'Process heap space size available from Node.js in bytes.',
  },
  {
    name: 'nodejs_version_info',
    type: 'gauge',
    labels: ['version', 'major', 'minor', 'patch'],
    help: 'Node.js version info.',
  },
  {
    name: 'nodejs_gc_duration_seconds',
    type: 'histogram',
    labels: ['kind'],
    help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
  },
] as const satisfies readonly MetricSpec[];

/**
 * The router's own families (`ARKVORY_ROLE=router` with `ARKVORY_METRICS_PORT`: its main port proxies
 * `/metrics` to the writer), documented in docs/router.md ("Metrics"); process metrics as above.
 */
export const ROUTER_METRICS = [
  {
    name: 'arkvory_router_retries_total',
    type: 'counter',
    labels: ['reason'],
    help: 'GET/HEAD requests sent once more to another gateway before any byte was relayed, by reason: gateway_502, gateway_503, gateway_504 (the first gateway answered that) or connection (no answer: connect error, reset, idle timeout).',
  },
  {
    name: 'arkvory_router_ejections_total',
    type: 'counter',
    labels: [],
    help: 'Gateways ejected from reads by outlier detection (consecutive failures of their own: no answer, or a 5xx another gateway did not give).',
  },
  {
    name: 'arkvory_router_gateways',
    type: 'gauge',
    labels: ['state'],
    help: 'Known gateways by state: reads (healthy, taking reads), store_unreachable (healthy, its store unreachable: writes only), ejected (healthy, ejected from reads) or down (failing probes).',
  },
  {
    name: 'arkvory_router_client_faults_total',
    type: 'counter',
    labels: ['kind'],
    help: 'Requests the router refused with 400 before forwarding (duplicate Host, invalid header value…; malformed_head: refused by the HTTP parser), by kind; every one is counted, their log lines are bounded.',
  },
  {
    name: 'arkvory_router_requests_in_flight',
    type: 'gauge',
    labels: [],
    help: 'Client requests the router is proxying now (each holds at most one connection to a gateway).',
  },
  {
    name: 'arkvory_router_overloaded_total',
    type: 'counter',
    labels: ['reason'],
    help: 'Requests the router answered 503 itself, by reason: in_flight (its bound on requests proxied at once was reached) or descriptors (connecting to the gateway failed for want of its own descriptors or local ports: EMFILE, ENFILE, EADDRNOTAVAIL).',
  },
] as const satisfies readonly MetricSpec[];

export const ALL_METRICS: readonly MetricSpec[] = [...GATEWAY_METRICS, ...PROCESS_METRICS];

export type GatewayMetricName = (typeof GATEWAY_METRICS)[number]['name'];

export function specOf(name: GatewayMetricName): MetricSpec {
  return GATEWAY_METRICS.find((m) => m.name === name)!;
}
