/**
 * Fault: the rules service's PostgreSQL takes connections and statements and does not answer (a
 * latency on its answers far longer than the test, as a server stopped with SIGSTOP). Expected, as
 * for a gateway (postgres-hang.chaos.test.ts): the gateways' query and an admin call answer 503
 * `unavailable` with Retry-After 1 within their bound (ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS
 * to get a connection, as much for the statement), more requests than the pool holds included; the
 * hung connections are ended with a warn line; the service stays up, and answers again once the
 * database does. Every response is checked against proxy/openapi/rules-service.yaml.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadOpenApiDocument, undescribedResponses } from '../proxy/openapi/contract.ts';
import { RULES_SERVICE_OPENAPI_PATH } from '../proxy/openapi/rules-service-contract.ts';
import { bearer, createServiceAccount, type GatewayProcess, startGateway } from '../test/harness/index.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';
import { addLatency, type ProxiedUpstream } from './support/toxiproxy.ts';

const TIMEOUT_MS = 1000;
const POOL_SIZE = 2;
/** A connection's wait and a statement's, plus the time a loaded machine adds to an answer. */
const BOUND_MS = 2 * TIMEOUT_MS + 1500;
const QUERY = { service: 'arkvory', limiter: 'gateway_request', identifier: { principal: 'p-1' } };

const chaos = useToxiproxyAndDatabase();
let link: ProxiedUpstream;
let service: GatewayProcess;
/** An admin key the service has looked up before the hang, and one it meets first during it. */
let adminKey: string;
let unseenAdminKey: string;

beforeAll(async () => {
  link = await chaos.toxiproxy.proxyToUrl(inject('adminDatabaseUrl'));
  adminKey = (await createServiceAccount(chaos.db.pool, { scopes: ['admin'] })).key;
  unseenAdminKey = (await createServiceAccount(chaos.db.pool, { scopes: ['admin'] })).key;
  service = await startGateway({
    args: ['rules-service', 'serve'],
    name: 'rules service',
    env: {
      ARKVORY_DATABASE_URL: link.through(chaos.db.url),
      ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: String(TIMEOUT_MS),
      ARKVORY_DATABASE_POOL_SIZE: String(POOL_SIZE),
      // Every response's line, for the contract check.
      ARKVORY_LOG_LEVEL: 'debug',
    },
  });
}, 60_000);
afterAll(async () => {
  await service?.stop('SIGTERM', 10_000);
  if (!service) return;
  const problems = undescribedResponses(await loadOpenApiDocument(RULES_SERVICE_OPENAPI_PATH), service.logLines());
  expect(problems, 'responses proxy/openapi/rules-service.yaml does not describe').toEqual([]);
});

interface Answer {
  status: number;
  code: string | undefined;
  retryAfter: string | null;
  ms: number;
}

/** The answer and how long it took; past twice the bound, none (status 0), so a hang fails an assertion, not the test's timeout. */
async function timed(path: string, init: RequestInit): Promise<Answer> {
  const startedMs = performance.now();
  const signal = AbortSignal.timeout(2 * BOUND_MS);
  try {
    const res = await fetch(`${service.url}${path}`, { ...init, signal });
    const body = (await res.json()) as { code?: string };
    return {
      status: res.status,
      code: body.code,
      retryAfter: res.headers.get('retry-after'),
      ms: performance.now() - startedMs,
    };
  } catch (err) {
    if (!signal.aborted) throw err;
    return { status: 0, code: 'no answer', retryAfter: null, ms: performance.now() - startedMs };
  }
}

const query = () =>
  timed('/api/v1/rules/query', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(QUERY),
  });
const listOverrides = (key = adminKey) => timed('/api/v1/admin/rule-overrides', { headers: bearer(key) });

describe('the rules service on a PostgreSQL that takes statements and does not answer', () => {
  it(`answers 503 unavailable within ${BOUND_MS} ms, more requests than its pool holds, and recovers`, async () => {
    expect((await query()).status).toBe(200);
    expect((await listOverrides()).status).toBe(200);

    const hang = await addLatency(link, { name: 'hang', stream: 'downstream', latencyMs: 120_000 });
    let removed = false;
    try {
      // Three times the pool: a hung statement holds its connection no longer than the deadline. The
      // admin calls: the listing's statement, and the lookup of a key not met before.
      const answers = await Promise.all([
        ...Array.from({ length: 3 * POOL_SIZE }, query),
        listOverrides(),
        listOverrides(unseenAdminKey),
      ]);
      for (const answer of answers) {
        expect([answer.status, answer.code, answer.retryAfter]).toEqual([503, 'unavailable', '1']);
        expect(answer.ms).toBeLessThan(BOUND_MS);
      }
      const again = await query();
      expect([again.status, again.code]).toEqual([503, 'unavailable']);
      expect(again.ms).toBeLessThan(BOUND_MS);
      expect(service.isRunning()).toBe(true);
      expect(
        service
          .logLines()
          .some((l) => l.level === 'warn' && String(l.msg).startsWith('PostgreSQL did not answer a statement')),
      ).toBe(true);

      await hang.remove();
      removed = true;
      const after = await query();
      expect(after.status).toBe(200);
      expect(after.ms).toBeLessThan(BOUND_MS);
      expect((await listOverrides()).status).toBe(200);
      expect((await listOverrides(unseenAdminKey)).status).toBe(200);
    } finally {
      if (!removed) await hang.remove().catch(() => {});
    }
    expect(service.logs()).not.toMatch(/unhandled|uncaught/i);
  }, 30_000);
});
