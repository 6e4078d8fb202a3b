/**
 * The gateway's queries to the rules service (Phase 3, ARKVORY_RULES_SERVICE_URL) carry the W3C
 * `traceparent` of the request whose rate-limit check asked, when tracing is on, and none when it
 * is off: a real rules service (`arkvory rules-service serve`) behind a real nginx that logs each
 * request's `traceparent`, and the client span it names read back from Jaeger.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { CLI, ROOT, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { type HeaderLoggingProxy, startHeaderLoggingProxy } from '../../test/support/header-logging-proxy.ts';
import {
  freeLoopbackPort,
  type JaegerServer,
  type JaegerTrace,
  type ManagedProcess,
  processEnv,
  startJaeger,
  startProcess,
  waitForHttp,
} from '../../test/harness/index.ts';

const REPO = 'ruled';
const QUERY = 'POST /api/v1/rules/query';

let db: TestDatabase & { drop(): Promise<void> };
let jaeger: JaegerServer;
let rulesService: ManagedProcess;
let proxy: HeaderLoggingProxy;
let gateway: GatewayProcess;
let key: string;

const gatewayEnv = () => ({
  ARKVORY_DATABASE_URL: db.url,
  ARKVORY_RULES_SERVICE_URL: proxy.url,
  // A loaded machine must not turn the query into a timeout (the local rules would apply, unasked).
  ARKVORY_RULES_SERVICE_TIMEOUT_MS: '5000',
});

beforeAll(async () => {
  [db, jaeger] = await Promise.all([createTestDatabase(), startJaeger()]);
  await createRepository(db.pool, REPO);
  key = (await createServiceAccount(db.pool, { scopes: ['read'], grants: { [REPO]: 'read' } })).key;
  const port = await freeLoopbackPort();
  rulesService = startProcess(process.execPath, [CLI, 'rules-service', 'serve'], {
    name: 'rules-service',
    cwd: ROOT,
    env: { ...processEnv(), ARKVORY_DATABASE_URL: db.url, ARKVORY_PORT: String(port), ARKVORY_HOST: '127.0.0.1' },
  });
  await waitForHttp(`http://127.0.0.1:${port}/health/status`, { timeoutMs: 60_000, process: rulesService });
  proxy = await startHeaderLoggingProxy(`http://127.0.0.1:${port}`);
  gateway = await startGateway({
    env: { ...gatewayEnv(), OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpUrl, OTEL_BSP_SCHEDULE_DELAY: '100' },
    timeoutMs: 90_000,
  });
}, 180_000);

afterAll(async () => {
  await gateway?.stop();
  await proxy?.stop();
  await rulesService?.stop();
  await jaeger?.stop();
  await db?.drop();
});

/** The rules-service queries logged while `act` ran (nginx logs each once it is answered). */
async function queriesDuring(act: () => Promise<void>) {
  const before = (await proxy.requests()).length;
  await act();
  await new Promise((r) => setTimeout(r, 200));
  return (await proxy.requests()).slice(before).filter((l) => l.request.startsWith(QUERY));
}

it("with tracing on, a rate-limit check's query carries the traceparent of a client span in the request's trace", async () => {
  const traceId = randomContent(16).toString('hex');
  const queries = await queriesDuring(async () => {
    const res = await request(`${gateway.url}/api/v1/repositories`, {
      headers: { ...bearer(key), traceparent: `00-${traceId}-${'d'.repeat(16)}-01` },
    });
    expect(res.status).toBe(200);
  });
  expect(queries.length).toBeGreaterThan(0);
  const spanIds = queries.map((q) => {
    const match = new RegExp(`^00-${traceId}-([0-9a-f]{16})-01$`).exec(q.traceparent ?? '');
    expect({ traceparent: q.traceparent, matches: match !== null }).toMatchObject({ matches: true });
    return match![1]!;
  });
  let trace: JaegerTrace | undefined;
  await expect
    .poll(
      async () => {
        trace = await jaeger.trace(traceId);
        const have = new Set(trace?.spans.map((s) => s.spanID));
        return spanIds.filter((id) => !have.has(id));
      },
      { timeout: 20_000, interval: 200 },
    )
    .toEqual([]);
  const byId = new Map(trace!.spans.map((s) => [s.spanID, s]));
  for (const id of spanIds) {
    const span = byId.get(id)!;
    expect(span.tags.find((t) => t.key === 'span.kind')?.value).toBe('client');
    const parentId = span.references.find((r) => r.refType === 'CHILD_OF')?.spanID;
    // The gateway's span of the request (or its rate-limit check's): never a detached span.
    expect(['GET /api/v1/repositories', 'arkvory.rate_limit']).toContain(byId.get(parentId!)?.operationName);
  }
}, 60_000);

it('with tracing off, no query carries one, even when the client sent one', async () => {
  await gateway.stop();
  gateway = await startGateway({ env: gatewayEnv(), timeoutMs: 90_000 });
  const queries = await queriesDuring(async () => {
    const res = await request(`${gateway.url}/api/v1/repositories`, {
      headers: { ...bearer(key), traceparent: `00-${randomContent(16).toString('hex')}-${'e'.repeat(16)}-01` },
    });
    expect(res.status).toBe(200);
  });
  expect(queries.length).toBeGreaterThan(0);
  expect(queries.filter((q) => q.traceparent !== undefined)).toEqual([]);
}, 120_000);
