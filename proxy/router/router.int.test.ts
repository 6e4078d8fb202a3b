/**
 * The router role with real processes: one writer and two readers in the shared profile, each
 * advertising its URL with its lease, and one router discovering them from the lease table.
 * The last two tests are destructive (kill -9 of a reader, stop of the writer) and run last.
 */
import { writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { parseMultipart, randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { APT_TEMPLATE } from '../content/paths.ts';
import { CLIENT_FAULT_LOG } from '../../lib/log-budget.ts';
import { freeLoopbackPort } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
const SLOTS = 3;
/** Each gateway serves 1 MiB/s, so a 4 MiB read lasts ~4 s: long enough to kill its reader mid-body. */
const RATE = SLOTS * MiB;
const PROBE_MS = 500;
const CONTENT_ROUTE = '/api/v1/repositories/:repo/artifacts/:id/content';

let db: TestDatabase & { drop(): Promise<void> };
let writer: GatewayProcess;
let readers: GatewayProcess[];
let router: GatewayProcess;
let key: string;
let writeKey: string;
const file = randomContent(4 * MiB + 4321);
const filePath = '/api/v1/repositories/shared/artifacts/big.bin/content';

async function gatewayEnv(
  role: 'api' | 'reader',
  slot: number,
  rulesFile: string,
  prefix: string,
): Promise<Record<string, string>> {
  const port = await freeLoopbackPort();
  return {
    ARKVORY_PORT: String(port),
    ARKVORY_ADVERTISE_URL: `http://127.0.0.1:${port}`,
    ARKVORY_DATABASE_URL: db.url,
    ARKVORY_REDIS_URL: inject('redisUrl'),
    ARKVORY_REDIS_KEY_PREFIX: prefix,
    ARKVORY_RATE_LIMITS_FILE: rulesFile,
    ARKVORY_ROLE: role,
    ARKVORY_GATEWAY_SLOTS: String(SLOTS),
    ARKVORY_GATEWAY_SLOT: String(slot),
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(RATE),
  };
}

function routerStatus(): Promise<{
  status: number;
  body: { backends: { total: number; healthy: number }; writer: boolean };
}> {
  return request(`${router.url}/health/status`).then((r) => ({
    status: r.status,
    body: JSON.parse(r.body.toString()),
  }));
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

interface Download {
  status: Promise<number>;
  received: () => number;
  /** Resolves with the bytes and whether the body ended cleanly. */
  done: Promise<{ body: Buffer; complete: boolean }>;
}

function startDownload(url: string, headers: Record<string, string>): Download {
  const chunks: Buffer[] = [];
  let received = 0;
  let resolveStatus!: (s: number) => void;
  const status = new Promise<number>((r) => (resolveStatus = r));
  const done = new Promise<{ body: Buffer; complete: boolean }>((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      resolveStatus(res.statusCode ?? 0);
      res.on('data', (c: Buffer) => {
        chunks.push(c);
        received += c.length;
      });
      res.on('error', () => {});
      res.on('close', () => resolve({ body: Buffer.concat(chunks), complete: res.complete }));
    });
    req.on('error', (err) => (received === 0 ? reject(err) : undefined));
  });
  return { status, received: () => received, done };
}

beforeAll(async () => {
  db = await createTestDatabase();
  const dataDir = await makeTempDir();
  await createRepository(db.pool, 'shared');
  await createRepository(db.pool, 'limited');
  ({ key } = await createServiceAccount(db.pool, { scopes: ['read'], grants: { shared: 'read', limited: 'read' } }));
  ({ key: writeKey } = await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { shared: 'write' } }));
  const rules = path.join(dataDir, '..', `router-rules-${randomBytes(4).toString('hex')}.yaml`);
  await writeFile(
    rules,
    'rate_limits:\n  gateway_request:\n    - name: one_read_of_limited\n      action: limit\n      characteristics: [principal]\n      limit: 1\n      period_s: 600\n      match:\n        repository: limited\n',
  );
  const prefix = `arkvory-test-router-${randomBytes(4).toString('hex')}:`;
  writer = await startGateway({ env: await gatewayEnv('api', 0, rules, prefix), dataDir, timeoutMs: 90_000 });
  const seeded = await request(`${writer.url}/api/v1/repositories/shared/artifacts/big.bin`, {
    method: 'PUT',
    headers: { ...bearer(writeKey), 'content-type': 'application/octet-stream' },
    body: file,
  });
  expect(seeded.status).toBe(201);
  readers = await Promise.all(
    [1, 2].map(async (slot) =>
      startGateway({ env: await gatewayEnv('reader', slot, rules, prefix), dataDir, timeoutMs: 90_000 }),
    ),
  );
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: String(PROBE_MS),
      ARKVORY_ROUTER_CONNECT_TIMEOUT_MILLISECONDS: '1000',
    },
    timeoutMs: 90_000,
  });
  await waitFor(
    'three healthy gateways behind the router',
    async () => ((await routerStatus()).body.backends.healthy === 3 ? true : undefined),
    10_000,
  );
}, 300_000);

afterAll(async () => {
  await Promise.all([router, writer, ...(readers ?? [])].filter(Boolean).map((g) => g.stop('SIGTERM')));
  await db?.drop();
});

describe('router: one writer, two readers', () => {
  it('sends an upload through the router to the writer only, streamed, and it is readable from every gateway', async () => {
    const before = [writer, ...readers].map((g) => g.logLines().filter((l) => l.method === 'PUT').length);
    async function* body() {
      for (let offset = 0; offset < file.length; offset += 256 * 1024) yield file.subarray(offset, offset + 256 * 1024);
    }
    const put = await request(`${router.url}/api/v1/repositories/shared/artifacts/uploaded.bin`, {
      method: 'PUT',
      headers: { ...bearer(writeKey), 'content-type': 'application/octet-stream' },
      body: body(),
    });
    expect(put.status).toBe(201);
    // A gateway logs a request when its response ends, a moment after the client has the answer.
    const after = await waitFor(
      'the writer to log the PUT',
      async () => {
        const now = [writer, ...readers].map((g) => g.logLines().filter((l) => l.method === 'PUT').length);
        return now[0]! > before[0]! ? now : undefined;
      },
      5000,
    );
    expect(after[0]! - before[0]!).toBe(1);
    expect(after.slice(1)).toEqual(before.slice(1));
    expect(writer.logLines().some((l) => l.method === 'PUT' && l.status === 201)).toBe(true);
    for (const gw of [writer, ...readers]) {
      const direct = await request(`${gw.url}/api/v1/repositories/shared/artifacts/uploaded.bin/content`, {
        headers: { ...bearer(key), range: 'bytes=0-15' },
      });
      expect(direct.body.equals(file.subarray(0, 16))).toBe(true);
    }
    // Every byte as sent: the router frees each chunk once the writer's socket took it.
    const whole = await request(`${writer.url}/api/v1/repositories/shared/artifacts/uploaded.bin/content`, {
      headers: bearer(key),
    });
    expect(sha256(whole.body)).toBe(sha256(file));
  });

  it('answers reads byte-exactly with every Range form, preserving ETag, Content-Range and conditionals', async () => {
    const full = await request(`${router.url}${filePath}`, { headers: bearer(key) });
    expect(full.status).toBe(200);
    expect(sha256(full.body)).toBe(sha256(file));
    expect(full.headers['content-length']).toBe(String(file.length));
    expect(full.headers['accept-ranges']).toBe('bytes');
    const etag = full.headers.etag!;
    expect(etag).toMatch(/^"/);
    const size = file.length;
    const cases: Array<[string, number, number]> = [
      ['bytes=0-0', 0, 1],
      ['bytes=1000-1999', 1000, 2000],
      [`bytes=${size - 777}-`, size - 777, size],
      ['bytes=-4096', size - 4096, size],
      [`bytes=${size - 10}-${size + 100}`, size - 10, size],
    ];
    for (const [range, start, end] of cases) {
      const res = await request(`${router.url}${filePath}`, { headers: { ...bearer(key), range } });
      expect(res.status, range).toBe(206);
      expect(res.headers['content-range'], range).toBe(`bytes ${start}-${end - 1}/${size}`);
      expect(res.headers['content-length'], range).toBe(String(end - start));
      expect(res.body.equals(file.subarray(start, end)), range).toBe(true);
    }
    const multi = await request(`${router.url}${filePath}`, {
      headers: { ...bearer(key), range: 'bytes=0-9,100-199,-5' },
    });
    expect(multi.status).toBe(206);
    const parts = parseMultipart(multi.body, multi.headers['content-type']!);
    expect(parts.map((p) => p.data)).toEqual([file.subarray(0, 10), file.subarray(100, 200), file.subarray(size - 5)]);
    const ifRangeMatch = await request(`${router.url}${filePath}`, {
      headers: { ...bearer(key), range: 'bytes=5-9', 'if-range': etag },
    });
    expect(ifRangeMatch.status).toBe(206);
    expect(ifRangeMatch.body.equals(file.subarray(5, 10))).toBe(true);
    const ifRangeStale = await request(`${router.url}${filePath}`, {
      headers: { ...bearer(key), range: 'bytes=5-9', 'if-range': '"stale"' },
    });
    expect(ifRangeStale.status).toBe(200);
    expect(ifRangeStale.body.length).toBe(size);
    const notModified = await request(`${router.url}${filePath}`, {
      headers: { ...bearer(key), 'if-none-match': etag },
    });
    expect(notModified.status).toBe(304);
    expect(notModified.body.length).toBe(0);
    const unsatisfiable = await request(`${router.url}${filePath}`, {
      headers: { ...bearer(key), range: `bytes=${size}-` },
    });
    expect(unsatisfiable.status).toBe(416);
    expect(unsatisfiable.headers['content-range']).toBe(`bytes */${size}`);
    const head = await request(`${router.url}${filePath}`, { method: 'HEAD', headers: bearer(key) });
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toBe(String(size));
    expect(head.headers.etag).toBe(etag);
    expect(head.body.length).toBe(0);
    const noKey = await request(`${router.url}${filePath}`);
    expect(noKey.status).toBe(401);
  });

  /** How many of the nine tagged reads each gateway logged (a gateway logs a request when it ends). */
  const loggedPerGateway = (what: string, tagged: (gw: GatewayProcess) => number) =>
    waitFor(
      what,
      async () => {
        const now = [writer, ...readers].map(tagged);
        return now.reduce((a, b) => a + b, 0) === 9 ? now : undefined;
      },
      5000,
    );

  /**
   * The router's own ids of the requests whose client sent an x-request-id starting with `tag`
   * (its `request` lines: `clientReqId` the client's, `reqId` its own, which it forwards).
   */
  const routerIdsTagged = (tag: string) =>
    new Set(
      router
        .logLines()
        .filter((l) => l.msg === 'request' && String(l.clientReqId).startsWith(tag))
        .map((l) => String(l.reqId)),
    );

  it('spreads content reads over all three gateways (counted from their request logs)', async () => {
    // The router forwards its own id as x-request-id; each gateway logs it with the request (`clientReqId`).
    const tag = `spread-${randomBytes(3).toString('hex')}-`;
    const tagged = (gw: GatewayProcess) => {
      const ids = routerIdsTagged(tag);
      return gw
        .logLines()
        .filter((l) => l.msg === 'request' && l.route === CONTENT_ROUTE && ids.has(String(l.clientReqId))).length;
    };
    for (let i = 0; i < 9; i++) {
      const res = await request(`${router.url}${filePath}`, {
        headers: { ...bearer(key), range: `bytes=${i * 100}-${i * 100 + 99}`, 'x-request-id': `${tag}${i}` },
      });
      expect(res.status).toBe(206);
      expect(res.headers['x-request-id']).toBe(`${tag}${i}`);
      expect(res.body.equals(file.subarray(i * 100, i * 100 + 100))).toBe(true);
    }
    expect(await loggedPerGateway('nine logged reads', tagged)).toEqual([3, 3, 3]);
    // Each warning is an Error, a stack and a stderr write per proxied response: it once cost more CPU than the proxying.
    expect(router.logs()).not.toContain('MaxListenersExceededWarning');
  });

  it("spreads a package version's flat apt paths (…/apt/./Packages as apt asks) like content reads", async () => {
    const index = randomContent(5000);
    const put = await request(`${writer.url}/api/v1/repositories/shared/packages/apt/stable/assets/Packages`, {
      method: 'PUT',
      headers: bearer(writeKey),
      body: index,
    });
    expect(put.status).toBe(201);
    const tag = `apt-${randomBytes(3).toString('hex')}-`;
    const tagged = (gw: GatewayProcess) => {
      const ids = routerIdsTagged(tag);
      return gw
        .logLines()
        .filter((l) => l.msg === 'request' && l.route === APT_TEMPLATE && ids.has(String(l.clientReqId))).length;
    };
    for (let i = 0; i < 9; i++) {
      const dot = i % 2 === 0 ? './' : '';
      const res = await request(`${router.url}/api/v1/repositories/shared/packages/apt/stable/apt/${dot}Packages`, {
        headers: { ...bearer(key), 'x-request-id': `${tag}${i}` },
      });
      expect(res.status).toBe(200);
      expect(res.body.equals(index)).toBe(true);
    }
    expect(await loggedPerGateway('nine logged apt reads', tagged)).toEqual([3, 3, 3]);
  });

  it("logs its own reqId, never the client's: the client's sane id is clientReqId and echoed, the router's is forwarded", async () => {
    const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
    const requestLine = (match: (l: Record<string, unknown>) => boolean) =>
      waitFor(
        'the router request line',
        async () => router.logLines().find((l) => l.msg === 'request' && match(l)),
        5000,
      );
    // A first request without an id: its answer carries the router's own id for it.
    const first = await request(`${router.url}${filePath}`, { headers: { ...bearer(key), range: 'bytes=0-9' } });
    expect(first.status).toBe(206);
    const firstId = String(first.headers['x-request-id']);
    expect(firstId).toMatch(UUID);
    const firstLine = await requestLine((l) => l.reqId === firstId);
    expect(firstLine.clientReqId).toBeUndefined();
    // A second client names that id: it is echoed back to it, but no router line of its request carries it as reqId.
    for (const target of [filePath, '/health/live']) {
      const replay = await request(`${router.url}${target}`, {
        headers: { ...bearer(key), range: 'bytes=0-9', 'x-request-id': firstId },
      });
      expect(replay.status).toBeLessThan(300);
      expect(replay.headers['x-request-id']).toBe(firstId);
    }
    const replayLines = await waitFor(
      'both replayed request lines',
      async () => {
        const lines = router.logLines().filter((l) => l.msg === 'request' && l.clientReqId === firstId);
        return lines.length === 2 ? lines : undefined;
      },
      5000,
    );
    for (const line of replayLines) {
      expect(String(line.reqId)).toMatch(UUID);
      expect(line.reqId).not.toBe(firstId);
    }
    expect(router.logLines().filter((l) => l.reqId === firstId)).toEqual([firstLine]);
    // What went to the gateway is the router's own id: the gateway's line for the proxied replay
    // names it as clientReqId, so router and gateway lines pair up one to one.
    const proxied = replayLines.find((l) => l.kind === 'content-read')!;
    const gatewayLine = await waitFor(
      "the gateway's line of the replay",
      async () =>
        [writer, ...readers]
          .flatMap((g) => g.logLines())
          .find((l) => l.msg === 'request' && l.clientReqId === proxied.reqId),
      5000,
    );
    expect(gatewayLine.status).toBe(206);
    expect(
      [writer, ...readers].flatMap((g) => g.logLines()).filter((l) => l.clientReqId === firstId && l.msg === 'request'),
    ).toHaveLength(1);
    // An id that is not sane (too long) is neither logged nor echoed: the answer carries the router's own.
    const insane = 'x'.repeat(65);
    const odd = await request(`${router.url}/health/live`, { headers: { 'x-request-id': insane } });
    const oddId = String(odd.headers['x-request-id']);
    expect(oddId).toMatch(UUID);
    expect((await requestLine((l) => l.reqId === oddId)).clientReqId).toBeUndefined();
    expect(router.logs()).not.toContain(insane);
  });

  it('passes a 405 and a 429 through unchanged', async () => {
    const methodPath = '/api/v1/repositories/shared/artifacts/big.bin/content';
    const viaRouter = await request(`${router.url}${methodPath}`, {
      method: 'PATCH',
      headers: bearer(writeKey),
      body: Buffer.from('x'),
    });
    const direct = await request(`${writer.url}${methodPath}`, {
      method: 'PATCH',
      headers: bearer(writeKey),
      body: Buffer.from('x'),
    });
    expect(viaRouter.status).toBe(405);
    expect(viaRouter.headers.allow).toBe(direct.headers.allow);
    expect(viaRouter.body.toString()).toBe(direct.body.toString());
    const limitedPath = '/api/v1/repositories/limited/artifacts/none/content';
    const first = await request(`${router.url}${limitedPath}`, { headers: bearer(key) });
    expect(first.status).toBe(404);
    const limited = await request(`${router.url}${limitedPath}`, { headers: bearer(key) });
    expect(limited.status).toBe(429);
    expect(JSON.parse(limited.body.toString()).code).toBe('rate_limited');
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    const limitedDirect = await request(`${readers[0]!.url}${limitedPath}`, { headers: bearer(key) });
    expect(limitedDirect.status).toBe(429);
    for (const name of ['ratelimit-policy', 'content-type'])
      expect(limited.headers[name], name).toBe(limitedDirect.headers[name]);
    expect(JSON.parse(limited.body.toString())).toEqual(JSON.parse(limitedDirect.body.toString()));
  });

  it('a flood of refused requests leaves a bounded number of its request lines, every one answered', async () => {
    // No key: anyone can have the gateways refuse these as fast as they like.
    const N = 200;
    const tag = `refused-${randomBytes(3).toString('hex')}-`;
    const statuses = new Map<number, number>();
    let next = 0;
    const worker = async () => {
      while (next < N) {
        const res = await request(`${router.url}/api/v1/repositories/shared/artifacts/nope/content`, {
          headers: { 'x-request-id': `${tag}${next++}` },
        });
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    expect([...statuses.keys()].every((status) => status >= 400 && status < 500)).toBe(true);
    // Every line of the flood is written before the marker's, which is answered after it.
    const marker = `${tag}marker`;
    await request(`${router.url}/health/live`, { headers: { 'x-request-id': marker } });
    await waitFor('the marker line', async () => router.logLines().find((l) => l.clientReqId === marker), 5000);
    const lines = router.logLines().filter((l) => l.msg === 'request' && String(l.clientReqId).startsWith(tag));
    const byStatus = Map.groupBy(
      lines.filter((l) => l.clientReqId !== marker),
      (l) => Number(l.status),
    );
    expect(byStatus.size).toBeGreaterThan(0);
    for (const [status, ofStatus] of byStatus) {
      expect(statuses.has(status)).toBe(true);
      expect(ofStatus.length).toBeLessThanOrEqual(CLIENT_FAULT_LOG.linesPerInterval);
    }
  });

  it('sends a read by the path the gateways route (`..`, `%2e%2e` and `\\` resolved), not by the path as written', async () => {
    /** A GET with its target sent byte for byte: a URL string given to node:http would be resolved first. */
    const rawGet = (origin: string, target: string, headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        const { hostname, port } = new URL(origin);
        http
          .get({ host: hostname, port, path: target, headers, agent: false }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          })
          .on('error', reject);
      });
    const repo = '/api/v1/repositories/shared';
    const cases: Array<[target: string, kind: string]> = [
      // Written as a content read, routed as a package's metadata (a package named "content").
      [`${repo}/packages/x/../content`, 'writer'],
      [`${repo}/packages/x/%2e%2e/content`, 'writer'],
      [`${repo}/packages/x/.%2E/content`, 'writer'],
      // An apt file name whose backslashes climb to the console.
      [`${repo}/packages/n/v/apt/${'..\\'.repeat(8)}console\\`, 'write'],
      // …or to an admin route.
      [`${repo}/packages/n/v/apt/${'..\\'.repeat(6)}admin\\quotas\\repositories\\shared`, 'writer'],
      // Written as something else, routed as a content read.
      [`${repo}/x/../artifacts/big.bin/content`, 'content-read'],
      [`${repo}\\artifacts\\big.bin\\content`, 'content-read'],
    ];
    const tag = `dots-${randomBytes(3).toString('hex')}-`;
    const headers = (i: number) => ({ ...bearer(key), range: 'bytes=0-9', 'x-request-id': `${tag}${i}` });
    for (const [i, [target]] of cases.entries()) {
      const status = await rawGet(router.url, target, headers(i));
      // The answer is the one the writer gives to the same target.
      expect(status, target).toBe(await rawGet(writer.url, target, { ...bearer(key), range: 'bytes=0-9' }));
    }
    for (const [i, [target, kind]] of cases.entries()) {
      const routed = await waitFor(
        'the router line',
        async () => router.logLines().find((l) => l.msg === 'request' && l.clientReqId === `${tag}${i}`),
        5000,
      );
      expect(routed.kind, target).toBe(kind);
      const served = await waitFor(
        "the gateway's line",
        async () => {
          const at = [writer, ...readers].findIndex((g) =>
            g.logLines().some((l) => l.msg === 'request' && l.clientReqId === routed.reqId),
          );
          return at < 0 ? undefined : at;
        },
        5000,
      );
      // Anything but a content read is the writer's (index 0).
      if (kind !== 'content-read') expect(served, target).toBe(0);
    }
  });

  it('drops a hung gateway from the pool within 2 probe intervals and takes it back when it answers again', async () => {
    const victim = readers[1]!;
    expect((await routerStatus()).body.backends.healthy).toBe(3);
    victim.child.kill('SIGSTOP');
    const stoppedAt = performance.now();
    try {
      await waitFor(
        'the hung reader to leave the pool',
        async () => ((await routerStatus()).body.backends.healthy === 2 ? true : undefined),
        10_000,
      );
      const leftAfterMs = performance.now() - stoppedAt;
      // 2 intervals, plus slack for a loaded 2-core machine.
      expect(leftAfterMs).toBeLessThan(2 * PROBE_MS + 750);
      for (let i = 0; i < 4; i++)
        expect(
          (await request(`${router.url}${filePath}`, { headers: { ...bearer(key), range: 'bytes=0-99' } })).status,
        ).toBe(206);
    } finally {
      victim.child.kill('SIGCONT');
    }
    await waitFor(
      'the reader to return',
      async () => ((await routerStatus()).body.backends.healthy === 3 ? true : undefined),
      5000,
    );
  });

  it('after kill -9 of a reader mid-body, new reads keep succeeding and the cut read resumes with Range', async () => {
    // Three concurrent whole-file reads: least-active puts one on each gateway.
    const downloads = [0, 1, 2].map(() => startDownload(`${router.url}${filePath}`, bearer(key)));
    expect(await Promise.all(downloads.map((d) => d.status))).toEqual([200, 200, 200]);
    await waitFor(
      'every read to be under way',
      async () => (downloads.every((d) => d.received() >= 256 * 1024) ? true : undefined),
      10_000,
    );
    const victim = readers[0]!;
    await victim.stop('SIGKILL');
    // New reads right away, before any probe noticed: a request that lands on the dead reader is retried elsewhere.
    for (let i = 0; i < 6; i++) {
      const res = await request(`${router.url}${filePath}`, {
        headers: { ...bearer(key), range: `bytes=${i}-${i + 9}` },
      });
      expect(res.status).toBe(206);
      expect(res.body.equals(file.subarray(i, i + 10))).toBe(true);
    }
    const results = await Promise.all(downloads.map((d) => d.done));
    const cut = results.filter((r) => !r.complete);
    expect(cut).toHaveLength(1);
    for (const r of results.filter((r) => r.complete)) expect(sha256(r.body)).toBe(sha256(file));
    const partial = cut[0]!.body;
    expect(partial.length).toBeLessThan(file.length);
    expect(partial.equals(file.subarray(0, partial.length))).toBe(true);
    const resumed = await request(`${router.url}${filePath}`, {
      headers: { ...bearer(key), range: `bytes=${partial.length}-` },
    });
    expect(resumed.status).toBe(206);
    expect(sha256(Buffer.concat([partial, resumed.body]))).toBe(sha256(file));
  }, 60_000);

  it('with the writer stopped, reads keep flowing and writes get 503 unavailable', async () => {
    await writer.stop('SIGTERM');
    const status = await waitFor(
      'the router to see no writer',
      async () => {
        const s = await routerStatus();
        return s.body.writer === false ? s : undefined;
      },
      2 * PROBE_MS + 2000,
    );
    expect(status.status).toBe(200);
    const put = await request(`${router.url}/api/v1/repositories/shared/artifacts/new.bin`, {
      method: 'PUT',
      headers: bearer(writeKey),
      body: Buffer.from('new'),
    });
    expect(put.status).toBe(503);
    expect(JSON.parse(put.body.toString()).code).toBe('unavailable');
    const del = await request(`${router.url}/api/v1/repositories/shared/artifacts/big.bin`, {
      method: 'DELETE',
      headers: bearer(writeKey),
    });
    expect(del.status).toBe(503);
    for (let i = 0; i < 3; i++) {
      const read = await request(`${router.url}${filePath}`, { headers: { ...bearer(key), range: 'bytes=-1000' } });
      expect(read.status).toBe(206);
      expect(read.body.equals(file.subarray(file.length - 1000))).toBe(true);
    }
  }, 60_000);
});
