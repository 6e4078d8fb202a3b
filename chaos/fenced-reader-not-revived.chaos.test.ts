/**
 * Fault: a reader's requests to PostgreSQL are held 20 s until it fences and a successor takes its slot; then the toxic is removed.
 * Expected: the held renewal reaches PostgreSQL late and matches no row (the slot has a new owner and generation);
 * the old reader stays 503 lease_lost and /health/status 503, alive, until it is restarted. Nothing revives it.
 */
import { describe, expect, it } from 'vitest';
import { awaitLogLine, call, leaseRow, logLine } from './support/gateways.ts';
import { holdRenewals, release, SLOT_SUCCESSION, successionOf, useLinkedCluster } from './support/shared-cluster.ts';
import { waitUntil } from '../test/harness/index.ts';

/** Longer than a renewal interval (2 s) plus a loaded machine's slack. */
const OBSERVE_MS = 3000;

const cluster = useLinkedCluster({ ...SLOT_SUCCESSION, fileBytes: 64 * 1024 });

/** What PostgreSQL last ran on the old reader's lease connection (the oldest reader lease session). */
async function oldLeaseSession(): Promise<{ query: string; queryStartMs: number; state: string } | undefined> {
  const { rows } = await cluster.db.pool.query<{ query: string; started: number; state: string }>(
    `SELECT query, extract(epoch FROM query_start) * 1000 AS started, state FROM pg_stat_activity
     WHERE datname = current_database() AND application_name = 'arkvory-reader-lease' ORDER BY backend_start LIMIT 1`,
  );
  const row = rows[0];
  return row ? { query: row.query, queryStartMs: Number(row.started), state: row.state } : undefined;
}

describe('removing the toxic after a fence and a takeover', () => {
  it('does not revive the fenced reader: its late renewal matches no row and it stays 503 until restarted', async () => {
    const { old, successor, oldLink, successorLink } = successionOf(cluster);
    try {
      await release(old, oldLink);
      const oldLease = logLine(old, 'slot lease acquired')!;
      const hold = await holdRenewals(cluster, oldLink, 1);
      await release(successor, successorLink);
      const taken = (await leaseRow(cluster.db.pool, 1))!;
      expect(taken.generation).toBe(Number(oldLease.generation) + 1);
      // Fenced before the takeover; its log line may still be on its way from the gateway's stdout.
      await awaitLogLine(old, 'fenced:', { timeoutMs: 2000, what: "the old reader's fence log line" });

      const removedAtMs = Date.now();
      await hold.remove();
      // The renewal held in the proxy now reaches PostgreSQL and runs there.
      await waitUntil(
        async () => {
          const session = await oldLeaseSession();
          return session !== undefined && session.queryStartMs >= removedAtMs - 5 && session.state === 'idle';
        },
        { timeoutMs: 5000, intervalMs: 50, what: "the old reader's held renewal to run" },
      );
      expect((await oldLeaseSession())?.query).toMatch(/^SELECT arkvory_lease_(renew|share)\(/);
      // It matched nothing: the row is still the successor's (owner, generation).
      const after = (await leaseRow(cluster.db.pool, 1))!;
      expect([after.owner, after.generation]).toEqual([taken.owner, taken.generation]);

      // The old process lives on and refuses, whatever the link does now.
      const observedUntilMs = performance.now() + OBSERVE_MS;
      while (performance.now() < observedUntilMs) {
        expect((await call(`${old.url}/health/status`)).status).toBe(503);
        const refused = await call(`${old.url}${cluster.contentPath}`, { key: cluster.key });
        expect([refused.status, refused.code]).toEqual([503, 'lease_lost']);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect(old.isRunning()).toBe(true);
      expect(old.logLines().filter((l) => String(l.msg).startsWith('fenced:'))).toHaveLength(1);
      expect((await leaseRow(cluster.db.pool, 1))?.owner).toBe(taken.owner);
      expect((await call(`${successor.url}${cluster.contentPath}`, { key: cluster.key })).status).toBe(200);
    } finally {
      await oldLink.proxy.remove();
      await successorLink.proxy.remove();
    }
  }, 120_000);
});
