/**
 * A collector that answers each export's head at once and then trickles its body, a byte every
 * 300 ms, for ever (a fault injector in this file): the transport's idle timeout never fires, yet
 * each export is given up after OTEL_EXPORTER_OTLP_TIMEOUT, counted as `export_failed`, and its
 * spans leave the pending bound, so the queue keeps emptying instead of staying full. The gateway
 * still stops cleanly: its shutdown waits for the exporter no longer than the timeout either.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';

const REPO = 'trickled';
const MAX_QUEUE = 16;

let db: TestDatabase & { drop(): Promise<void> };
let gateway: GatewayProcess;
let key: string;
let collector: http.Server;
let posts = 0;
const trickles = new Set<NodeJS.Timeout>();
/** Exports whose answer is trickling now: the gateway has not yet let go of them. */
let held = 0;

beforeAll(async () => {
  collector = http.createServer((req, res) => {
    posts++;
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const trickle = setInterval(() => res.write(' '), 300);
      trickles.add(trickle);
      held++;
      res.on('close', () => {
        held--;
        clearInterval(trickle);
      });
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  const port = (collector.address() as AddressInfo).port;
  db = await createTestDatabase();
  await createRepository(db.pool, REPO);
  key = (await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { [REPO]: 'write' } })).key;
  gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
      OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_EXPORTER_OTLP_TIMEOUT: '1000',
      OTEL_BSP_EXPORT_TIMEOUT: '1000',
      OTEL_BSP_MAX_QUEUE_SIZE: String(MAX_QUEUE),
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4',
    },
    timeoutMs: 90_000,
  });
}, 180_000);

afterAll(async () => {
  await gateway?.stop();
  for (const trickle of trickles) clearInterval(trickle);
  collector?.closeAllConnections();
  collector?.close();
  await db?.drop();
});

async function metric(name: string): Promise<number> {
  const res = await request(`${gateway.url}/metrics`);
  const line = res.body
    .toString()
    .split('\n')
    .find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

it('an export the collector answers too slowly is given up after the OTLP timeout, and the queue empties', async () => {
  const body = randomContent(1024);
  const artifact = `/api/v1/repositories/${REPO}/artifacts/one.bin`;
  expect((await request(`${gateway.url}${artifact}`, { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
  for (let i = 0; i < 40; i++) {
    const res = await request(`${gateway.url}${artifact}/content`, { headers: bearer(key) });
    expect(res.status).toBe(200);
  }
  // Far more spans than the bound were ended: at least a full queue of them handed to exports that
  // the collector never finishes answering.
  await expect.poll(() => posts, { timeout: 20_000 }).toBeGreaterThan(0);
  // Every held export is given up and counted, however long the trickle lasts: more spans fail
  // than the bound could hold at once, so the same slots were freed and used again.
  await expect
    .poll(() => metric('arkvory_trace_spans_dropped_total{reason="export_failed"}'), { timeout: 60_000, interval: 500 })
    .toBeGreaterThanOrEqual(2 * MAX_QUEUE);
  // The bound is not held full by exports that never end.
  await expect
    .poll(() => metric('arkvory_trace_spans_pending'), { timeout: 60_000, interval: 500 })
    .toBeLessThan(MAX_QUEUE);
  expect(await metric('arkvory_trace_spans_exported_total')).toBe(0);
  // Nor are the connections, nor the batches they were sending: an export given up is cut, so the
  // gateway holds only the exports still within their deadline, not one per timeout for as long as
  // the collector trickles (each pinning its serialised batch, up to the exporter's 30).
  expect(posts).toBeGreaterThan(3);
  await expect.poll(() => held, { timeout: 5_000, interval: 100 }).toBeLessThanOrEqual(2);
  // One outage, however many exports were given up in it: one line, its reason the deadline.
  const outage = gateway.logLines().filter((l) => String(l.msg).startsWith('tracing: span exports'));
  expect(outage).toEqual([expect.objectContaining({ level: 'warn', reason: 'export_timeout' })]);
  // Shutdown waits for the exporter at most the export timeout, not for the trickle to end.
  expect(await gateway.stop('SIGTERM', 60_000)).toBe(0);
}, 180_000);
