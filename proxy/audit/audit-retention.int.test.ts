/**
 * Audit retention against the suite's real PostgreSQL through a real toxiproxy whose `timeout`
 * toxic swallows every byte (the database takes the statement and never answers): one run at a
 * time, each giving its connection up at its timeout, so no pooled connection is held for good;
 * once the link carries again the next run prunes.
 */
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addToxic, startToxiproxy, type ToxiproxyServer } from '../../chaos/support/toxiproxy.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startAuditRetention } from './audit-retention.ts';

const INTERVAL_MS = 300;
const TIMEOUT_MS = 1000;

const db = useTestDatabase();
let toxiproxy: ToxiproxyServer;
beforeAll(async () => {
  toxiproxy = await startToxiproxy();
});
afterAll(async () => {
  await toxiproxy?.stop();
});

describe('audit retention while PostgreSQL does not answer', () => {
  it('holds one connection at most, never for good, and prunes once the link carries again', async () => {
    await db.pool.query(
      `INSERT INTO arkvory_audit_events (at, action, actor_kind, operator, host, source)
       VALUES (now() - interval '40 days', 'backup.create', 'operator', 'test', 'test', 'cli')`,
    );
    const link = await toxiproxy.proxyToUrl(db.url);
    const pool = new pg.Pool({ connectionString: link.through(db.url), max: 4, connectionTimeoutMillis: 500 });
    pool.on('error', () => {});
    const warnings: string[] = [];
    const log = pino({ level: 'warn' }, { write: (s: string) => warnings.push(JSON.parse(s).msg) });
    await pool.query('SELECT 1'); // an idle connection, made while the link carries
    const blackhole = await addToxic(link, 'timeout', 'upstream', { timeout: 0 }, 'blackhole');
    const stop = startAuditRetention({ pool, log, keepDays: 30, intervalMs: INTERVAL_MS, timeoutMs: TIMEOUT_MS });
    try {
      let most = 0;
      const until = performance.now() + 3 * TIMEOUT_MS;
      while (performance.now() < until) {
        most = Math.max(most, pool.totalCount - pool.idleCount);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(most).toBe(1);
      expect(warnings.filter((m) => m.startsWith('audit retention: pruning failed')).length).toBeGreaterThan(0);

      await blackhole.remove();
      await waitUntil(
        async () => Number((await db.pool.query('SELECT count(*) AS n FROM arkvory_audit_events')).rows[0].n) === 0,
        { timeoutMs: 4 * TIMEOUT_MS, what: 'the 40-day-old row pruned' },
      );
    } finally {
      stop();
      await pool.end();
    }
  });
});
