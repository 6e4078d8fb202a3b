/**
 * Failover that follows the store, against a real router process and in-test HTTP servers standing in
 * for gateways (static ARKVORY_ROUTER_BACKENDS, writer first): a 504 from one gateway is retried on
 * another before any byte reaches the client, byte-exact and with the client's Range; a gateway whose
 * /health/status reports its store unreachable gets no reads; outlier detection ejects a gateway that
 * keeps answering 5xx where the others serve, and none for a read that fails on every gateway; with every store down the router still tries the gateways (once, then once
 * more) and answers their 503 `store_unreachable`.
 */
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from '../../test/support/content.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { freeLoopbackPort, waitUntil } from '../../test/harness/index.ts';

const PROBE_MS = 200;
const BYTES = randomBytes(256 * 1024 + 13);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const contentPath = (name: string) => `/api/v1/repositories/r/artifacts/${name}/content`;

interface StandIn {
  readonly name: string;
  url: string;
  server: http.Server;
  /** Store state reported on /health/status. */
  store: 'ok' | 'unreachable';
  /** Per path: statuses to answer before serving the bytes (shifted one per request). */
  failures: Map<string, number[]>;
  /** Every proxied request seen: path and the headers that must travel unchanged. */
  seen: Array<{ path: string; range: string | undefined; ifNoneMatch: string | undefined; reqId: string }>;
}

/** Per path: statuses the next requests answer, whichever gateway gets them. */
const anyGateway = new Map<string, number[]>();
/** Per path: the status every request answers on every gateway (a damaged object, say). */
const everyGateway = new Map<string, number>();

function errorCode(status: number): string {
  return status === 502
    ? 'slice_digest_mismatch'
    : status === 503
      ? 'store_unreachable'
      : status === 504
        ? 'upstream_timeout'
        : 'internal';
}

async function startStandIn(name: string): Promise<StandIn> {
  const up: StandIn = { name, url: '', server: undefined as never, store: 'ok', failures: new Map(), seen: [] };
  up.server = http.createServer((req, res) => {
    if (req.url === '/health/status') {
      const body = JSON.stringify({
        status: 'serving',
        store: {
          state: up.store,
          since: new Date().toISOString(),
          lastError: up.store === 'ok' ? null : { code: 'upstream_timeout', at: new Date().toISOString() },
        },
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      return;
    }
    const path = req.url!.split('?')[0]!;
    up.seen.push({
      path,
      range: req.headers.range,
      ifNoneMatch: req.headers['if-none-match'],
      reqId: String(req.headers['x-request-id']),
    });
    const planned = up.failures.get(path)?.shift() ?? anyGateway.get(path)?.shift() ?? everyGateway.get(path);
    const status = planned ?? (up.store === 'unreachable' ? 503 : undefined);
    if (status !== undefined) {
      const body = JSON.stringify({ code: errorCode(status), message: `${name} failed` });
      res.writeHead(status, { 'content-type': 'application/json', 'retry-after': '2' }).end(body);
      return;
    }
    const headers = { etag: '"v1"', 'accept-ranges': 'bytes', 'x-upstream': name };
    const match = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    if (match) {
      const [start, end] = [Number(match[1]), Number(match[2])];
      res
        .writeHead(206, { ...headers, 'content-range': `bytes ${start}-${end}/${BYTES.length}` })
        .end(BYTES.subarray(start, end + 1));
    } else res.writeHead(200, { ...headers, 'content-length': String(BYTES.length) }).end(BYTES);
  });
  await new Promise<void>((resolve) => up.server.listen(0, '127.0.0.1', resolve));
  up.url = `http://127.0.0.1:${(up.server.address() as AddressInfo).port}`;
  return up;
}

let gateways: StandIn[];
let router: GatewayProcess;
let metricsPort: number;

async function metric(line: RegExp): Promise<number> {
  const res = await request(`http://127.0.0.1:${metricsPort}/metrics`);
  const found = res.body
    .toString()
    .split('\n')
    .find((l) => line.test(l));
  return found ? Number(found.split(' ').at(-1)) : Number.NaN;
}

/**
 * The router's own id of the request whose client sent `clientId` (its request line, written as
 * the response ends): the id it forwards, and so the one the stand-in gateways saw.
 */
async function routerIdOf(clientId: string): Promise<string> {
  let line: Record<string, unknown> | undefined;
  await waitUntil(
    () => (line = router.logLines().find((l) => l.msg === 'request' && l.clientReqId === clientId)) !== undefined,
    { what: `the router's request line for ${clientId}`, timeoutMs: 5000, intervalMs: 20 },
  );
  return String(line!.reqId);
}

const routerStatus = async () =>
  JSON.parse((await request(`${router.url}/health/status`)).body.toString()) as {
    backends: { total: number; healthy: number; reads: number; storeUnreachable: number; ejected: number };
  };

beforeAll(async () => {
  gateways = await Promise.all(['writer', 'reader1', 'reader2'].map(startStandIn));
  metricsPort = await freeLoopbackPort(); // claimed for the run: no other file's process is given it
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: gateways.map((g) => g.url).join(','),
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: String(PROBE_MS),
      ARKVORY_ROUTER_OUTLIER_CONSECUTIVE_5XX: '3',
      ARKVORY_ROUTER_OUTLIER_BASE_EJECTION_SECONDS: '2',
      ARKVORY_METRICS_PORT: String(metricsPort),
    },
    timeoutMs: 60_000,
  });
}, 90_000);

afterAll(async () => {
  await router?.stop('SIGTERM');
  for (const up of gateways ?? []) {
    up.server.closeAllConnections();
    await new Promise((r) => up.server.close(r));
  }
});

describe('router failover with stand-in gateways', () => {
  it('a gateway that answers 504 once: the retry serves the client from another gateway, byte-exact, Range and conditionals unchanged', async () => {
    const retriesBefore = await metric(/^arkvory_router_retries_total\{reason="gateway_504"\}/);
    // The first request for this path answers 504, whichever gateway the router picks.
    anyGateway.set(contentPath('once'), [504]);
    const range = 'bytes=100-65635';
    const res = await request(`${router.url}${contentPath('once')}`, {
      headers: { range, 'if-none-match': '"old"', 'x-request-id': 'retry-504' },
    });
    expect(res.status).toBe(206);
    expect(sha(res.body)).toBe(sha(BYTES.subarray(100, 65636)));
    expect(res.headers['content-range']).toBe(`bytes 100-65635/${BYTES.length}`);
    expect(res.headers['x-request-id']).toBe('retry-504');
    // Both attempts carried the router's own id for the request (one id), never the client's.
    const routerId = await routerIdOf('retry-504');
    const tries = gateways.flatMap((g) => g.seen.filter((s) => s.reqId === routerId).map((s) => ({ g: g.name, ...s })));
    expect(tries).toHaveLength(2);
    expect(tries[0]!.g).not.toBe(tries[1]!.g);
    for (const t of tries) expect(t).toMatchObject({ range, ifNoneMatch: '"old"' });
    expect(tries.map((t) => t.g)).toContain(res.headers['x-upstream']);
    expect(await metric(/^arkvory_router_retries_total\{reason="gateway_504"\}/)).toBe(retriesBefore + 1);
    const line = router.logLines().find((l) => l.reqId === routerId && String(l.msg).includes('retrying once'));
    expect(line).toMatchObject({ level: 'info', status: 504, clientReqId: 'retry-504' });
    expect(router.logLines().find((l) => l.reqId === routerId && l.msg === 'request')).toMatchObject({
      attempts: 2,
      status: 206,
    });
  });

  it('a read that fails the same on every gateway (a damaged object: 502 slice_digest_mismatch) ejects none; reads still spread over all', async () => {
    const ejectionsBefore = await metric(/^arkvory_router_ejections_total/);
    everyGateway.set(contentPath('damaged'), 502);
    // Any client can ask again and again: 50 reads, each tried on two gateways, far past 3 in a row.
    for (let i = 0; i < 50; i++) {
      const res = await request(`${router.url}${contentPath('damaged')}`);
      expect(res.status).toBe(502);
      expect(JSON.parse(res.body.toString())).toMatchObject({ code: 'slice_digest_mismatch' });
    }
    everyGateway.delete(contentPath('damaged'));
    expect(await metric(/^arkvory_router_ejections_total/)).toBe(ejectionsBefore);
    expect((await routerStatus()).backends.ejected).toBe(0);
    const served = new Set<string>();
    for (let i = 0; i < 9; i++)
      served.add(String((await request(`${router.url}${contentPath('a')}`)).headers['x-upstream']));
    expect(served).toEqual(new Set(['writer', 'reader1', 'reader2']));
  });

  it('a gateway whose store is unreachable gets no reads within 2 probe intervals, and takes reads again once it reports the store back', async () => {
    const reader1 = gateways[1]!;
    reader1.store = 'unreachable';
    const changedAt = performance.now();
    await waitUntil(async () => (await routerStatus()).backends.storeUnreachable === 1, {
      what: 'the router to see reader1 store unreachable',
      timeoutMs: 5000,
      intervalMs: 20,
    });
    expect(performance.now() - changedAt).toBeLessThanOrEqual(2 * PROBE_MS + 500);
    const before = reader1.seen.length;
    for (let i = 0; i < 12; i++) {
      const res = await request(`${router.url}${contentPath('a')}`);
      expect(res.status).toBe(200);
      expect(sha(res.body)).toBe(sha(BYTES));
    }
    expect(reader1.seen.length).toBe(before);
    expect(await metric(/^arkvory_router_gateways\{state="store_unreachable"\}/)).toBe(1);
    reader1.store = 'ok';
    await waitUntil(async () => (await routerStatus()).backends.reads === 3, {
      what: 'reader1 back in reads',
      timeoutMs: 5000,
      intervalMs: 20,
    });
    const served = new Set<string>();
    for (let i = 0; i < 9; i++)
      served.add(String((await request(`${router.url}${contentPath('a')}`)).headers['x-upstream']));
    expect(served).toEqual(new Set(['writer', 'reader1', 'reader2']));
  });

  it('outlier detection: 3 consecutive 5xx that another gateway did not give eject a gateway from reads for the base period; clients never see them', async () => {
    const reader2 = gateways[2]!;
    const ejectionsBefore = await metric(/^arkvory_router_ejections_total/);
    reader2.failures.set(contentPath('b'), [500, 502, 503, 504, 502, 503]);
    // Sequential reads: reader2 answers 5xx; 502/503/504 are retried elsewhere, where the read is
    // served (so they count against reader2); a 500 is relayed (and compared with nothing, not counted).
    let fivehundreds = 0;
    for (let i = 0; i < 20 && (await metric(/^arkvory_router_ejections_total/)) === ejectionsBefore; i++) {
      const res = await request(`${router.url}${contentPath('b')}`);
      if (res.status === 500) fivehundreds++;
      else expect(res.status).toBe(200);
    }
    expect(fivehundreds).toBeLessThanOrEqual(1);
    expect(await metric(/^arkvory_router_ejections_total/)).toBe(ejectionsBefore + 1);
    expect((await routerStatus()).backends.ejected).toBe(1);
    const seen = reader2.seen.length;
    for (let i = 0; i < 6; i++) expect((await request(`${router.url}${contentPath('b')}`)).status).toBe(200);
    expect(reader2.seen.length).toBe(seen);
    reader2.failures.clear();
    await waitUntil(async () => (await routerStatus()).backends.ejected === 0, {
      what: 'the ejection to end',
      timeoutMs: 4000,
      intervalMs: 20,
    });
  });

  it("with every gateway's store down, the router tries one and then one more, and answers 503 store_unreachable (no endless retry)", async () => {
    for (const g of gateways) g.store = 'unreachable';
    await waitUntil(async () => (await routerStatus()).backends.storeUnreachable === 3, {
      what: 'all stores unreachable',
      timeoutMs: 5000,
      intervalMs: 20,
    });
    for (let i = 0; i < 3; i++) {
      const id = `all-down-${i}`;
      const res = await request(`${router.url}${contentPath('c')}`, { headers: { 'x-request-id': id } });
      expect(res.status).toBe(503);
      expect(JSON.parse(res.body.toString())).toMatchObject({ code: 'store_unreachable' });
      expect(res.headers['retry-after']).toBe('2');
      const routerId = await routerIdOf(id);
      expect(gateways.flatMap((g) => g.seen.filter((s) => s.reqId === routerId))).toHaveLength(2);
    }
    // Writes still go to the writer, which answers for its store itself.
    const before = gateways[0]!.seen.length;
    const put = await request(`${router.url}/api/v1/repositories/r/artifacts/x`, {
      method: 'PUT',
      body: Buffer.from('x'),
    });
    expect(put.status).toBe(503);
    expect(gateways[0]!.seen.length).toBe(before + 1);
    for (const g of gateways) g.store = 'ok';
  });
});
