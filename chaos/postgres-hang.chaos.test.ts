/**
 * Fault: PostgreSQL takes the writer's connections and statements and does not answer (a latency on
 * its answers far longer than the test: as a server stopped with SIGSTOP, the answers come once it
 * goes on, and the connections stay open). Expected: a request that needs a statement answers 503
 * `unavailable` within its bound (ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS to get a
 * connection, as much for the statement), again and again while the database hangs (the pool is not
 * held by hung statements); the gateway stays up and answers what needs no database (/health/live).
 * Once the database answers again, the same request succeeds.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { randomContent } from '../test/support/content.ts';
import { type GatewayProcess, startGateway } from '../test/support/gateway.ts';
import { call } from './support/gateways.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';
import { addLatency, type ProxiedUpstream } from './support/toxiproxy.ts';

const TIMEOUT_MS = 1000;
/** A connection's wait and a statement's, plus the time a loaded machine adds to an answer. */
const BOUND_MS = 2 * TIMEOUT_MS + 1500;
const repo = '/api/v1/repositories/chaos';
const hot = randomContent(4096);

const chaos = useToxiproxyAndDatabase();
let link: ProxiedUpstream;
let writer: GatewayProcess;

beforeAll(async () => {
  link = await chaos.toxiproxy.proxyToUrl(inject('adminDatabaseUrl'));
  writer = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: link.through(chaos.db.url),
      ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: String(TIMEOUT_MS),
    },
  });
  expect(
    (await call(`${writer.url}${repo}/artifacts/hot.bin`, { method: 'PUT', key: chaos.key, body: hot })).status,
  ).toBe(201);
  expect((await call(`${writer.url}${repo}/artifacts/hot.bin/content`, { key: chaos.key })).status).toBe(200);
}, 60_000);
afterAll(async () => {
  await writer?.stop('SIGTERM');
});

/** The answer and how long it took; past twice the bound, none (status 0), so a hang fails an assertion, not the test's timeout. */
async function timed(path: string): Promise<Awaited<ReturnType<typeof call>> & { ms: number }> {
  const startedMs = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const none = new Promise<Awaited<ReturnType<typeof call>>>(
    (resolve) =>
      (timer = setTimeout(
        () => resolve({ status: 0, code: 'no answer', headers: {}, body: Buffer.alloc(0) }),
        2 * BOUND_MS,
      )),
  );
  const res = await Promise.race([call(`${writer.url}${path}`, { key: chaos.key }), none]);
  clearTimeout(timer);
  return { ...res, ms: performance.now() - startedMs };
}

describe('PostgreSQL that takes statements and does not answer', () => {
  it(`answers what needs it 503 unavailable within ${BOUND_MS} ms, serves the rest, and recovers`, async () => {
    const hang = await addLatency(link, { name: 'hang', stream: 'downstream', latencyMs: 120_000 });
    let removed = false;
    try {
      // More requests than the pool has connections, twice over: a hung statement holds none for long.
      const needing = await Promise.all(Array.from({ length: 12 }, (_, i) => timed(`${repo}/artifacts/cold-${i}.bin`)));
      for (const answer of needing) {
        expect([answer.status, answer.code, answer.headers['retry-after']]).toEqual([503, 'unavailable', '1']);
        expect(answer.ms).toBeLessThan(BOUND_MS);
      }
      const again = await timed(`${repo}/artifacts/cold-0.bin`);
      expect([again.status, again.code, again.headers['retry-after']]).toEqual([503, 'unavailable', '1']);
      expect(again.ms).toBeLessThan(BOUND_MS);

      const live = await timed('/health/live');
      expect(live.status).toBe(200);
      // Its key, grant and catalog entry were cached, but a cache the database cannot confirm fresh
      // is not trusted (a revoked key must not go on working): 200 until the next check, then 503.
      const cached = await timed(`${repo}/artifacts/hot.bin/content`);
      expect(
        cached.status === 200 ? cached.body.equals(hot) : [cached.status, cached.code, cached.headers['retry-after']],
      ).toEqual(cached.status === 200 ? true : [503, 'unavailable', '1']);
      expect(cached.ms).toBeLessThan(BOUND_MS);
      expect(writer.isRunning()).toBe(true);
      expect(writer.logLines().some((l) => String(l.msg).startsWith('PostgreSQL did not answer a statement'))).toBe(
        true,
      );

      await hang.remove();
      removed = true;
      const after = await timed(`${repo}/artifacts/cold-0.bin`);
      expect([after.status, after.code]).toEqual([404, 'not_found']);
      expect(after.ms).toBeLessThan(BOUND_MS);
      expect((await timed(`${repo}/artifacts/hot.bin`)).status).toBe(200);
    } finally {
      if (!removed) await hang.remove().catch(() => {});
    }
    expect(writer.logs()).not.toMatch(/unhandled|uncaught/i);
  }, 30_000);
});
