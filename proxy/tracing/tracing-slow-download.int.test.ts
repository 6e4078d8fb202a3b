/**
 * The worked example of docs/observability.md ("Reading a slow download's trace"), made for real:
 * a principal allowed one download at a time and a per-principal bandwidth ceiling starts two
 * downloads at once. In Jaeger, the second one's trace shows where its time went: an
 * `arkvory.admission` span with `waited=true` as long as the first download held the slot, and
 * `arkvory.pacing.*` on the server span for the time the governor held its body. Bounds come from
 * the configured ceiling and the file's size.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { type JaegerServer, type JaegerSpan, type JaegerTrace, startJaeger } from '../../test/harness/index.ts';

const REPO = 'slow';
const RATE = 256 * 1024;
/** Two seconds at the ceiling: well past any burst the governor grants at once. */
const SIZE = 2 * RATE;
const CONTENT_SPAN = 'GET /api/v1/repositories/:repo/artifacts/:id/content';

let db: TestDatabase & { drop(): Promise<void> };
let jaeger: JaegerServer;
let gateway: GatewayProcess;
let key: string;
const artifact = `/api/v1/repositories/${REPO}/artifacts/paced.bin`;

beforeAll(async () => {
  [db, jaeger] = await Promise.all([createTestDatabase(), startJaeger()]);
  await createRepository(db.pool, REPO);
  key = (await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { [REPO]: 'write' } })).key;
  gateway = await startGateway({
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpUrl,
      OTEL_BSP_SCHEDULE_DELAY: '100',
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '1',
      ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(RATE),
    },
    timeoutMs: 90_000,
  });
  const put = await request(`${gateway.url}${artifact}`, {
    method: 'PUT',
    headers: bearer(key),
    body: randomContent(SIZE),
  });
  expect(put.status).toBe(201);
}, 180_000);

afterAll(async () => {
  await gateway?.stop();
  await jaeger?.stop();
  await db?.drop();
});

const tag = (span: JaegerSpan, name: string) => span.tags.find((t) => t.key === name)?.value;

it('a download queued behind another and paced shows both in its trace, as the worked example reads them', async () => {
  const traceIds = [randomContent(16).toString('hex'), randomContent(16).toString('hex')];
  const download = (traceId: string) =>
    request(`${gateway.url}${artifact}/content`, {
      headers: { ...bearer(key), traceparent: `00-${traceId}-${'1'.repeat(16)}-01` },
    });
  const first = download(traceIds[0]!);
  // The second asks once the first holds the principal's only slot.
  await new Promise((r) => setTimeout(r, 200));
  const second = download(traceIds[1]!);
  expect((await first).status).toBe(200);
  const res = await second;
  expect(res.status).toBe(200);
  expect(res.body.length).toBe(SIZE);

  const names = [CONTENT_SPAN, 'arkvory.admission', 'arkvory.store.open'];
  const traces = [await jaeger.traceWith(traceIds[0]!, names), await jaeger.traceWith(traceIds[1]!, names)];
  const span = (t: JaegerTrace, name: string) => t.spans.find((s) => s.operationName === name)!;
  // One got the slot at once (the first, unless the machine delayed it 200 ms); the other waited for it.
  const waitedFlags = traces.map((t) => tag(span(t, 'arkvory.admission'), 'arkvory.admission.waited'));
  expect(waitedFlags.sort()).toEqual([false, true]);
  const [a, b] = tag(span(traces[0]!, 'arkvory.admission'), 'arkvory.admission.waited')
    ? [traces[1]!, traces[0]!]
    : traces;
  const waited = span(b!, 'arkvory.admission');
  const firstServer = span(a!, CONTENT_SPAN);
  // Jaeger's times are microseconds. The slot came free when the first's body was sent.
  expect(waited.startTime + waited.duration).toBeGreaterThanOrEqual(firstServer.startTime + firstServer.duration * 0.5);
  expect(waited.duration / 1000).toBeGreaterThanOrEqual(((SIZE / RATE) * 1000) / 4);
  // The governor held each body for most of size ÷ ceiling, and says so on the server span.
  const secondServer = span(b!, CONTENT_SPAN);
  const minimumPacedMs = ((SIZE / RATE) * 1000) / 4;
  for (const server of [firstServer, secondServer]) {
    expect(Number(tag(server, 'arkvory.pacing.wait_ms'))).toBeGreaterThanOrEqual(minimumPacedMs);
    expect(Number(tag(server, 'arkvory.pacing.bytes'))).toBeGreaterThanOrEqual(SIZE / 2);
  }
  // Of the second's time, the queue and the pacing are nearly all of it: the rest is work.
  const accounted = waited.duration / 1000 + Number(tag(secondServer, 'arkvory.pacing.wait_ms'));
  expect(accounted).toBeLessThanOrEqual(secondServer.duration / 1000 + 1);
  expect(accounted).toBeGreaterThanOrEqual((secondServer.duration / 1000) * 0.5);
}, 60_000);
