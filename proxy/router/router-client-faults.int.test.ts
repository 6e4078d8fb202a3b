/**
 * Requests the router cannot forward (a second Host, the rest of what undici refuses, a second
 * Authorization) through a real router process: answered 400 (`malformed_request`, or
 * `duplicate_authorization`) before any gateway sees them, every one counted in
 * `arkvory_router_client_faults_total`, and the router's log bounded however many come.
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { ROUTER_METRICS } from '../metrics/catalogue.ts';
import { ROOT } from '../../test/support/gateway.ts';
import { FAULT_LOG_LINES_PER_INTERVAL } from './client-faults.ts';
import { CLIENT_FAULT_KINDS } from './forwardable.ts';
import { freeLoopbackPort, waitUntil } from '../../test/harness/index.ts';
import { answerHealthProbe } from '../../test/support/health-probe.ts';

const TRACE_SPAN_METRICS = [
  'arkvory_trace_spans_exported_total',
  'arkvory_trace_spans_dropped_total',
  'arkvory_trace_spans_pending',
];
/** The gateway table's families the router's listener shares: its front door and served certificate. */
const LISTENER_METRICS = [
  'arkvory_http_open_connections',
  'arkvory_http_max_connections',
  'arkvory_http_max_pending_handshakes',
  'arkvory_http_connections_refused_total',
  'arkvory_http_idle_connections_closed_total',
  'arkvory_http_client_timeouts_total',
  'arkvory_http2_open_sessions',
  'arkvory_http2_sessions_total',
  'arkvory_tls_certificate_expiry_timestamp_seconds',
  'arkvory_tls_reload_failures_total',
];

let upstream: http.Server;
let upstreamUrl: string;
let proxied = 0;
/** What reached the upstream, in order. */
const seen: Array<{ method: string; url: string; contentLength: string | undefined }> = [];
let router: GatewayProcess;
let metricsPort: number;

beforeAll(async () => {
  upstream = http.createServer((req, res) => {
    if (answerHealthProbe(req, res)) return;
    proxied++;
    seen.push({ method: req.method ?? '', url: req.url ?? '', contentLength: req.headers['content-length'] });
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'));
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  metricsPort = await freeLoopbackPort();
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: upstreamUrl,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
      ARKVORY_METRICS_PORT: String(metricsPort),
    },
    timeoutMs: 60_000,
  });
}, 90_000);

afterAll(async () => {
  await router?.stop('SIGTERM');
  upstream?.closeAllConnections();
  await new Promise((r) => upstream?.close(r));
});

/** Sends `head` as bytes on a fresh connection; resolves with the status and the body. */
function rawExchange(port: number, head: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.end(Buffer.from(head, 'latin1')));
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      resolve({ status, body: text.slice(text.indexOf('\r\n\r\n') + 4) });
    });
  });
}

async function faultCounts(): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const m of text.matchAll(/^arkvory_router_client_faults_total\{kind="([a-z_]+)"\} (\d+)$/gm))
    counts[m[1]!] = Number(m[2]);
  return counts;
}

/** A local request with a known client id (its line's `clientReqId`); resolves once the router's log holds its line. */
async function markLog(clientReqId: string): Promise<void> {
  await (await fetch(`${router.url}/health/live`, { headers: { 'x-request-id': clientReqId } })).arrayBuffer();
  const deadline = Date.now() + 10_000;
  while (!router.logLines().some((l) => l.clientReqId === clientReqId)) {
    if (Date.now() > deadline) throw new Error(`no log line for ${clientReqId}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const dupHost = (port: number) =>
  `GET /api/v1/repositories/r/artifacts/a/content HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nHost: evil.example\r\n\r\n`;

/** Sends `bytes` on a fresh connection kept open (a client waiting for its answer); resolves with the status. */
function rawKeptOpen(port: number, bytes: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(Buffer.from(bytes, 'latin1')));
    let text = '';
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      const head = /^HTTP\/1\.1 (\d{3})[\s\S]*?\r\n\r\n/.exec(text);
      if (!head) return;
      socket.destroy();
      resolve(Number(head[1]));
    });
    socket.on('error', reject);
  });
}

describe('router: request framing', () => {
  it('a Connection header naming Content-Length does not drop it: the body stays the body, nothing is smuggled', async () => {
    const smuggled = `GET /smuggled HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 9.9.9.9\r\n\r\n`;
    for (const method of ['DELETE', 'GET']) {
      seen.length = 0;
      const status = await rawKeptOpen(
        router.port,
        `${method} /api/v1/repositories/r/artifacts/a HTTP/1.1\r\nHost: 127.0.0.1:${router.port}\r\n` +
          `Connection: content-length\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`,
      );
      expect(status, method).toBe(200);
      // One more request through the router after it, on what may be the same upstream connection.
      expect((await fetch(`${router.url}/api/v1/repositories/r/artifacts/b`)).status).toBe(200);
      expect(
        seen.map((r) => r.url),
        method,
      ).toEqual(['/api/v1/repositories/r/artifacts/a', '/api/v1/repositories/r/artifacts/b']);
      expect(seen[0]!.contentLength, method).toBe(String(smuggled.length));
    }
  });
});

describe('router: requests it cannot forward', () => {
  it('answers a GET with two Host headers 400 malformed_request and forwards nothing', async () => {
    const before = proxied;
    const res = await rawExchange(router.port, dupHost(router.port));
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toMatchObject({ code: 'malformed_request' });
    expect(JSON.parse(res.body).message).toMatch(/more than one Host/);
    expect(proxied).toBe(before);
  });

  it('answers an invalid Host value 400 too, on a method that goes over node:http', async () => {
    const res = await rawExchange(router.port, 'HEAD / HTTP/1.1\r\nHost: a b\r\n\r\n');
    expect(res.status).toBe(400);
  });

  it('2,000 duplicate-Host requests: all 400, all counted, the log grows by a bounded number of lines', async () => {
    const N = 2000;
    // Every line of the earlier tests in first (they may still be crossing the router's stdout
    // pipe): the window below then holds this flood's lines alone.
    await markLog('before-flood');
    const counted = (await faultCounts()).duplicate_host ?? 0;
    const before = proxied;
    const linesBefore = router.logLines().length;
    const statuses = new Map<number, number>();
    let next = 0;
    const worker = async () => {
      while (next < N) {
        next++;
        const { status } = await rawExchange(router.port, dupHost(router.port));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
    expect(Object.fromEntries(statuses)).toEqual({ 400: N });
    expect(proxied).toBe(before);
    expect((await faultCounts()).duplicate_host).toBe(counted + N);
    // A marked request after the flood: once its line is in, every line the flood caused is too.
    await markLog('after-flood');
    const written = router
      .logLines()
      .slice(linesBefore)
      .filter((l) => l.clientReqId !== 'after-flood');
    // Only this flood's lines are bounded here, and every line in the window is a client fault's.
    const lines = written.filter((l) => l.kind === 'duplicate_host');
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.length).toBeLessThanOrEqual(FAULT_LOG_LINES_PER_INTERVAL);
    for (const line of written) {
      expect(line).toMatchObject({ level: 'info', code: 'malformed_request' });
      expect(line.err).toBeUndefined();
    }
    expect(JSON.stringify(lines).length).toBeLessThan(FAULT_LOG_LINES_PER_INTERVAL * 400);
  }, 60_000);

  it('500 requests with two Authorization headers: 400 duplicate_authorization, none forwarded, all counted, a bounded number of lines', async () => {
    const N = 500;
    const counted = (await faultCounts()).duplicate_authorization ?? 0;
    const before = proxied;
    const linesBefore = router.logLines().length;
    // Each with an id of its own: the lines it caused are told apart from those of earlier tests.
    const head = (i: number) =>
      `GET /api/v1/admin/rate-limits HTTP/1.1\r\nHost: a\r\nx-request-id: dup-auth-${i}\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n`;
    const codes = new Map<string, number>();
    let next = 0;
    const worker = async () => {
      while (next < N) {
        const { status, body } = await rawExchange(router.port, head(next++));
        const key = `${status} ${(JSON.parse(body) as { code: string }).code}`;
        codes.set(key, (codes.get(key) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
    expect(Object.fromEntries(codes)).toEqual({ '400 duplicate_authorization': N });
    expect(proxied).toBe(before);
    await markLog('after-duplicate-authorization');
    const lines = router
      .logLines()
      .slice(linesBefore)
      .filter((l) => String(l.clientReqId).startsWith('dup-auth-'));
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.length).toBeLessThanOrEqual(FAULT_LOG_LINES_PER_INTERVAL);
    for (const line of lines)
      expect(line).toMatchObject({
        level: 'info',
        msg: 'client fault: request not forwarded',
        kind: 'duplicate_authorization',
        code: 'duplicate_authorization',
      });
    expect((await faultCounts()).duplicate_authorization).toBe(counted + N);
  }, 60_000);

  it('counts heads the HTTP parser refuses as malformed_head', async () => {
    const counted = (await faultCounts()).malformed_head ?? 0;
    const res = await rawExchange(
      router.port,
      'GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n',
    );
    expect(res.status).toBe(400);
    expect((await faultCounts()).malformed_head).toBe(counted + 1);
  });

  it('an upload its client aborts mid-body was forwarded: not counted nor logged as a client fault', async () => {
    // The line of an earlier test's fault (the malformed head just above) may still be crossing
    // the router's stdout pipe: once a marked request's line is in, so is every earlier one.
    await markLog(`before-aborted-uploads-${Date.now()}`);
    const counted = await faultCounts();
    const faultLines = () => router.logLines().filter((l) => l.msg === 'client fault: request not forwarded').length;
    const lines = faultLines();
    const before = proxied;
    for (let i = 0; i < 3; i++) {
      const socket = net.connect(router.port, '127.0.0.1');
      socket.on('error', () => {});
      await new Promise((r) => socket.once('connect', r));
      socket.write(
        `PUT /api/v1/repositories/r/artifacts/aborted${i} HTTP/1.1\r\nHost: 127.0.0.1:${router.port}\r\n` +
          `Content-Length: ${10 * 1024 * 1024}\r\n\r\n`,
      );
      socket.write(Buffer.alloc(64 * 1024));
      // Forwarded: the upstream saw it before the client went away.
      await waitUntil(() => proxied > before + i, { timeoutMs: 5000 });
      // Closed (FIN) in the middle of the body: the router's parser ends in HPE_INVALID_EOF_STATE.
      socket.destroy();
    }
    await markLog(`after-aborted-uploads-${Date.now()}`);
    expect(await faultCounts()).toEqual(counted);
    expect(faultLines()).toBe(lines);
  });

  it('docs/metrics.md lists the router families it exports, every kind declared', async () => {
    const doc = (await readFile(path.join(ROOT, 'docs/metrics.md'), 'utf8')).split('\n## Router metrics')[1]!;
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    for (const spec of ROUTER_METRICS) {
      expect(doc).toContain(
        `| \`${spec.name}\` | ${spec.type} | ${spec.labels.map((l) => `\`${l}\``).join(', ')} | ${spec.help} |`,
      );
      expect(text).toContain(`# TYPE ${spec.name} ${spec.type}`);
    }
    for (const kind of CLIENT_FAULT_KINDS) expect(doc).toContain(`\`${kind}\``);
    // The span export counts too, zero with tracing off (the gateway table documents them).
    for (const name of [...TRACE_SPAN_METRICS, ...LISTENER_METRICS]) {
      // The HTTP/2 families are named together there (the gateway table lists each).
      expect(doc).toContain(name.startsWith('arkvory_http2_') ? '`arkvory_http2_*`' : `\`${name}\``);
      expect(text).toContain(`# TYPE ${name} ${name.endsWith('_total') ? 'counter' : 'gauge'}`);
    }
    expect(text).toMatch(/^arkvory_trace_spans_dropped_total\{reason="export_failed"\} 0$/m);
  });
});
