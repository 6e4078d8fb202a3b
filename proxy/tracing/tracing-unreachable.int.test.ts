/**
 * Tracing with no collector listening (a closed loopback port): downloads are served as before, the
 * request line carries the trace id of the client's `traceparent` (logs and traces join), and the
 * spans that could not be sent are counted in `arkvory_trace_spans_dropped_total`, the outage
 * logged once.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { freeLoopbackPort } from '../../test/harness/index.ts';

const REPO = 'traced';
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const TRACEPARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`;

let db: TestDatabase & { drop(): Promise<void> };
let gateway: GatewayProcess;
let key: string;

beforeAll(async () => {
  db = await createTestDatabase();
  await createRepository(db.pool, REPO);
  key = (await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { [REPO]: 'write' } })).key;
  // Nothing listens there: every export fails at connect.
  const closedPort = await freeLoopbackPort();
  gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${closedPort}`,
      OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_EXPORTER_OTLP_TIMEOUT: '2000',
    },
    timeoutMs: 90_000,
  });
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  await db?.drop();
});

async function dropped(): Promise<number> {
  const res = await request(`${gateway.url}/metrics`);
  const line = /^arkvory_trace_spans_dropped_total\{reason="export_failed"\} (\d+)$/m.exec(res.body.toString());
  return Number(line?.[1] ?? Number.NaN);
}

it('serves downloads, continues the client trace in the request line, and counts the spans it could not send', async () => {
  const body = randomContent(4096);
  const artifact = `/api/v1/repositories/${REPO}/artifacts/one.bin`;
  expect((await request(`${gateway.url}${artifact}`, { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
  expect(await dropped()).toBe(0);
  for (let i = 0; i < 5; i++) {
    const res = await request(`${gateway.url}${artifact}/content`, {
      headers: { ...bearer(key), traceparent: TRACEPARENT },
    });
    expect(res.status).toBe(200);
    expect(Buffer.compare(res.body, body)).toBe(0);
  }
  // The line is written when the response closes, which may follow the client's last byte.
  const lines = () =>
    gateway
      .logLines()
      .filter((l) => l.msg === 'request' && typeof l.route === 'string' && l.route.endsWith('/content'));
  await expect.poll(() => lines().length, { timeout: 5000 }).toBe(5);
  for (const line of lines()) expect(line.traceId).toBe(TRACE_ID);
  await expect.poll(dropped, { timeout: 20_000, interval: 200 }).toBeGreaterThanOrEqual(5);
  // The outage is in the log once, with why, however many exports fail in it; nothing at error.
  const outage = gateway.logLines().filter((l) => String(l.msg).startsWith('tracing: span exports failing'));
  expect(outage).toHaveLength(1);
  expect(outage[0]).toMatchObject({ level: 'warn', reason: 'ECONNREFUSED' });
  expect(gateway.logLines().filter((l) => l.level === 'error' || l.level === 'fatal')).toEqual([]);
  // Never a key in a log line, tracing or not.
  expect(gateway.logs()).not.toContain(key);
}, 120_000);
