/**
 * Traces in a real backend: Jaeger (test/harness/jaeger.ts) takes OTLP/HTTP from a router and a
 * gateway whose store is a static-HTTP store (nginx), and its query API gives the trace back. A
 * download through the router is one trace: router span → gateway span → auth, rate-limit,
 * admission and store spans and the client span to the store, attributes as docs/tracing.md lists
 * them, no key, token or query string anywhere. A client's `traceparent` is continued, its
 * sampled flag followed only from a trusted proxy. An absolute-form target's user info is in no span.
 */
import net from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { KEY_PATTERN } from '../../policy/auth/key-format.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { startStaticStore, type StaticStore } from '../../test/support/static-store.ts';
import { type JaegerServer, type JaegerSpan, type JaegerTrace, startJaeger } from '../../test/harness/index.ts';

const REPO = 'jaegered';
const SIZE = 64 * 1024;
/** A query parameter standing for a pre-signed link's signature: never in a span. */
const QUERY_SECRET = 'query-secret-7f3a91c2';
const CLIENT_TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const CLIENT_SPAN_ID = 'b7ad6b7169203331';
const PROXY_ADDRESS = '127.0.0.2';

let db: TestDatabase & { drop(): Promise<void> };
/** ratioGateway's: one writer per database. */
let ratioDb: TestDatabase & { drop(): Promise<void> };
let jaeger: JaegerServer;
let store: StaticStore;
let gateway: GatewayProcess;
/**
 * Samples no new trace (`parentbased_traceidratio` at 0) and trusts one proxy, a second loopback
 * address (PROXY_ADDRESS); the test's other requests come from 127.0.0.1, a client it does not trust.
 */
let ratioGateway: GatewayProcess;
let router: GatewayProcess;
let key: string;
let body: Buffer;
const artifact = `/api/v1/repositories/${REPO}/artifacts/traced.bin`;

beforeAll(async () => {
  [db, ratioDb, jaeger, store] = await Promise.all([
    createTestDatabase(),
    createTestDatabase(),
    startJaeger(),
    startStaticStore(),
  ]);
  await createRepository(db.pool, REPO);
  key = (await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { [REPO]: 'write' } })).key;
  const otel = {
    OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpUrl,
    OTEL_BSP_SCHEDULE_DELAY: '100',
  };
  [gateway, ratioGateway] = await Promise.all([
    startGateway({
      env: {
        ...otel,
        OTEL_SERVICE_NAME: 'arkvory-gateway',
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_STORAGE_URL: store.url,
      },
      timeoutMs: 90_000,
    }),
    startGateway({
      env: {
        ...otel,
        OTEL_SERVICE_NAME: 'arkvory-ratio-gateway',
        ARKVORY_DATABASE_URL: ratioDb.url,
        ARKVORY_TRUSTED_PROXIES: PROXY_ADDRESS,
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0',
      },
      timeoutMs: 90_000,
    }),
  ]);
  router = await startGateway({
    env: { ...otel, OTEL_SERVICE_NAME: 'arkvory-router', ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: gateway.url },
    timeoutMs: 90_000,
  });
  body = randomContent(SIZE);
  expect((await request(`${gateway.url}${artifact}`, { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
}, 180_000);

afterAll(async () => {
  await router?.stop();
  await Promise.all([gateway?.stop(), ratioGateway?.stop()]);
  await jaeger?.stop();
  await store?.stop();
  await Promise.all([db?.drop(), ratioDb?.drop()]);
});

function tag(span: JaegerSpan, name: string): unknown {
  return span.tags.find((t) => t.key === name)?.value;
}

function parentOf(span: JaegerSpan): string | undefined {
  return span.references.find((r) => r.refType === 'CHILD_OF')?.spanID;
}

function service(trace: JaegerTrace, span: JaegerSpan): string | undefined {
  return trace.processes[span.processID]?.serviceName;
}

/**
 * The trace once Jaeger holds the router's span and every span named in `names` (spans of one trace
 * arrive in several exports, the router's last: it ends when the client has the response).
 */
function traceWith(traceId: string, names: readonly string[]): Promise<JaegerTrace> {
  return jaeger.traceWith(traceId, ['arkvory-router GET', ...names.map((n) => `arkvory-gateway ${n}`)], {
    spanKey: (span, trace) => `${service(trace, span)} ${span.operationName}`,
  });
}

/** The trace id of the router's request line for `path` (the one after `linesBefore`). */
async function routerTraceId(linesBefore: number): Promise<string> {
  const line = () =>
    router
      .logLines()
      .slice(linesBefore)
      .find((l) => l.msg === 'request' && typeof l.traceId === 'string');
  await expect.poll(line, { timeout: 5000 }).toBeDefined();
  return line()!.traceId as string;
}

const GATEWAY_CHILDREN = [
  'arkvory.auth',
  'arkvory.rate_limit',
  'arkvory.admission',
  'arkvory.store.open',
  'arkvory.store.first_byte',
];
const CONTENT_SPAN = 'GET /api/v1/repositories/:repo/artifacts/:id/content';

it('a download through the router is one trace: router, gateway, gates and store spans linked, attributes as documented, no secrets', async () => {
  const linesBefore = router.logLines().length;
  const res = await request(`${router.url}${artifact}/content?x-sig=${QUERY_SECRET}`, {
    headers: { ...bearer(key), 'user-agent': 'tracing-test/1' },
  });
  expect(res.status).toBe(200);
  expect(Buffer.compare(res.body, body)).toBe(0);
  const traceId = await routerTraceId(linesBefore);
  const trace = await traceWith(traceId, [CONTENT_SPAN, ...GATEWAY_CHILDREN]);

  const routerSpan = trace.spans.find((s) => s.operationName === 'GET' && service(trace, s) === 'arkvory-router')!;
  const gatewaySpan = trace.spans.find((s) => s.operationName === CONTENT_SPAN)!;
  // The router's span is the root; the gateway continues it.
  expect(parentOf(routerSpan)).toBeUndefined();
  expect(parentOf(gatewaySpan)).toBe(routerSpan.spanID);
  expect(service(trace, gatewaySpan)).toBe('arkvory-gateway');
  for (const name of GATEWAY_CHILDREN) {
    const child = trace.spans.find((s) => s.operationName === name)!;
    expect({ name, parent: parentOf(child) }).toEqual({ name, parent: gatewaySpan.spanID });
  }
  // The static-HTTP store's request: a client span beneath the store open, with its first_byte event.
  const open = trace.spans.find((s) => s.operationName === 'arkvory.store.open')!;
  const storeGet = trace.spans.find((s) => s.operationName === 'GET' && tag(s, 'span.kind') === 'client');
  expect(storeGet).toBeDefined();
  expect(parentOf(storeGet!)).toBe(open.spanID);
  expect(String(tag(storeGet!, 'url.full'))).toMatch(new RegExp(`^${store.url}`));
  // The static-HTTP store reads with Range.
  expect([200, 206]).toContain(tag(storeGet!, 'http.response.status_code'));
  expect(storeGet!.logs.some((l) => l.fields.some((f) => f.key === 'event' && f.value === 'first_byte'))).toBe(true);
  // Every span hangs off another span of the same trace: nothing detached.
  const ids = new Set(trace.spans.map((s) => s.spanID));
  for (const span of trace.spans) if (span !== routerSpan) expect(ids.has(parentOf(span)!)).toBe(true);

  expect(tag(routerSpan, 'span.kind')).toBe('server');
  expect(tag(routerSpan, 'http.request.method')).toBe('GET');
  expect(tag(routerSpan, 'url.path')).toBe(`${artifact}/content`);
  expect(tag(routerSpan, 'http.response.status_code')).toBe(200);
  expect(tag(routerSpan, 'arkvory.router.backend')).toBe(gateway.url);
  expect(tag(routerSpan, 'arkvory.router.attempts')).toBe(1);
  expect(tag(routerSpan, 'user_agent.original')).toBe('tracing-test/1');
  expect(tag(gatewaySpan, 'span.kind')).toBe('server');
  expect(tag(gatewaySpan, 'http.route')).toBe('/api/v1/repositories/:repo/artifacts/:id/content');
  expect(tag(gatewaySpan, 'url.path')).toBe(`${artifact}/content`);
  expect(tag(gatewaySpan, 'http.response.status_code')).toBe(200);
  expect(tag(gatewaySpan, 'arkvory.bytes_out')).toBeGreaterThanOrEqual(SIZE);
  // The principal only where the operator turns it on (ARKVORY_TRACE_PRINCIPAL).
  expect(tag(gatewaySpan, 'enduser.id')).toBeUndefined();
  const rateLimit = trace.spans.find((s) => s.operationName === 'arkvory.rate_limit')!;
  expect(tag(rateLimit, 'arkvory.rate_limit.limiter')).toBe('gateway_request');
  expect(tag(rateLimit, 'arkvory.rate_limit.action')).toBe('allow');
  expect(typeof tag(rateLimit, 'arkvory.rate_limit.rule')).toBe('string');
  const admission = trace.spans.find((s) => s.operationName === 'arkvory.admission')!;
  expect(tag(admission, 'arkvory.transfer.kind')).toBe('download');
  expect(tag(admission, 'arkvory.admission.waited')).toBe(false);
  expect(tag(open, 'arkvory.store.kind')).toBe('http');

  // Never a key (or any part of it), the Authorization header or the query string.
  const text = JSON.stringify(trace);
  // The secret by the key's own format: base64url may hold `_` itself.
  const secret = KEY_PATTERN.exec(key)![2]!;
  expect(secret).toHaveLength(43);
  expect(text).not.toContain(secret);
  expect(text).not.toMatch(/bearer|authorization/i);
  expect(text).not.toContain(QUERY_SECRET);
}, 60_000);

it("continues a client's traceparent through router and gateway", async () => {
  const res = await request(`${router.url}${artifact}/content`, {
    headers: { ...bearer(key), traceparent: `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01` },
  });
  expect(res.status).toBe(200);
  const trace = await traceWith(CLIENT_TRACE_ID, [CONTENT_SPAN]);
  const routerSpan = trace.spans.find((s) => s.operationName === 'GET' && service(trace, s) === 'arkvory-router')!;
  const gatewaySpan = trace.spans.find((s) => s.operationName === CONTENT_SPAN)!;
  expect(parentOf(routerSpan)).toBe(CLIENT_SPAN_ID);
  expect(parentOf(gatewaySpan)).toBe(routerSpan.spanID);
  expect(routerSpan.traceID).toBe(CLIENT_TRACE_ID);
  // The request lines join the trace too.
  const joined = () =>
    [...router.logLines(), ...gateway.logLines()].filter((l) => l.msg === 'request' && l.traceId === CLIENT_TRACE_ID);
  await expect.poll(() => joined().length, { timeout: 5000 }).toBe(2);
}, 60_000);

it("an untrusted client's unsampled flag (00) is not followed either: its id in both request lines, sampled by the operator's sampler", async () => {
  const unsampled = '1af7651916cd43dd8448eb211c80319d';
  const res = await request(`${router.url}${artifact}/content`, {
    headers: { ...bearer(key), traceparent: `00-${unsampled}-${CLIENT_SPAN_ID}-00` },
  });
  expect(res.status).toBe(200);
  expect(Buffer.compare(res.body, body)).toBe(0);
  const joined = () =>
    [...router.logLines(), ...gateway.logLines()].filter((l) => l.msg === 'request' && l.traceId === unsampled);
  await expect.poll(() => joined().length, { timeout: 5000 }).toBe(2);
  // `parentbased_always_on` decides as for a new trace: sampled, whatever the client's flag said.
  await traceWith(unsampled, [CONTENT_SPAN]);
}, 60_000);

/** `arkvory_trace_spans_*` of `process`: every span it sampled is exported, dropped or pending. */
async function spanCounts(process: GatewayProcess): Promise<{ exported: number; other: number }> {
  const text = (await request(`${process.url}/metrics`)).body.toString();
  const sum = (re: RegExp) => [...text.matchAll(re)].reduce((n, m) => n + Number(m[1]), 0);
  return {
    exported: sum(/^arkvory_trace_spans_exported_total (\d+)$/gm),
    other: sum(/^arkvory_trace_spans_(?:dropped_total\{[^}]*\}|pending) (\d+)$/gm),
  };
}

it("a client's sampled flag does not override a 0 ratio, its trace id is kept; a trusted proxy's flag is followed", async () => {
  // Ids a client may pick: TraceIdRatioBased would keep them at any ratio above 0 (words XOR to 0).
  const clientTrace = '10000000100000000000000000000000';
  const proxyTrace = '20000000200000000000000000000000';
  /** The trace id of ratioGateway's request line for `artifact` after `before`. */
  const loggedTraceId = async (before: number) => {
    const line = () =>
      ratioGateway
        .logLines()
        .slice(before)
        .find((l) => l.msg === 'request' && String(l.route).includes('/artifacts/'));
    await expect.poll(line, { timeout: 5000 }).toBeDefined();
    return line()!.traceId;
  };
  let before = ratioGateway.logLines().length;
  // Anonymous reads, refused by the auth gate (401): a server span and the gate's.
  const client = await request(`${ratioGateway.url}${artifact}`, {
    headers: { traceparent: `00-${clientTrace}-${CLIENT_SPAN_ID}-01` },
  });
  expect(client.status).toBe(401);
  // The client's trace id is continued: its own logs join the gateway's.
  expect(await loggedTraceId(before)).toBe(clientTrace);

  before = ratioGateway.logLines().length;
  const proxied = await request(`${ratioGateway.url}${artifact}`, {
    headers: { traceparent: `00-${proxyTrace}-${CLIENT_SPAN_ID}-01` },
    localAddress: PROXY_ADDRESS,
  });
  expect(proxied.status).toBe(401);
  expect(await loggedTraceId(before)).toBe(proxyTrace);

  // The trusted proxy's sampled request reaches Jaeger, and every span the gateway sampled is one
  // of its trace: the client's request (ended first, so exported in the same batch or before)
  // sampled none, and Jaeger holds none of its trace.
  const trace = await jaeger.traceWith(proxyTrace, ['GET /api/v1/repositories/:repo/artifacts/:id', 'arkvory.auth']);
  await expect
    .poll(async () => (await spanCounts(ratioGateway)).exported, { timeout: 10_000 })
    .toBe(trace.spans.length);
  expect((await spanCounts(ratioGateway)).other).toBe(0);
  expect(await jaeger.trace(clientTrace)).toBeUndefined();
}, 60_000);

/** A GET of `target` as written, over a socket of its own; the status line's code. */
function rawGet(url: string, target: string, headers: Record<string, string>): Promise<number> {
  const { hostname, port, host } = new URL(url);
  const head = [`GET ${target} HTTP/1.1`, `Host: ${host}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () =>
      socket.write(`${head.join('\r\n')}\r\nConnection: close\r\n\r\n`),
    );
    let data = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (data += chunk));
    socket.on('end', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(data)?.[1])));
    socket.on('error', reject);
  });
}

it("records an absolute-form target's path without its user info, on the router and on the gateway", async () => {
  const password = 'S3cretPassw0rd-91c2';
  for (const [origin, traceId] of [
    [router.url, 'feedfacefeedfacefeedfacefeed0001'],
    [gateway.url, 'feedfacefeedfacefeedfacefeed0002'],
  ] as const) {
    const target = `http://alice:${password}@${new URL(origin).host}${artifact}/content?x-sig=${QUERY_SECRET}`;
    const status = await rawGet(origin, target, {
      authorization: bearer(key).authorization!,
      traceparent: `00-${traceId}-${CLIENT_SPAN_ID}-01`,
    });
    expect(status).toBe(200);
    const trace =
      origin === router.url
        ? await traceWith(traceId, [CONTENT_SPAN])
        : await jaeger.traceWith(traceId, [CONTENT_SPAN, 'arkvory.auth']);
    const servers = trace.spans.filter((s) => tag(s, 'span.kind') === 'server');
    expect(servers).toHaveLength(origin === router.url ? 2 : 1);
    for (const span of servers) expect(tag(span, 'url.path')).toBe(`${artifact}/content`);
    const text = JSON.stringify(trace);
    expect(text).not.toContain(password);
    expect(text).not.toContain('alice');
    expect(text).not.toContain(QUERY_SECRET);
  }
}, 60_000);
