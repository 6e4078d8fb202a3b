/**
 * The tracing variables (docs/tracing.md): the OpenTelemetry SDK's own names (the OTel
 * specification's "Environment Variable Specification"), so an operator sets what every other
 * OTel-instrumented service takes, plus two of ours for what the spec leaves to the product. In the
 * shape of variables.ts's table, which lists them (see tls-variables.ts for why the type is not named).
 */
const MS = { type: 'int', min: 0, max: 3_600_000 } as const;

export const TRACING_VARIABLES = [
  {
    name: 'OTEL_SDK_DISABLED',
    kind: { type: 'bool' },
    defaultValue: 'false',
    doc: 'OpenTelemetry: `true` turns tracing off whatever else is set.',
  },
  {
    name: 'OTEL_TRACES_EXPORTER',
    kind: { type: 'enum', values: ['otlp', 'none'] },
    defaultValue: 'otlp',
    doc: 'OpenTelemetry: `otlp` exports spans over OTLP/HTTP once an endpoint is set; `none` turns tracing off. Tracing is off while neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (docs/tracing.md).',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    kind: { type: 'url', protocols: ['http:', 'https:'] },
    doc: 'OpenTelemetry: base URL of the OTLP/HTTP collector (`http://collector:4318`); spans go to `<base>/v1/traces`. Setting it turns tracing on.',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
    kind: { type: 'url', protocols: ['http:', 'https:'] },
    doc: 'OpenTelemetry: the full URL spans are posted to, used as given; wins over OTEL_EXPORTER_OTLP_ENDPOINT.',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_PROTOCOL',
    kind: { type: 'enum', values: ['http/json'] },
    defaultValue: 'http/json',
    doc: 'OpenTelemetry: the OTLP encoding; only `http/json` (OTLP/HTTP with JSON bodies, which every OTLP collector accepts) is implemented, other values refuse the start.',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_HEADERS',
    kind: { type: 'string' },
    secret: true,
    doc: 'OpenTelemetry: `name=value,…` headers sent with every export (a collector token); never logged. OTEL_EXPORTER_OTLP_TRACES_HEADERS wins when set.',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
    kind: { type: 'string' },
    secret: true,
    doc: 'OpenTelemetry: headers for span exports only, as OTEL_EXPORTER_OTLP_HEADERS.',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_CERTIFICATE',
    kind: { type: 'string' },
    doc: 'OpenTelemetry: a PEM file of the CAs the collector is verified against, in place of the default ones (which include ARKVORY_TLS_CA_FILE, enough for most); OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE wins when set. Read by the exporter itself: a file it cannot read leaves the default CAs.',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE',
    kind: { type: 'string' },
    doc: 'OpenTelemetry: a PEM client certificate chain shown to a collector that asks for one (mutual TLS), with OTEL_EXPORTER_OTLP_CLIENT_KEY; the `_TRACES_` spelling wins when set. Read by the exporter itself.',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_CLIENT_KEY',
    kind: { type: 'string' },
    doc: "OpenTelemetry: the PEM private key of OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE (a file's path; the key is never logged); the `_TRACES_` spelling wins when set.",
  },
  {
    name: 'OTEL_EXPORTER_OTLP_TIMEOUT',
    kind: MS,
    defaultValue: '10000',
    doc: 'OpenTelemetry: milliseconds one export may take before it is given up (its spans counted as dropped).',
  },
  {
    name: 'OTEL_SERVICE_NAME',
    kind: { type: 'string' },
    defaultValue: 'arkvory',
    doc: 'OpenTelemetry: `service.name` of this process in traces; the role is `arkvory.role`.',
  },
  {
    name: 'OTEL_RESOURCE_ATTRIBUTES',
    kind: { type: 'string' },
    doc: 'OpenTelemetry: extra resource attributes, `key=value,…` (`deployment.environment.name=prod`).',
  },
  {
    name: 'OTEL_TRACES_SAMPLER',
    kind: {
      type: 'enum',
      values: [
        'always_on',
        'always_off',
        'traceidratio',
        'parentbased_always_on',
        'parentbased_always_off',
        'parentbased_traceidratio',
      ],
    },
    defaultValue: 'parentbased_always_on',
    doc: "OpenTelemetry: which requests are traced. `parentbased_*` follow the sampled flag of an accepted `traceparent` from a peer in ARKVORY_TRUSTED_PROXIES (a router, whose span decided); any other peer's continued trace keeps its id but is decided as a new trace, a ratio drawn at random rather than read from the id the client chose (docs/tracing.md). `traceidratio` takes OTEL_TRACES_SAMPLER_ARG.",
  },
  {
    name: 'OTEL_TRACES_SAMPLER_ARG',
    kind: { type: 'string' },
    doc: 'OpenTelemetry: the ratio for `traceidratio` and `parentbased_traceidratio`, from 0 to 1 (default 1); `0.01` traces one request in a hundred.',
  },
  {
    name: 'OTEL_BSP_SCHEDULE_DELAY',
    kind: MS,
    defaultValue: '5000',
    doc: 'OpenTelemetry: milliseconds between two exports of finished spans.',
  },
  {
    name: 'OTEL_BSP_EXPORT_TIMEOUT',
    kind: MS,
    defaultValue: '30000',
    doc: 'OpenTelemetry: milliseconds the batch processor waits for one export.',
  },
  {
    name: 'OTEL_BSP_MAX_QUEUE_SIZE',
    kind: { type: 'int', min: 1, max: 1_000_000 },
    defaultValue: '2048',
    doc: 'OpenTelemetry: finished spans held for export at most (waiting or being sent); past it a span is dropped and counted (`arkvory_trace_spans_dropped_total{reason="queue_full"}`), never waited for.',
  },
  {
    name: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
    kind: { type: 'int', min: 1, max: 1_000_000 },
    defaultValue: '512',
    doc: 'OpenTelemetry: spans per export at most (not above OTEL_BSP_MAX_QUEUE_SIZE).',
  },
  {
    name: 'ARKVORY_TRACE_CONTEXT_FROM',
    kind: { type: 'enum', values: ['any', 'trusted-proxies', 'none'] },
    defaultValue: 'any',
    doc: "Whose W3C `traceparent`/`tracestate` a request may continue: `any` client, only peers in ARKVORY_TRUSTED_PROXIES (`trusted-proxies`; others start a new trace), or `none`. Only a peer in ARKVORY_TRUSTED_PROXIES has its sampled flag followed: with `any`, anyone else's trace id is kept and OTEL_TRACES_SAMPLER decides as for a new trace, so no client makes its requests sampled. A router with tracing off passes a client's on to the gateway only when this would continue it, and strips it otherwise; from a client not in its ARKVORY_TRUSTED_PROXIES it adds `arkvory=untrusted` to the `tracestate`, so a gateway that trusts the router keeps the trace id but does not follow the flag.",
  },
  {
    name: 'ARKVORY_TRACE_PRINCIPAL',
    kind: { type: 'bool' },
    defaultValue: '0',
    doc: 'Record the authenticated principal id as `enduser.id` on server spans (off: spans name no principal). Keys, tokens and passwords are never recorded.',
  },
] as const;
