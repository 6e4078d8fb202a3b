/**
 * The store's requests carry the W3C `traceparent` of the request that made them when tracing is
 * on, and none when it is off, as the store's side sees them: an S3 server (SeaweedFS, MinIO) behind a
 * real nginx that logs each request's `traceparent`, and a static-HTTP store (nginx) that logs it
 * too. With tracing on, each logged traceparent names a client span Jaeger holds in the client's
 * trace, whose parent is the gateway's store open or its server span. The S3 store sends large
 * reads and single PUTs over sockets of its own and small reads through undici: both are covered.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { startHeaderLoggingProxy } from '../../test/support/header-logging-proxy.ts';
import type { S3Server, S3ServerKind } from '../../test/support/s3-server.ts';
import { sharedS3Bucket } from '../../test/support/shared-s3.ts';
import { startStaticStore } from '../../test/support/static-store.ts';
import { type JaegerServer, type JaegerSpan, startJaeger } from '../../test/harness/index.ts';

const REPO = 'traceparents';
const MiB = 1024 * 1024;
const CONTENT_SPAN = 'GET /api/v1/repositories/:repo/artifacts/:id/content';
const UPLOAD_SPAN = 'PUT /api/v1/repositories/:repo/artifacts/:id';

interface UpstreamLine {
  readonly request: string;
  readonly traceparent: string | undefined;
}

interface StoreUnderTest {
  /** The gateway's storage variables. */
  readonly env: Record<string, string>;
  /** What the store's side logged so far. */
  lines(): Promise<UpstreamLine[]>;
  stop(): Promise<void>;
}

async function s3BehindNginx(kind: S3ServerKind): Promise<StoreUnderTest> {
  const server: S3Server = await sharedS3Bucket(kind);
  const proxy = await startHeaderLoggingProxy(server.endpoint);
  return {
    env: { ...server.env('traced/'), ARKVORY_S3_ENDPOINT: proxy.url },
    lines: () => proxy.requests(),
    async stop() {
      await proxy.stop();
      await server.destroy();
    },
  };
}

async function staticNginx(): Promise<StoreUnderTest> {
  const store = await startStaticStore();
  return {
    env: { ARKVORY_STORAGE_URL: store.url },
    async lines() {
      return (await store.accessLog())
        .split('\n')
        .map((line) => /^\d{3} \d+ "(.*)" "(.*)"$/.exec(line))
        .filter((m) => m !== null)
        .map((m) => ({ request: m[1]!, traceparent: m[2] === '-' ? undefined : m[2] }));
    },
    stop: () => store.stop(),
  };
}

let jaeger: JaegerServer;
beforeAll(async () => {
  jaeger = await startJaeger();
}, 60_000);
afterAll(async () => {
  await jaeger?.stop();
});

const parentOf = (span: JaegerSpan) => span.references.find((r) => r.refType === 'CHILD_OF')?.spanID;
const traceId = () => randomContent(16).toString('hex');

describe.each([
  ['S3 (SeaweedFS behind nginx)', () => s3BehindNginx('seaweedfs')],
  ['S3 (MinIO behind nginx)', () => s3BehindNginx('minio')],
  ['static HTTP (nginx)', staticNginx],
])('%s', (_name, open) => {
  let store: StoreUnderTest;
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let gateway: GatewayProcess;
  let key: string;
  const big = randomContent(3 * MiB + 17);
  const bigDigest = sha256(big);
  const artifact = `/api/v1/repositories/${REPO}/artifacts`;
  const env = () => ({ ARKVORY_DATABASE_URL: db.url, ARKVORY_BLOB_CACHE_BYTES: '0', ...store.env });

  beforeAll(async () => {
    [store, db] = await Promise.all([open(), createTestDatabase()]);
    await createRepository(db.pool, REPO);
    key = (await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { [REPO]: 'write' } })).key;
    gateway = await startGateway({
      env: { ...env(), OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpUrl, OTEL_BSP_SCHEDULE_DELAY: '100' },
      timeoutMs: 90_000,
    });
  }, 180_000);
  afterAll(async () => {
    await gateway?.stop();
    await store?.stop();
    await db?.drop();
  });

  /** The store lines logged while `act` ran, less the gateway's own store probes (`storage-id`). */
  async function storeLinesOf(act: () => Promise<void>): Promise<UpstreamLine[]> {
    const before = (await store.lines()).length;
    await act();
    // nginx logs a request once it finished, just after the gateway has its answer.
    await new Promise((r) => setTimeout(r, 200));
    return (await store.lines()).slice(before).filter((l) => !l.request.includes('storage-id'));
  }

  it('with tracing on, every request to the store carries the traceparent of a client span in the trace', async () => {
    const uploadTrace = traceId();
    const puts = await storeLinesOf(async () => {
      const res = await request(`${gateway.url}${artifact}/big.bin`, {
        method: 'PUT',
        headers: { ...bearer(key), traceparent: `00-${uploadTrace}-${'a'.repeat(16)}-01` },
        body: big,
      });
      expect(res.status).toBe(201);
    });
    expect(puts.filter((l) => l.request.startsWith('PUT ')).length).toBeGreaterThan(0);

    const downloadTrace = traceId();
    const gets = await storeLinesOf(async () => {
      // The whole blob (≥ 1 MiB: the S3 store's own socket) and a short range (its undici pool).
      for (const range of [undefined, 'bytes=0-1023']) {
        const res = await request(`${gateway.url}${artifact}/big.bin/content`, {
          headers: {
            ...bearer(key),
            traceparent: `00-${downloadTrace}-${'b'.repeat(16)}-01`,
            ...(range ? { range } : {}),
          },
        });
        expect(res.status).toBe(range ? 206 : 200);
        expect(Buffer.compare(res.body, range ? big.subarray(0, 1024) : big)).toBe(0);
      }
    });
    expect(
      gets.filter((l) => l.request.startsWith('GET ') && l.request.includes(bigDigest)).length,
    ).toBeGreaterThanOrEqual(2);

    for (const [trace, lines, serverSpan] of [
      [uploadTrace, puts, UPLOAD_SPAN],
      [downloadTrace, gets, CONTENT_SPAN],
    ] as const) {
      const spanIds = lines.map((l) => {
        const match = new RegExp(`^00-${trace}-([0-9a-f]{16})-01$`).exec(l.traceparent ?? '');
        expect({ line: l.request, traceparent: l.traceparent, matches: match !== null }).toMatchObject({
          matches: true,
        });
        return match![1]!;
      });
      // The trace once it holds a client span for each of the store's logged traceparents.
      const found = await jaeger.traceWith(trace, spanIds, { spanKey: (span) => span.spanID });
      const byId = new Map(found.spans.map((s) => [s.spanID, s]));
      for (const id of spanIds) {
        const span = byId.get(id)!;
        expect(span.tags.find((t) => t.key === 'span.kind')?.value).toBe('client');
        const parent = byId.get(parentOf(span)!);
        expect([serverSpan, 'arkvory.store.open']).toContain(parent?.operationName);
      }
    }
  }, 120_000);

  it('with tracing off, no request to the store carries one, even when the client sent one', async () => {
    await gateway.stop();
    gateway = await startGateway({ env: env(), timeoutMs: 90_000 });
    const small = randomContent(200 * 1024);
    const lines = await storeLinesOf(async () => {
      const headers = { ...bearer(key), traceparent: `00-${traceId()}-${'c'.repeat(16)}-01` };
      const put = await request(`${gateway.url}${artifact}/small.bin`, { method: 'PUT', headers, body: small });
      expect(put.status).toBe(201);
      const get = await request(`${gateway.url}${artifact}/big.bin/content`, { headers });
      expect(get.status).toBe(200);
    });
    expect(lines.length).toBeGreaterThan(1);
    expect(lines.filter((l) => l.traceparent !== undefined)).toEqual([]);
  }, 120_000);
});
