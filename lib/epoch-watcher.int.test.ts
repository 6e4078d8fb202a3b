/**
 * The epoch watcher's LISTEN connection against a real PostgreSQL that ends idle sessions
 * (`idle_session_timeout`): it stays, so no cache is dropped and no notification is missed.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { expect, it, onTestFinished } from 'vitest';
import { createTestDatabase, endIdleSessions } from '../test/support/database.ts';
import { openPool, waitUntil } from '../test/harness/index.ts';
import { EpochWatcher } from './epoch-watcher.ts';

it("keeps its LISTEN connection through the database's idle_session_timeout: no invalidation, notifications still heard", async () => {
  const own = await createTestDatabase();
  onTestFinished(() => own.drop());
  await endIdleSessions(own);
  const pool = openPool(own.url, 2);
  onTestFinished(() => pool.end());
  const watcher = new EpochWatcher({
    name: 'idletest',
    pool,
    databaseUrl: own.url,
    table: 'arkvory_catalog_epoch',
    channel: 'arkvory_catalog',
    clock: { monotonicMs: () => performance.now() },
    log: pino({ level: 'silent' }),
    pollIntervalMs: 60_000,
  });
  let invalidations = 0;
  watcher.onInvalidate(() => invalidations++);
  await watcher.start();
  onTestFinished(() => watcher.stop());
  const listeners = () =>
    own.pool.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'arkvory-idletest-listen'",
      [own.name],
    );
  const [first] = (await listeners()).rows;
  expect(first).toBeDefined();
  const before = invalidations;
  await sleep(700);
  expect(invalidations).toBe(before);
  expect((await listeners()).rows).toEqual([first]);
  await own.pool.query("NOTIFY arkvory_catalog, 'x'");
  await waitUntil(() => invalidations > before, { timeoutMs: 5000, what: 'the notification to be heard' });
});
