/**
 * The usage recorder's flushes against the suite's real PostgreSQL when it does not answer:
 * - through a real toxiproxy whose `timeout` toxic swallows every byte (the database takes the
 *   connection and never answers), one flush at a time holds at most one connection, the counts
 *   held stay within their bound, and once the link carries again they reach the tables exactly once;
 * - a flush blocked inside PostgreSQL (a trigger waiting on a lock this test holds), in its INSERT or
 *   in its COMMIT, is abandoned at its timeout with its connection ended; once the lock goes, the
 *   blocked transaction rolls back (INSERT) or commits (COMMIT), and the recorder, asking the
 *   database which, counts every request exactly once; while a COMMIT is in doubt, newer counts
 *   (of rows the trigger lets through) go in meanwhile.
 */
import pg from 'pg';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { addToxic, startToxiproxy, type ToxiproxyServer } from '../../chaos/support/toxiproxy.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { observeDownload, principalNumbered } from '../../test/support/usage-observations.ts';
import { systemClock } from '../../policy/clock.ts';
import { startUsageRecorder, type UsageRecorder } from './usage-recorder.ts';

const FLUSH_MS = 200;
const TIMEOUT_MS = 1500;
const MAX_ROWS = 50;
const LOCK = 4242;

const db = useTestDatabase();
let toxiproxy: ToxiproxyServer;
const cleanups: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  toxiproxy = await startToxiproxy();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  await db.pool.query('TRUNCATE arkvory_usage_artifacts, arkvory_usage_principal_days');
});
afterAll(async () => {
  await toxiproxy?.stop();
});

/** A pool as the gateway's, to `url`; its connect gives up before a flush's timeout. */
function poolTo(url: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: 500 });
  pool.on('error', () => {});
  cleanups.push(() => pool.end());
  return pool;
}

function recorderOn(pool: pg.Pool): UsageRecorder {
  const recorder = startUsageRecorder({
    pool,
    log: pino({ level: 'silent' }),
    clock: systemClock,
    flushMs: FLUSH_MS,
    maxRows: MAX_ROWS,
    flushTimeoutMs: TIMEOUT_MS,
  });
  cleanups.push(() => recorder.stop());
  return recorder;
}

async function stored(): Promise<{ requests: number; downloads: number }> {
  const { rows } = await db.pool.query<{ requests: number; downloads: number }>(
    `SELECT (SELECT coalesce(sum(requests), 0)::int FROM arkvory_usage_principal_days) AS requests,
            (SELECT coalesce(sum(downloads), 0)::int FROM arkvory_usage_artifacts) AS downloads`,
  );
  return rows[0]!;
}

/** Connections the pool has lent out now. */
const lent = (pool: pg.Pool) => pool.totalCount - pool.idleCount;

describe('usage flushes while PostgreSQL takes the connection and never answers', () => {
  it('hold one connection and a bounded backlog, and add what they held once the link carries again', async () => {
    const link = await toxiproxy.proxyToUrl(db.url);
    const pool = poolTo(link.through(db.url));
    const recorder = recorderOn(pool);
    await pool.query('SELECT 1'); // the link carries: the first connection is made and idle
    const blackhole = await addToxic(link, 'timeout', 'upstream', { timeout: 0 }, 'blackhole');

    let n = 0;
    let most = 0;
    // Several flush timeouts' worth of requests, each on rows of its own.
    const until = performance.now() + 3 * TIMEOUT_MS;
    while (performance.now() < until) {
      for (let i = 0; i < 500; i++) observeDownload(recorder, ++n);
      most = Math.max(most, lent(pool));
      expect(recorder.status.pendingRows).toBeLessThanOrEqual(2 * MAX_ROWS);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(most).toBe(1);
    expect(lent(pool)).toBeLessThanOrEqual(1);
    expect(recorder.status.flushFailures.timeout + recorder.status.flushFailures.failed).toBeGreaterThan(0);
    expect(await stored()).toEqual({ requests: 0, downloads: 0 });

    await blackhole.remove();
    await waitUntil(async () => recorder.status.pendingRows === 0, {
      timeoutMs: 4 * TIMEOUT_MS,
      what: 'the backlog to reach the database',
    });
    const { dropped } = recorder.status;
    const counts = await stored();
    expect(counts.requests).toBeGreaterThan(0);
    expect(counts.requests + dropped.requests).toBe(n);
    expect(counts.downloads + dropped.downloads).toBe(n);
  });
});

describe('a usage flush blocked inside PostgreSQL past its timeout', () => {
  for (const where of ['INSERT', 'COMMIT'] as const) {
    it(`in its ${where} is abandoned with its connection, and its requests are counted once whatever became of it`, async () => {
      // The trigger waits for the lock this test holds, for principal 1's row: at the insert, or
      // deferred to the commit.
      await db.pool.query(
        `CREATE OR REPLACE FUNCTION usage_wait() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.principal_id = '${principalNumbered(1)}' THEN PERFORM pg_advisory_xact_lock_shared(${LOCK}); END IF;
             RETURN NULL;
           END $$`,
      );
      await db.pool.query(
        where === 'INSERT'
          ? `CREATE TRIGGER usage_wait AFTER INSERT ON arkvory_usage_principal_days FOR EACH ROW EXECUTE FUNCTION usage_wait()`
          : `CREATE CONSTRAINT TRIGGER usage_wait AFTER INSERT ON arkvory_usage_principal_days
               DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION usage_wait()`,
      );
      cleanups.push(async () => {
        await db.pool.query('DROP TRIGGER IF EXISTS usage_wait ON arkvory_usage_principal_days');
        await db.pool.query('DROP FUNCTION IF EXISTS usage_wait()');
      });
      const holder = new pg.Client({ connectionString: db.url });
      await holder.connect();
      cleanups.push(() => holder.end());
      await holder.query('SELECT pg_advisory_lock($1)', [LOCK]);

      const pool = poolTo(db.url);
      const recorder = recorderOn(pool);
      let n = 0;
      for (let i = 0; i < 5; i++) observeDownload(recorder, ++n);
      // The interval's flush blocks, and is given up at its timeout with its connection ended.
      await waitUntil(() => recorder.status.flushFailures.timeout > 0, {
        timeoutMs: FLUSH_MS + 4 * TIMEOUT_MS,
        what: 'the blocked flush to time out',
      });
      expect(recorder.status.pendingRows).toBe(10);
      // Its connection was ended there and then: the pool holds at most the next flush's.
      expect(pool.totalCount).toBeLessThanOrEqual(1);
      for (let i = 0; i < 3; i++) observeDownload(recorder, ++n);
      if (where === 'COMMIT') {
        // The batch in doubt waits aside; what came since goes in meanwhile.
        await waitUntil(async () => (await stored()).requests === 3, {
          timeoutMs: 4 * TIMEOUT_MS,
          what: 'the counts after the one in doubt',
        });
        expect(recorder.status.pendingRows).toBe(10);
      }

      // The blocked transaction goes on: it rolls back (its client is gone) or commits.
      await holder.query('SELECT pg_advisory_unlock($1)', [LOCK]);
      await db.pool.query('DROP TRIGGER usage_wait ON arkvory_usage_principal_days');
      await waitUntil(async () => recorder.status.pendingRows === 0 && (await stored()).requests >= n, {
        timeoutMs: 4 * TIMEOUT_MS,
        what: 'every count to reach the database',
      });
      // Settled: a flush or two more change nothing.
      await new Promise((resolve) => setTimeout(resolve, 3 * FLUSH_MS));
      expect(await stored()).toEqual({ requests: n, downloads: n });
      expect(recorder.status.dropped).toEqual({ downloads: 0, requests: 0 });
    });
  }
});
