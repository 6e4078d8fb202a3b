/**
 * The gateway↔collector link blackholed (toxiproxy `timeout` toxic with timeout 0: bytes swallowed,
 * the connection never closed) while a real Jaeger sits behind it.
 * Expected: every download is served, none waits anywhere near the export timeout (export is off
 * the request path), `arkvory_trace_spans_dropped_total` rises, and the spans waiting for export
 * never exceed OTEL_BSP_MAX_QUEUE_SIZE (memory bounded). Recovery: once the link is back, a new
 * download's trace reaches Jaeger.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { randomContent, request } from '../test/support/content.ts';
import type { TestDatabase } from '../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../test/support/gateway.ts';
import { type JaegerServer, startJaeger } from '../test/harness/index.ts';
import { chaosDatabase } from './support/chaos-database.ts';
import { type ProxiedUpstream, startToxiproxy, type ToxiproxyServer } from './support/toxiproxy.ts';

const MAX_QUEUE = 64;
const EXPORT_TIMEOUT_MS = 10_000;
const DOWNLOADS = 150;
const CONCURRENCY = 4;
const artifact = '/api/v1/repositories/chaos/artifacts/traced.bin';

let toxiproxy: ToxiproxyServer;
let jaeger: JaegerServer;
let db: TestDatabase & { drop(): Promise<void> };
let link: ProxiedUpstream;
let gateway: GatewayProcess;
let key: string;

beforeAll(async () => {
  [toxiproxy, jaeger, { db, key }] = await Promise.all([startToxiproxy(), startJaeger(), chaosDatabase()]);
  link = await toxiproxy.proxyTo(`127.0.0.1:${jaeger.otlpPort}`);
  gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://${link.host}:${link.port}`,
      OTEL_SERVICE_NAME: 'arkvory-blackhole',
      OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_BSP_MAX_QUEUE_SIZE: String(MAX_QUEUE),
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '16',
      OTEL_EXPORTER_OTLP_TIMEOUT: String(EXPORT_TIMEOUT_MS),
      OTEL_BSP_EXPORT_TIMEOUT: String(EXPORT_TIMEOUT_MS),
    },
    timeoutMs: 90_000,
  });
}, 180_000);

afterAll(async () => {
  await gateway?.stop();
  await toxiproxy?.stop();
  await jaeger?.stop();
  await db?.drop();
});

interface SpanCounts {
  exported: number;
  dropped: number;
  pending: number;
}

async function spanCounts(): Promise<SpanCounts> {
  const text = (await request(`${gateway.url}/metrics`)).body.toString();
  const sum = (pattern: RegExp) => [...text.matchAll(pattern)].reduce((n, m) => n + Number(m[1]), 0);
  return {
    exported: sum(/^arkvory_trace_spans_exported_total (\S+)$/gm),
    dropped: sum(/^arkvory_trace_spans_dropped_total\{reason="[a-z_]+"\} (\S+)$/gm),
    pending: sum(/^arkvory_trace_spans_pending (\S+)$/gm),
  };
}

/** Downloads `artifact` once with a fresh trace id; its status, elapsed ms and trace id. */
async function download(n: number): Promise<{ status: number; ms: number; traceId: string }> {
  const traceId = `${n.toString(16).padStart(8, '0')}${'a'.repeat(24)}`;
  const started = performance.now();
  const res = await request(`${gateway.url}${artifact}/content`, {
    headers: { authorization: `Bearer ${key}`, traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
  });
  return { status: res.status, ms: performance.now() - started, traceId };
}

it('serves every download with the collector blackholed, counts the dropped spans, keeps the queue bounded, and recovers', async () => {
  const body = randomContent(4096);
  const put = await request(`${gateway.url}${artifact}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${key}` },
    body,
  });
  expect(put.status).toBe(201);
  // Healthy link: spans arrive.
  const before = await download(1);
  expect(before.status).toBe(200);
  await expect.poll(() => jaeger.trace(before.traceId), { timeout: 20_000, interval: 200 }).toBeDefined();
  const healthy = await spanCounts();
  expect(healthy.exported).toBeGreaterThan(0);

  const blackhole = await link.proxy.addToxic({
    name: 'blackhole',
    type: 'timeout',
    stream: 'upstream',
    toxicity: 1,
    attributes: { timeout: 0 },
  });
  const results: Array<{ status: number; ms: number }> = [];
  let maxPending = 0;
  let next = 2;
  const worker = async () => {
    while (next < DOWNLOADS + 2) {
      results.push(await download(next++));
      if (next % 10 === 0) maxPending = Math.max(maxPending, (await spanCounts()).pending);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  expect(results.filter((r) => r.status !== 200)).toEqual([]);
  expect(results).toHaveLength(DOWNLOADS);
  // A request that waited for the export would take the export timeout at least.
  expect(Math.max(...results.map((r) => r.ms))).toBeLessThan(EXPORT_TIMEOUT_MS);
  // Each download makes several spans: far more than the queue holds, so most are dropped.
  await expect
    .poll(async () => (await spanCounts()).dropped, { timeout: 20_000, interval: 200 })
    .toBeGreaterThan(healthy.dropped + DOWNLOADS);
  const during = await spanCounts();
  expect(Math.max(maxPending, during.pending)).toBeLessThanOrEqual(MAX_QUEUE);

  // The link back: once the held exports are answered or timed out (the queue drains), the next
  // download's trace gets through again; one made before that could find the queue still full.
  // Drained reads 2, not 0: the scrape's own auth and rate-limit spans have just ended when the
  // gauge is read.
  await blackhole.remove();
  await expect
    .poll(async () => (await spanCounts()).pending, { timeout: 3 * EXPORT_TIMEOUT_MS, interval: 250 })
    .toBeLessThanOrEqual(2);
  const after = await download(DOWNLOADS + 100);
  expect(after.status).toBe(200);
  await expect.poll(() => jaeger.trace(after.traceId), { timeout: 30_000, interval: 250 }).toBeDefined();
  expect((await spanCounts()).exported).toBeGreaterThan(healthy.exported);
  expect(gateway.logs()).not.toContain(key);
}, 180_000);
