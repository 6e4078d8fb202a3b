/**
 * Fault: the reader on slot 1 can no longer renew (its requests to PostgreSQL are held 30 s), and a new reader starts on slot 1.
 * Expected: the new process waits while the database reservation (10 s from the last renewal) lasts and takes the slot
 * only once it has expired, never earlier. Recovery: the new reader serves the file, with the next generation.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { sha256 } from '../test/support/content.ts';
import { call, leaseRow, logLine, logTimeMs } from './support/gateways.ts';
import { holdRenewals, release, SLOT_SUCCESSION, successionOf, useLinkedCluster } from './support/shared-cluster.ts';
import { trace } from './support/trace.ts';
import { waitUntil, withLeaseLines } from '../test/harness/index.ts';

const RESERVATION_MS = 10_000;

const cluster = useLinkedCluster({ ...SLOT_SUCCESSION, fileBytes: 256 * 1024 });

beforeAll(() => trace('writer serving, two readers parked'));

describe('a new reader on the slot of one that stopped renewing', () => {
  it('gets the slot only after the database reservation expired, then serves', async () => {
    const { old, successor, oldLink, successorLink } = successionOf(cluster);
    try {
      await release(old, oldLink);
      trace('old reader serving');
      const oldLease = logLine(old, 'slot lease acquired');
      await holdRenewals(cluster, oldLink, 1);
      trace('renewals held');
      const held = (await leaseRow(cluster.db.pool, 1))!;
      expect(held.owner).toBe(oldLease?.owner);
      expect(held.expiresAtMs - held.renewedAtMs).toBeCloseTo(RESERVATION_MS, -1);

      // The new process asks for the slot while the reservation still has seconds to run.
      await release(successor, successorLink);
      trace('successor serving');
      const waiting = logLine(successor, 'slot reserved by an earlier owner');
      expect(waiting?.remainingMs).toBeGreaterThan(0);
      expect(logTimeMs(waiting)).toBeLessThan(held.expiresAtMs);
      const taken = (await leaseRow(cluster.db.pool, 1))!;
      // Not earlier: the database stamped the takeover after the old reservation ended.
      expect(taken.acquiredAtMs).toBeGreaterThanOrEqual(held.expiresAtMs);
      // And not much later: it looks again as the reservation ends (on a loaded machine, allow 2 s).
      expect(taken.acquiredAtMs).toBeLessThan(held.expiresAtMs + 2000);
      expect(taken.owner).not.toBe(held.owner);
      expect(taken.generation).toBe(held.generation + 1);
      const acquired = logLine(successor, 'slot lease acquired');
      expect(acquired?.generation).toBe(taken.generation);
      expect(logTimeMs(acquired)).toBeGreaterThanOrEqual(held.expiresAtMs);

      const body = await call(`${successor.url}${cluster.contentPath}`, { key: cluster.key });
      expect(body.status).toBe(200);
      expect(sha256(body.body)).toBe(sha256(cluster.file));
      // The old reader, meanwhile, fenced itself and stays out.
      await waitUntil(
        async () => {
          // Anything else is thrown, so a timeout names what the old reader said last.
          const status = await call(`${old.url}/health/status`);
          if (status.status !== 503) throw new Error(`${status.status} ${status.body.toString()}`);
          return true;
        },
        {
          timeoutMs: 3000,
          intervalMs: 100,
          retryOnError: true,
          // A timeout shows the old reader's log tail: whether and when it fenced.
          process: old,
          what: 'the old reader to report 503',
        },
      ).catch(withLeaseLines(old));
      expect((await call(`${old.url}${cluster.contentPath}`, { key: cluster.key })).code).toBe('lease_lost');
    } finally {
      // Before the readers stop: their goodbyes to PostgreSQL would otherwise wait out the latency.
      await oldLink.proxy.remove();
      await successorLink.proxy.remove();
    }
  }, 120_000);
});
