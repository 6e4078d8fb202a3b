/**
 * `arkvory_http_requests_total` and `…_request_duration_seconds` count every answered request once
 * with its status, whichever part of the gateway answered: the route table (404, 405), each gate
 * (401, 403 of a key without the grant or scope, 403 of a cross-site write, 429), and the front
 * door itself (503 over the connection bound, 503 while draining), on a real gateway over real
 * sockets, read from its loopback metrics port (a listener of its own, outside the bound).
 */
import net from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  freeLoopbackPort,
  readsByPrincipal,
  roomInWindow,
  waitUntil,
  writeRateLimitsFile,
} from '../../test/harness/index.ts';

const REPO = 'statuses';
const ARTIFACT = '/api/v1/repositories/:repo/artifacts/:id';
const MAX_CONNECTIONS = 8;

let db: TestDatabase & { drop(): Promise<void> };
let gw: GatewayProcess;
let metricsUrl: string;
let writer: { key: string };
let readOnly: { key: string };
let limited: { key: string };
const held: net.Socket[] = [];

/** `arkvory_http_requests_total` (or the histogram's `_count`) by `method status route`. */
async function requestCounts(family = 'arkvory_http_requests_total'): Promise<Map<string, number>> {
  const res = await request(metricsUrl);
  expect(res.status).toBe(200);
  const counts = new Map<string, number>();
  for (const line of res.body.toString().split('\n')) {
    if (!line.startsWith(`${family}{`)) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));
    counts.set(`${labels.method} ${labels.status} ${labels.route}`, Number(line.slice(line.lastIndexOf(' ') + 1)));
  }
  return counts;
}

/** What was counted since `before`, the series that did not move left out. */
async function countedSince(before: Map<string, number>, family?: string): Promise<Record<string, number>> {
  const added: Record<string, number> = {};
  for (const [series, n] of await requestCounts(family))
    if (n !== (before.get(series) ?? 0)) added[series] = n - (before.get(series) ?? 0);
  return added;
}

async function uploadsActive(): Promise<number> {
  const res = await request(metricsUrl);
  const line = res.body
    .toString()
    .split('\n')
    .find((l) => l.startsWith('arkvory_admission_active{') && l.includes('kind="upload"'));
  return Number(line?.slice(line.lastIndexOf(' ') + 1));
}

/** An upload whose head is sent and whose body never comes: a request in progress on its connection. */
function holdUpload(port: number, key: string, id: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' }, () => {
      socket.write(
        `PUT /api/v1/repositories/${REPO}/artifacts/${id} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
          `Authorization: Bearer ${key}\r\nContent-Length: 16\r\n\r\n`,
      );
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

beforeAll(async () => {
  db = await createTestDatabase();
  await createRepository(db.pool, REPO);
  writer = await createServiceAccount(db.pool, { grants: { [REPO]: 'write' } });
  readOnly = await createServiceAccount(db.pool, { scopes: ['read'], grants: { [REPO]: 'read' } });
  limited = await createServiceAccount(db.pool, { scopes: ['read'], grants: { [REPO]: 'read' } });
  const metricsPort = await freeLoopbackPort();
  metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
  gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_METRICS_PORT: String(metricsPort),
      ARKVORY_MAX_CONNECTIONS: String(MAX_CONNECTIONS),
      ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: String(MAX_CONNECTIONS),
      // One read an hour per principal: the limited key's second read is a 429 (both in one window, below).
      ARKVORY_RATE_LIMITS_FILE: await writeRateLimitsFile({ gateway_request: [readsByPrincipal('one_read', 1, 3600)] }),
    },
  });
}, 90_000);

afterAll(async () => {
  for (const socket of held) socket.destroy();
  await db?.drop();
});

it('every answer is counted once with its status, whichever gate or the front door gave it', async () => {
  const url = (id: string) => `${gw.url}/api/v1/repositories/${REPO}/artifacts/${id}`;
  const before = await requestCounts();
  const beforeDurations = await requestCounts('arkvory_http_request_duration_seconds_count');
  // Windows follow the wall clock: the limited key's two reads must not straddle an hour's end.
  await roomInWindow(3_600_000, 10_000);
  const statuses = [
    // A key without the write scope or grant; a browser's write for another site; no valid key.
    (await request(url('a.bin'), { method: 'PUT', headers: bearer(readOnly.key), body: Buffer.from('x') })).status,
    (
      await request(url('a.bin'), {
        method: 'PUT',
        headers: { ...bearer(writer.key), 'sec-fetch-site': 'cross-site' },
        body: Buffer.from('x'),
      })
    ).status,
    (await request(url('a.bin'), { headers: bearer('ark_notarealkey') })).status,
    (await request(`${gw.url}/no/such/route`)).status,
    (await request(url('a.bin'), { method: 'PATCH', headers: bearer(writer.key) })).status,
    (await request(url('a.bin'), { headers: bearer(limited.key) })).status,
    (await request(url('a.bin'), { headers: bearer(limited.key) })).status,
  ];
  expect(statuses).toEqual([403, 403, 401, 404, 405, 404, 429]);

  // Every connection of the bound holds an upload in progress: the next request is the front door's 503.
  for (let i = 0; i < MAX_CONNECTIONS; i++) held.push(await holdUpload(gw.port, writer.key, `held-${i}.bin`));
  await waitUntil(async () => (await uploadsActive()) === MAX_CONNECTIONS, { what: 'the held uploads admitted' });
  const overloaded = await request(url('a.bin'), { headers: bearer(writer.key) });
  expect(overloaded.status).toBe(503);
  expect(overloaded.headers['x-request-id']).toBeDefined();

  // One upload keeps the process draining; a request then gets the drain's 503.
  for (const socket of held.splice(1)) socket.destroy();
  await waitUntil(async () => (await uploadsActive()) === 1, { what: 'the released uploads ended' });
  gw.child.kill('SIGTERM');
  let draining = 0;
  const answered: Record<number, number> = {};
  await waitUntil(
    async () => {
      const res = await request(`${gw.url}/no/such/route`);
      answered[res.status] = (answered[res.status] ?? 0) + 1;
      if (res.status === 503) draining++;
      return draining > 0;
    },
    { what: 'a request refused while draining' },
  );
  // Before the drain began: the route table's 404.
  expect(Object.keys(answered).filter((status) => status !== '404' && status !== '503')).toEqual([]);

  const expected: Record<string, number> = {
    [`PUT 403 ${ARTIFACT}`]: 2,
    [`GET 401 ${ARTIFACT}`]: 1,
    'GET 404 unmatched': 1 + (answered[404] ?? 0),
    [`PATCH 405 ${ARTIFACT}`]: 1,
    [`GET 404 ${ARTIFACT}`]: 1,
    [`GET 429 ${ARTIFACT}`]: 1,
    // The uploads cut by the test (the client gone before any answer).
    [`PUT 499 ${ARTIFACT}`]: MAX_CONNECTIONS - 1,
    // Refused before any route matched: over the bound, then while draining.
    'GET 503 unmatched': 1 + draining,
  };
  expect(await countedSince(before)).toEqual(expected);
  expect(await countedSince(beforeDurations, 'arkvory_http_request_duration_seconds_count')).toEqual(expected);

  held.shift()?.destroy();
  expect(await gw.exited).toBe(0);
});
