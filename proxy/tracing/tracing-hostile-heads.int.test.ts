/**
 * What a client puts in a request head does not size the spans and lines of a router and a gateway
 * serving HTTP/2 over TLS, with a real trace backend (Jaeger, test/harness/jaeger.ts). An HTTP/2
 * `:method` is any token the header list holds (node:http's HTTP/1.1 parser takes known methods
 * only): a 12,000-character one is `_OTHER` in spans (named `HTTP`) and in the `request` lines; a
 * long user agent and Host are cut short in the span; a Host port no int64 holds is left out, so
 * the collector does not refuse the export that carries it (and every other span in it).
 */
import http from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { answerHealthProbe } from '../../test/support/health-probe.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  type JaegerServer,
  type JaegerSpan,
  type JaegerTrace,
  startJaeger,
  waitUntil,
} from '../../test/harness/index.ts';
import { ATTRIBUTE_VALUE_LENGTH_LIMIT, SERVER_ADDRESS_LENGTH_LIMIT, USER_AGENT_LENGTH_LIMIT } from './tracing.ts';

const LONG_METHOD = 'M'.repeat(12_000);
const CLIENT_SPAN_ID = 'b7ad6b7169203331';

const db = useTestDatabase();
let jaeger: JaegerServer;
let ca: CertificateAuthority;
let upstream: http.Server;
let gateway: GatewayProcess;
let router: GatewayProcess;

beforeAll(async () => {
  const dir = await makeTempDir('arkvory-hostile-heads-');
  [jaeger, ca] = await Promise.all([startJaeger(), createCertificateAuthority(dir)]);
  const served = await issueServerCertificate(ca, dir);
  const tls = { ARKVORY_TLS_CERT_FILE: served.certFile, ARKVORY_TLS_KEY_FILE: served.keyFile };
  const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpUrl, OTEL_BSP_SCHEDULE_DELAY: '100' };
  // The router's gateway is a stand-in: what the router does with the head is under test, not the gateway.
  upstream = http.createServer((req, res) => {
    if (answerHealthProbe(req, res)) return;
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'));
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  [gateway, router] = await Promise.all([
    startGateway({
      env: { ...tls, ...otel, OTEL_SERVICE_NAME: 'arkvory-gateway', ARKVORY_DATABASE_URL: db.url },
      waitFor: 'none',
      timeoutMs: 90_000,
    }),
    startGateway({
      env: {
        ...tls,
        ...otel,
        OTEL_SERVICE_NAME: 'arkvory-router',
        ARKVORY_ROLE: 'router',
        ARKVORY_ROUTER_BACKENDS: upstreamUrl,
      },
      waitFor: 'none',
      timeoutMs: 90_000,
    }),
  ]);
  for (const process of [gateway, router])
    await waitUntil(async () => (await h2(process, { ':path': '/health/live' })) === 200, {
      what: `${process.name} to answer over HTTP/2`,
      timeoutMs: 60_000,
      intervalMs: 100,
      retryOnError: true,
      process,
    });
}, 180_000);

afterAll(async () => {
  await router?.stop();
  await gateway?.stop();
  await jaeger?.stop();
  upstream?.closeAllConnections();
  await new Promise((r) => upstream?.close(r));
});

/** One request over a fresh HTTP/2 connection (TLS, ALPN h2); resolves with its status. */
function h2(to: GatewayProcess, headers: http2.OutgoingHttpHeaders): Promise<number> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${to.port}`, { ca: ca.certPem });
    session.on('error', reject);
    const req = session.request({ ':method': 'GET', ...headers }, { endStream: true });
    let status = 0;
    req.on('response', (head) => (status = Number(head[':status'])));
    req.on('error', reject);
    req.resume();
    req.on('close', () => {
      session.close();
      resolve(status);
    });
  });
}

const traceparent = (traceId: string) => `00-${traceId}-${CLIENT_SPAN_ID}-01`;

function tag(span: JaegerSpan, name: string): unknown {
  return span.tags.find((t) => t.key === name)?.value;
}

function service(trace: JaegerTrace, span: JaegerSpan): string | undefined {
  return trace.processes[span.processID]?.serviceName;
}

/** The server span of `serviceName` in trace `traceId`, once Jaeger holds it. */
async function serverSpan(traceId: string, serviceName: string): Promise<JaegerSpan> {
  const trace = await jaeger.traceWith(traceId, [serviceName], { spanKey: (s, t) => service(t, s) ?? '' });
  const span = trace.spans.find((s) => service(trace, s) === serviceName && tag(s, 'span.kind') === 'server');
  expect(span).toBeDefined();
  // Nothing of the head is copied whole: no name and no string attribute past the bound.
  expect(span!.operationName.length).toBeLessThan(100);
  for (const t of span!.tags)
    if (typeof t.value === 'string') expect(t.value.length, t.key).toBeLessThanOrEqual(ATTRIBUTE_VALUE_LENGTH_LIMIT);
  return span!;
}

/** The `request` line of the request whose client sent `clientReqId` (router and gateway log it so), once `process` wrote it. */
async function requestLine(process: GatewayProcess, clientReqId: string): Promise<Record<string, unknown>> {
  const line = () => process.logLines().find((l) => l.msg === 'request' && l.clientReqId === clientReqId);
  await waitUntil(() => line() !== undefined, { what: `the request line of ${clientReqId}`, timeoutMs: 5000 });
  return line()!;
}

it('a 12,000-character HTTP/2 method is _OTHER in the router span (named HTTP) and in its request line', async () => {
  const traceId = '1af7651916cd43dd8448eb211c803100';
  const linesBefore = router.logLines().length;
  const bytesBefore = router.logs().length;
  const status = await h2(router, {
    ':method': LONG_METHOD,
    ':path': '/api/v1/repositories/r/artifacts/a/content',
    traceparent: traceparent(traceId),
    'x-request-id': 'long-method',
  });
  expect(status).toBeGreaterThan(0);
  const line = await requestLine(router, 'long-method');
  expect(line.method).toBe('_OTHER');
  const span = await serverSpan(traceId, 'arkvory-router');
  expect(span.operationName).toBe('HTTP');
  expect(tag(span, 'http.request.method')).toBe('_OTHER');
  // Whatever else the request caused, none of it holds the method.
  const written = router.logLines().slice(linesBefore);
  expect(JSON.stringify(written)).not.toContain('M'.repeat(64));
  expect(router.logs().length - bytesBefore).toBeLessThan(4000);
}, 60_000);

it('a long user agent and Host are cut short in the router span', async () => {
  const traceId = '1af7651916cd43dd8448eb211c803101';
  const status = await h2(router, {
    ':path': '/api/v1/repositories/r/artifacts/a/content',
    ':authority': `${'h'.repeat(3000)}:443`,
    'user-agent': 'u'.repeat(3000),
    traceparent: traceparent(traceId),
  });
  expect(status).toBe(200);
  const span = await serverSpan(traceId, 'arkvory-router');
  expect(span.operationName).toBe('GET');
  expect(tag(span, 'user_agent.original')).toBe('u'.repeat(USER_AGENT_LENGTH_LIMIT));
  expect(tag(span, 'server.address')).toBe('h'.repeat(SERVER_ADDRESS_LENGTH_LIMIT));
  expect(tag(span, 'server.port')).toBe(443);
}, 60_000);

it('a 12,000-character HTTP/2 method is _OTHER in the gateway span (HTTP unmatched) and its request line', async () => {
  const traceId = '1af7651916cd43dd8448eb211c803102';
  const bytesBefore = gateway.logs().length;
  const status = await h2(gateway, {
    ':method': LONG_METHOD,
    ':path': '/no/such/route',
    traceparent: traceparent(traceId),
    'x-request-id': 'long-method',
  });
  expect(status).toBe(404);
  expect((await requestLine(gateway, 'long-method')).method).toBe('_OTHER');
  const span = await serverSpan(traceId, 'arkvory-gateway');
  expect(span.operationName).toBe('HTTP unmatched');
  expect(tag(span, 'http.request.method')).toBe('_OTHER');
  expect(gateway.logs().length - bytesBefore).toBeLessThan(4000);
}, 60_000);

it('a Host whose port is no port number costs no span its export: server.port is left out, the spans exported with it arrive', async () => {
  const hostile = '1af7651916cd43dd8448eb211c803103';
  const beside = '1af7651916cd43dd8448eb211c803104';
  const path = '/api/v1/repositories/r/artifacts/a/content';
  // One batch: both requests end within the same schedule delay. A port of 30 digits is an integer
  // no int64 holds; sent as one, the collector refuses the whole export.
  const statuses = await Promise.all([
    h2(router, { ':path': path, ':authority': 'h:123456789012345678901234567890', traceparent: traceparent(hostile) }),
    h2(router, { ':path': path, traceparent: traceparent(beside) }),
  ]);
  expect(statuses).toEqual([200, 200]);
  const span = await serverSpan(hostile, 'arkvory-router');
  expect(tag(span, 'server.address')).toBe('h');
  expect(tag(span, 'server.port')).toBeUndefined();
  await serverSpan(beside, 'arkvory-router');
}, 60_000);
