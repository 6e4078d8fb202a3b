/**
 * Demonstration scenario (the pattern the other chaos files copy): a pg Pool reaches the machine's
 * PostgreSQL through a toxiproxy proxy. Faults: latency on the link, then the link disabled.
 * Expected: queries slow down by at least the latency; while disabled, idle clients fail into the
 * pool's 'error' handler (the process lives on) and a new query fails fast with ECONNREFUSED;
 * after re-enabling, queries succeed again.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, test as base } from 'vitest';
import { addLatency, type ProxiedUpstream, startToxiproxy, type ToxiproxyServer } from './support/toxiproxy.ts';
import { waitUntil } from '../test/harness/index.ts';

const LATENCY_MS = 600;

interface PgLink {
  link: ProxiedUpstream;
  pool: pg.Pool;
  /** What the pool's 'error' handler caught. */
  poolErrors: Error[];
  timedQueryMs(): Promise<number>;
  setEnabled(enabled: boolean): Promise<void>;
}

let toxiproxy: ToxiproxyServer;
beforeAll(async () => {
  toxiproxy = await startToxiproxy();
});
afterAll(async () => {
  await toxiproxy?.stop();
});

/** Each test gets its own proxy and pool, torn down after it. */
const test = base.extend<{ pg: PgLink }>({
  pg: async ({}, use) => {
    const adminUrl = inject('adminDatabaseUrl');
    const link = await toxiproxy.proxyToUrl(adminUrl);
    const pool = new pg.Pool({ connectionString: link.through(adminUrl), max: 2, connectionTimeoutMillis: 5000 });
    const poolErrors: Error[] = [];
    // Without this listener an idle client dropped by the fault would crash the process.
    pool.on('error', (err) => poolErrors.push(err));
    await use({
      link,
      pool,
      poolErrors,
      async timedQueryMs() {
        const startedMs = performance.now();
        const { rows } = await pool.query<{ one: number }>('SELECT 1 AS one');
        expect(rows).toEqual([{ one: 1 }]);
        return performance.now() - startedMs;
      },
      async setEnabled(enabled) {
        await link.proxy.update({ enabled, listen: link.proxy.listen, upstream: link.proxy.upstream });
      },
    });
    await pool.end().catch(() => {});
    await link.proxy.remove().catch(() => {});
  },
});

describe('pg Pool through a toxiproxy link to PostgreSQL', () => {
  test(`latency of ${LATENCY_MS} ms on the link slows every query by at least that much, and only while it is there`, async ({
    pg: db,
  }) => {
    await db.timedQueryMs(); // connect outside the measurement
    const baselineMs = await db.timedQueryMs();
    const toxic = await addLatency(db.link, { name: 'pg-latency', stream: 'downstream', latencyMs: LATENCY_MS });
    const slowMs = await db.timedQueryMs();
    expect(slowMs).toBeGreaterThanOrEqual(LATENCY_MS - 15);
    expect(slowMs).toBeLessThan(LATENCY_MS + 3000);
    await toxic.remove();
    const recoveredMs = await db.timedQueryMs();
    expect(recoveredMs).toBeLessThan(LATENCY_MS);
    expect(baselineMs).toBeLessThan(LATENCY_MS);
  });

  test('a disabled link fails idle clients into the pool error handler and new queries fast; re-enabling recovers', async ({
    pg: db,
  }) => {
    await db.timedQueryMs(); // leaves an idle client in the pool
    expect(db.pool.idleCount).toBeGreaterThan(0);

    await db.setEnabled(false);
    await waitUntil(() => db.poolErrors.length > 0, { timeoutMs: 3000, intervalMs: 2, what: 'the idle client error' });
    expect(db.poolErrors[0]?.message).toMatch(/terminated|ECONNRESET|closed/i);

    const startedMs = performance.now();
    const failure = await db.pool.query('SELECT 1').then(
      () => undefined,
      (err: NodeJS.ErrnoException) => err,
    );
    expect(failure?.code).toBe('ECONNREFUSED');
    expect(performance.now() - startedMs).toBeLessThan(2000);

    await db.setEnabled(true);
    expect(await db.timedQueryMs()).toBeLessThan(3000);
  });
});
