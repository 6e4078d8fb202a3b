/**
 * What trace context a router hands the gateway (docs/tracing.md). The gateway continues only the
 * router's context (ARKVORY_TRACE_CONTEXT_FROM=trusted-proxies, the router on loopback listed as trusted)
 * and samples no new trace (parentbased_always_off), so a trace id in its request line and any span
 * it ends come from what the router sent:
 * - a router with tracing on that continues no client context and samples nothing sends its own
 *   unsampled span's context: the gateway's trace id is the router's, and no gateway span is sampled,
 *   whatever sampled `traceparent` the client sent;
 * - a router with tracing off passes the client's `traceparent`/`tracestate` on only when its own
 *   ARKVORY_TRACE_CONTEXT_FROM would continue them: with `none` the gateway starts its own trace,
 *   with `any` it continues the client's trace id, but the router marks the client untrusted
 *   (`arkvory=untrusted`) and the gateway does not follow its sampled flag.
 * The collector is a closed port: spans the gateway sampled would show in its export counters.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { freeLoopbackPort } from '../../test/harness/index.ts';

const REPO = 'routed';
const artifact = `/api/v1/repositories/${REPO}/artifacts/one.bin`;

let db: TestDatabase & { drop(): Promise<void> };
let gateway: GatewayProcess;
/** Tracing on, ARKVORY_TRACE_CONTEXT_FROM=none, parentbased_always_off. */
let tracedRouter: GatewayProcess;
/** Tracing off, ARKVORY_TRACE_CONTEXT_FROM=none. */
let untracedClosedRouter: GatewayProcess;
/** Tracing off, ARKVORY_TRACE_CONTEXT_FROM unset (any). */
let untracedOpenRouter: GatewayProcess;
let key: string;

beforeAll(async () => {
  db = await createTestDatabase();
  await createRepository(db.pool, REPO);
  key = (await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { [REPO]: 'write' } })).key;
  // Nothing listens there: an export fails at connect, and is counted.
  const otel = {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${await freeLoopbackPort()}`,
    OTEL_BSP_SCHEDULE_DELAY: '50',
    OTEL_TRACES_SAMPLER: 'parentbased_always_off',
  };
  gateway = await startGateway({
    env: {
      ...otel,
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_TRACE_CONTEXT_FROM: 'trusted-proxies',
      ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
    },
    timeoutMs: 90_000,
  });
  const router = { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: gateway.url };
  [tracedRouter, untracedClosedRouter, untracedOpenRouter] = await Promise.all([
    startGateway({ env: { ...otel, ...router, ARKVORY_TRACE_CONTEXT_FROM: 'none' }, timeoutMs: 90_000 }),
    startGateway({ env: { ...router, ARKVORY_TRACE_CONTEXT_FROM: 'none' }, timeoutMs: 90_000 }),
    startGateway({ env: router, timeoutMs: 90_000 }),
  ]);
  const body = randomContent(4096);
  expect((await request(`${gateway.url}${artifact}`, { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
}, 180_000);

afterAll(async () => {
  await Promise.all([tracedRouter?.stop(), untracedClosedRouter?.stop(), untracedOpenRouter?.stop()]);
  await gateway?.stop();
  await db?.drop();
});

/** Spans the gateway sampled so far: exported, dropped or pending, every one is counted. */
async function gatewaySpans(): Promise<number> {
  const text = (await request(`${gateway.url}/metrics`)).body.toString();
  let total = 0;
  for (const m of text.matchAll(/^arkvory_trace_spans_(?:exported_total|dropped_total\{[^}]*\}|pending) (\d+)$/gm))
    total += Number(m[1]);
  return total;
}

/** The trace id in the request line of the next download through `router` (router's, gateway's). */
async function downloadThrough(
  router: GatewayProcess,
  headers: Record<string, string>,
): Promise<{ router: unknown; gateway: unknown }> {
  const routerBefore = router.logLines().length;
  const gatewayBefore = gateway.logLines().length;
  const res = await request(`${router.url}${artifact}/content`, { headers: { ...bearer(key), ...headers } });
  expect(res.status).toBe(200);
  const line = (process: GatewayProcess, before: number) => () =>
    process
      .logLines()
      .slice(before)
      .find((l) => l.msg === 'request' && (process === gateway ? String(l.route).endsWith('/content') : true));
  const routerLine = line(router, routerBefore);
  const gatewayLine = line(gateway, gatewayBefore);
  await expect.poll(() => routerLine() !== undefined && gatewayLine() !== undefined, { timeout: 10_000 }).toBe(true);
  return { router: routerLine()!.traceId, gateway: gatewayLine()!.traceId };
}

function clientContext(traceId: string): Record<string, string> {
  return { traceparent: `00-${traceId}-00f067aa0ba902b7-01`, tracestate: 'client=chosen' };
}

it("a tracing router that continues no client context sends its own unsampled span's, never the client's", async () => {
  const clientTrace = 'abcdefabcdefabcdefabcdefabcdef01';
  for (let i = 0; i < 3; i++) {
    const ids = await downloadThrough(tracedRouter, clientContext(clientTrace));
    expect(ids.router).toMatch(/^[0-9a-f]{32}$/);
    expect(ids.router).not.toBe(clientTrace);
    // The gateway continues the router's trace, so its request line leads to the router's.
    expect(ids.gateway).toBe(ids.router);
  }
  // The router sampled nothing, and neither did the gateway: the client's sampled flag is not followed.
  expect(await gatewaySpans()).toBe(0);
});

it('a router with tracing off and ARKVORY_TRACE_CONTEXT_FROM=none passes no client context on', async () => {
  const clientTrace = 'abcdefabcdefabcdefabcdefabcdef02';
  const ids = await downloadThrough(untracedClosedRouter, clientContext(clientTrace));
  expect(ids.router).toBeUndefined();
  expect(ids.gateway).toMatch(/^[0-9a-f]{32}$/);
  expect(ids.gateway).not.toBe(clientTrace);
  expect(await gatewaySpans()).toBe(0);
});

it('a router with tracing off that would continue any client context passes its trace id on, marked untrusted: the gateway does not follow its flag', async () => {
  const clientTrace = 'abcdefabcdefabcdefabcdefabcdef03';
  // A client's own `arkvory=` member is taken out, never passed on as the router's word.
  const ids = await downloadThrough(untracedOpenRouter, {
    traceparent: `00-${clientTrace}-00f067aa0ba902b7-01`,
    tracestate: 'client=chosen,arkvory=trusted',
  });
  expect(ids.gateway).toBe(clientTrace);
  // Its server span ended before its request line was written: counted by now, had it been sampled.
  // The gateway trusts the router, but the router did not trust the client: parentbased_always_off's
  // root decision, not the client's flag.
  expect(await gatewaySpans()).toBe(0);
  // The gateway does follow a trusted peer's own sampled flag (this test's, from 127.0.0.1).
  const direct = await request(`${gateway.url}${artifact}/content`, {
    headers: { ...bearer(key), traceparent: '00-abcdefabcdefabcdefabcdefabcdef04-00f067aa0ba902b7-01' },
  });
  expect(direct.status).toBe(200);
  await expect.poll(gatewaySpans, { timeout: 10_000 }).toBeGreaterThan(0);
});
