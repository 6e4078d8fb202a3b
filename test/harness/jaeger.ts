/**
 * A real Jaeger (v2, all-in-one, in-memory storage) from PATH as the trace backend: OTLP/HTTP in,
 * the query API out, every listener on a free loopback port (its shipped defaults are fixed ports
 * other runs on this machine may hold). scripts/test-tools.sh builds the pinned version.
 */
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { freeLoopbackPort } from './ports.ts';
import { startProcess, type ManagedProcess } from './managed-process.ts';
import { makeTempDir } from './temp-dir.ts';
import { waitUntil } from './wait.ts';

const TRACE_WAIT_MS = 20_000;
const TRACE_POLL_MS = 200;

export const JAEGER_INSTALL_HINT =
  'jaeger is not on PATH: `bash scripts/test-tools.sh` builds the pinned version into /root/.cache/arkvory-tools/bin';

/** A span as the query API (`GET /api/traces/{id}`) gives it. */
export interface JaegerSpan {
  readonly traceID: string;
  readonly spanID: string;
  readonly operationName: string;
  readonly references: ReadonlyArray<{ refType: string; traceID: string; spanID: string }>;
  readonly tags: ReadonlyArray<{ key: string; type: string; value: unknown }>;
  readonly logs: ReadonlyArray<{ timestamp: number; fields: ReadonlyArray<{ key: string; value: unknown }> }>;
  readonly processID: string;
  readonly startTime: number;
  readonly duration: number;
}

export interface JaegerTrace {
  readonly traceID: string;
  readonly spans: readonly JaegerSpan[];
  readonly processes: Readonly<Record<string, { serviceName: string }>>;
}

export interface JaegerServer extends ManagedProcess {
  /** OTEL_EXPORTER_OTLP_ENDPOINT for an exporter (spans go to `<it>/v1/traces`). */
  readonly otlpUrl: string;
  readonly otlpPort: number;
  /** Base of the query API (`/api/traces/{id}`, `/api/services`). */
  readonly queryUrl: string;
  /** The trace with that id (32 hex digits), or undefined while Jaeger has none of its spans. */
  trace(traceId: string): Promise<JaegerTrace | undefined>;
  /**
   * The trace once it holds a span for each of `wanted` (the spans of one trace arrive in several
   * exports), each span named by `options.spanKey`: its operation name unless given. Fails after
   * `options.timeoutMs` (20 s unless given), naming the spans still missing.
   */
  traceWith(traceId: string, wanted: readonly string[], options?: TraceWithOptions): Promise<JaegerTrace>;
}

export interface TraceWithOptions {
  /** What a span is called in `wanted`: its id, or its service and operation, say. */
  readonly spanKey?: (span: JaegerSpan, trace: JaegerTrace) => string;
  readonly timeoutMs?: number;
}

function configYaml(ports: { otlp: number; query: number; queryGrpc: number; metrics: number }): string {
  return `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: ${ports.metrics}
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:${ports.query}
    grpc:
      endpoint: 127.0.0.1:${ports.queryGrpc}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${ports.otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`;
}

/** Starts `jaeger` with a generated configuration; resolves once its query API answers. */
export async function startJaeger(): Promise<JaegerServer> {
  const ports = {
    otlp: await freeLoopbackPort(),
    query: await freeLoopbackPort(),
    queryGrpc: await freeLoopbackPort(),
    metrics: await freeLoopbackPort(),
  };
  const dir = await makeTempDir('arkvory-jaeger-');
  const config = path.join(dir, 'jaeger.yaml');
  await writeFile(config, configYaml(ports));
  const server = startProcess('jaeger', [`--config=${config}`], { name: 'jaeger' });
  const queryUrl = `http://127.0.0.1:${ports.query}`;
  const otlpUrl = `http://127.0.0.1:${ports.otlp}`;
  try {
    const answers = async () => {
      const [query, otlp] = await Promise.all([
        fetch(`${queryUrl}/api/services`),
        // The receiver answers a GET with 405: it listens.
        fetch(`${otlpUrl}/v1/traces`),
      ]);
      await Promise.all([query.body?.cancel(), otlp.body?.cancel()]);
      return query.ok && otlp.status === 405;
    };
    await waitUntil(answers, {
      what: `jaeger to answer on ${queryUrl}`,
      timeoutMs: 30_000,
      retryOnError: true,
      process: server,
    });
  } catch (err) {
    await server.stop('SIGKILL');
    await rm(dir, { recursive: true, force: true });
    if (server.logs().includes('ENOENT')) throw new Error(JAEGER_INSTALL_HINT, { cause: err });
    throw err;
  }
  const trace = async (traceId: string): Promise<JaegerTrace | undefined> => {
    const response = await fetch(`${queryUrl}/api/traces/${traceId}`);
    if (response.status === 404) {
      await response.body?.cancel();
      return undefined;
    }
    if (!response.ok) throw new Error(`jaeger: GET /api/traces/${traceId} answered ${response.status}`);
    const body = (await response.json()) as { data: JaegerTrace[] };
    return body.data[0];
  };
  const stopProcess = server.stop.bind(server);
  return Object.assign(server, {
    // SIGKILL unless told: its traces are in memory and go with it, and on SIGTERM jaeger takes 10 s
    // to exit (measured), which every file using it waited at its end.
    async stop(signal: NodeJS.Signals = 'SIGKILL', killAfterMs?: number) {
      const code = await stopProcess(signal, killAfterMs);
      await rm(dir, { recursive: true, force: true });
      return code;
    },
    otlpUrl,
    otlpPort: ports.otlp,
    queryUrl,
    trace,
    async traceWith(traceId: string, wanted: readonly string[], options: TraceWithOptions = {}): Promise<JaegerTrace> {
      const spanKey = options.spanKey ?? ((span: JaegerSpan) => span.operationName);
      let found: JaegerTrace | undefined;
      let missing = [...wanted];
      try {
        await waitUntil(
          async () => {
            found = await trace(traceId);
            const have = new Set(found?.spans.map((s) => spanKey(s, found!)));
            missing = wanted.filter((w) => !have.has(w));
            return found !== undefined && missing.length === 0;
          },
          {
            what: `trace ${traceId} in jaeger`,
            timeoutMs: options.timeoutMs ?? TRACE_WAIT_MS,
            intervalMs: TRACE_POLL_MS,
            retryOnError: true,
            process: server,
          },
        );
      } catch (err) {
        const held = found ? found.spans.map((s) => spanKey(s, found!)).join(', ') : 'none';
        // The missing spans first: the wait's message may end with jaeger's log tail.
        throw new Error(`trace ${traceId} lacks ${missing.join(', ')} (it holds: ${held}): ${(err as Error).message}`, {
          cause: err,
        });
      }
      return found!;
    },
  });
}
