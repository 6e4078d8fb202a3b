import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../proxy/server/logger.ts';
import { createTestDatabase, endIdleSessions, type TestDatabase } from '../../test/support/database.ts';
import { runCli } from '../../test/support/gateway.ts';
import { ManualClock, systemClock } from '../clock.ts';
import { ManualTimers, type TimerHandle, type Timers } from '../timers.ts';
import { Coordinator, type CoordinatorOptions, type RenewalOutcome } from './coordinator.ts';
import { PERMIT_MS, RENEW_AFTER_MS } from './lease-permit.ts';
import { resetPolicy } from './download-policy.ts';

const log = createLogger('silent');
const policy = { slots: 3, downloadBytesPerSec: 3 * 1024 * 1024, downloadBytesPerSecPerPrincipal: 0 };
const open: Coordinator[] = [];
const dbs: Array<{ drop(): Promise<void> }> = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
  await Promise.all(dbs.splice(0).map((d) => d.drop()));
});

/** Waits (real time, bounded) for something real I/O brings about, e.g. a renewal query's answer. */
async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(10);
  }
}

/**
 * Opens a reader on slot 1 with `clock` and `timers`; `outcome()` is undefined until it opened
 * ('opened') or failed (its error).
 */
function openReader(db: TestDatabase, clock: ManualClock, timers: Timers) {
  let outcome: unknown;
  const opening = Coordinator.open({
    databaseUrl: db.url,
    role: 'reader',
    shared: { slot: 1, policy },
    clock,
    timers,
    log,
  }).then(
    (c) => {
      open.push(c);
      outcome = 'opened';
    },
    (err: unknown) => {
      outcome = err;
    },
  );
  return { opening, outcome: () => outcome };
}

async function freshDb(): Promise<TestDatabase> {
  const db = await createTestDatabase();
  dbs.push(db);
  return db;
}

/** Locks slot `slot`'s lease row, so a renewal's UPDATE waits: to the coordinator, a hung link. */
async function holdLeaseRow(db: TestDatabase, slot: number): Promise<{ release(): Promise<void> }> {
  const blocker = new pg.Client({ connectionString: db.url });
  await blocker.connect();
  await blocker.query('BEGIN');
  await blocker.query('SELECT slot FROM arkvory_gateway_leases WHERE slot = $1 FOR UPDATE', [slot]);
  return {
    async release() {
      await blocker.query('ROLLBACK');
      await blocker.end();
    },
  };
}

async function coordinator(
  db: TestDatabase,
  options: Partial<CoordinatorOptions> & Pick<CoordinatorOptions, 'role'>,
): Promise<Coordinator> {
  const c = await Coordinator.open({ databaseUrl: db.url, clock: systemClock, log, ...options });
  open.push(c);
  return c;
}

describe('coordinator barriers and stored policy (real PostgreSQL)', () => {
  it('refuses a second writer on the same database, standalone or shared', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api' });
    await expect(coordinator(db, { role: 'api' })).rejects.toThrow(/another writer/);
  });

  it('records the policy at the writer and refuses mismatches, a missing policy and a standalone bypass', async () => {
    const db = await freshDb();
    await expect(coordinator(db, { role: 'reader', shared: { slot: 1, policy } })).rejects.toThrow(
      /no shared download policy is stored yet/,
    );
    const writer = await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    expect(writer.snapshot()).toEqual({ slot: 0, slots: 3, active: true, leaseSeconds: 10 });
    await expect(
      coordinator(db, { role: 'reader', shared: { slot: 1, policy: { ...policy, slots: 2 } } }),
    ).rejects.toThrow(/differs from this process's/);
    await expect(
      coordinator(db, {
        role: 'reader',
        shared: { slot: 1, policy: { ...policy, downloadBytesPerSec: policy.downloadBytesPerSec + 1 } },
      }),
    ).rejects.toThrow(/differs/);
    const reader = await coordinator(db, { role: 'reader', shared: { slot: 1, policy } });
    expect(reader.isPermitted()).toBe(true);
    await writer.close();
    await expect(coordinator(db, { role: 'api' })).rejects.toThrow(/a standalone gateway would bypass it/);
  });

  it('refuses a slot held by a live, renewing gateway within 2–3 s', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    await coordinator(db, { role: 'reader', shared: { slot: 1, policy } });
    const started = Date.now();
    await expect(coordinator(db, { role: 'reader', shared: { slot: 1, policy } })).rejects.toThrow(
      /held by a running gateway/,
    );
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(2000);
    expect(took).toBeLessThan(3500);
  });

  it('waits out a stopped owner’s reservation (not less), then takes the slot with a higher generation', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const first = await coordinator(db, { role: 'reader', shared: { slot: 2, policy } });
    const firstGeneration = first.generation!;
    await first.close();
    const { rows } = await db.pool.query(
      `SELECT extract(epoch FROM expires_at - clock_timestamp()) * 1000 AS ms FROM arkvory_gateway_leases WHERE slot = 2`,
    );
    const remaining = Number(rows[0].ms);
    const started = Date.now();
    const second = await coordinator(db, { role: 'reader', shared: { slot: 2, policy } });
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(remaining - 50);
    expect(waited).toBeLessThan(15_000);
    expect(second.generation).toBe(firstGeneration + 1);
  }, 30_000);

  it('gives up waiting for a slot after 15 s (spec: "the wait is limited to 15 seconds") when a reservation outlasts it (injected clock)', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const first = await coordinator(db, { role: 'reader', shared: { slot: 1, policy } });
    await first.close();
    // A stationary reservation longer than any renewal would leave (a stopped owner whose database
    // clock jumped ahead): not renewing, so not "live", but not expiring within the bound either.
    await db.pool.query(
      `UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() + interval '60 seconds' WHERE slot = 1`,
    );
    const clock = new ManualClock();
    const manual = new ManualTimers(clock);
    // The acquire pauses on a timer between its looks at the row; each look is a real query, during
    // which the clock stands still. Its other timers bound a query's answer (15 s from the query's
    // start): a pending timer shorter than that is the pause, which the test then lets run out.
    const pauses = new Map<TimerHandle, number>();
    const timers: Timers = {
      setTimeout: (callback, delayMs) => {
        const handle = manual.setTimeout(() => {
          pauses.delete(handle);
          callback();
        }, delayMs);
        if (delayMs < 15_000) pauses.set(handle, clock.monotonicMs() + delayMs);
        return handle;
      },
      clearTimeout: (handle) => {
        pauses.delete(handle);
        manual.clearTimeout(handle);
      },
    };
    const { opening, outcome } = openReader(db, clock, timers);
    let looks = 0;
    for (;;) {
      await until(() => outcome() !== undefined || pauses.size > 0);
      if (outcome() !== undefined) break;
      looks++;
      if (looks > 20) throw new Error('the acquire kept pausing');
      const [dueMs] = [...pauses.values()];
      await manual.advance(dueMs! - clock.monotonicMs());
    }
    await opening;
    expect(outcome()).toBeInstanceOf(Error);
    expect((outcome() as Error).message).toMatch(/stayed reserved for 15 s/);
    // It gave up at the look due when the 15 s ran out: not before, and not a pause later.
    expect(clock.monotonicMs()).toBe(15_000);
  });

  it('gives up after 15 s when the database leaves the slot’s acquire unanswered (injected clock)', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const first = await coordinator(db, { role: 'reader', shared: { slot: 1, policy } });
    await first.close();
    await db.pool.query(
      `UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE slot = 1`,
    );
    // The acquire's upsert waits on the row: to the starting process, a database that does not answer.
    const held = await holdLeaseRow(db, 1);
    try {
      const clock = new ManualClock();
      const timers = new ManualTimers(clock);
      const { opening, outcome } = openReader(db, clock, timers);
      const waitingOnLock = async () =>
        (
          await db.pool.query(
            `SELECT 1 FROM pg_stat_activity WHERE application_name = 'arkvory-reader-lease' AND wait_event_type = 'Lock'`,
          )
        ).rowCount === 1;
      const deadline = Date.now() + 10_000;
      while (!(await waitingOnLock())) {
        if (Date.now() > deadline) throw new Error('the acquire never waited on the lease row');
        await sleep(20);
      }
      await timers.advance(15_000 - 1);
      expect(outcome()).toBeUndefined();
      await timers.advance(1);
      await until(() => outcome() !== undefined);
      await opening;
      expect(outcome()).toBeInstanceOf(Error);
      expect((outcome() as Error).message).toMatch(/did not answer the lease of slot 1 within 15 s/);
    } finally {
      await held.release();
    }
  });

  it('fences when a newer generation takes the slot, and never revives (injected clock: nothing is left to run)', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const reader = await coordinator(db, { role: 'reader', shared: { slot: 1, policy }, clock, timers });
    const reasons: string[] = [];
    reader.onFenced((r) => reasons.push(r));
    const renewals: RenewalOutcome[] = [];
    reader.onRenewal((outcome) => renewals.push(outcome));
    // Another owner took over (as if our reservation had expired during a partition).
    await db.pool.query('UPDATE arkvory_gateway_leases SET owner = $1, generation = generation + 1 WHERE slot = 1', [
      randomUUID(),
    ]);
    // The renewal is due 2 s after the acquisition was confirmed; its query is real.
    await timers.advance(RENEW_AFTER_MS);
    await until(() => renewals.length > 0);
    expect(renewals).toEqual(['rejected']);
    expect(reader.isPermitted()).toBe(false);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatch(/newer generation/);
    // Give it the slot back in the database: nothing is scheduled any more (no renewal, no expiry
    // check), so nothing can revive it; a minute of renewal periods changes nothing.
    await db.pool.query(
      "UPDATE arkvory_gateway_leases SET owner = $1, generation = $2, expires_at = clock_timestamp() + interval '10 s' WHERE slot = 1",
      [reader.owner, 1],
    );
    expect(timers.size).toBe(0);
    await timers.advance(30 * RENEW_AFTER_MS);
    expect(renewals).toEqual(['rejected']);
    expect(reasons).toHaveLength(1);
    expect(reader.isPermitted()).toBe(false);
    expect(reader.snapshot()?.active).toBe(false);
  });

  it('fences at the permit deadline while a renewal hangs (injected clock), not a millisecond late', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const reader = await coordinator(db, { role: 'reader', shared: { slot: 1, policy }, clock, timers });
    const fencedAt: number[] = [];
    reader.onFenced(() => fencedAt.push(clock.monotonicMs()));
    const renewals: RenewalOutcome[] = [];
    reader.onRenewal((outcome) => renewals.push(outcome));
    const held = await holdLeaseRow(db, 1);
    try {
      // Acquired at monotonic 0 (the clock stands still during the real query): the permit lasts
      // until PERMIT_MS, the renewal starts at RENEW_AFTER_MS and hangs.
      const start = clock.monotonicMs();
      await timers.advance(RENEW_AFTER_MS);
      await timers.advance(PERMIT_MS - RENEW_AFTER_MS - 1);
      expect(reader.isPermitted()).toBe(true);
      expect(fencedAt).toEqual([]);
      // The expiry timer fires 1 ms past the deadline (the permit is valid strictly before it).
      await timers.advance(2);
      expect(fencedAt).toEqual([start + PERMIT_MS + 1]);
      expect(reader.isPermitted()).toBe(false);
      expect(renewals).toEqual([]);
    } finally {
      await held.release();
    }
    // The hung renewal's late answer does not revive it.
    await until(() => renewals.length > 0);
    expect(reader.isPermitted()).toBe(false);
    expect(fencedAt).toHaveLength(1);
  });

  it('fences at the permit deadline even when its timers come early: a check that finds it valid arms the next', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const clock = new ManualClock();
    const manual = new ManualTimers(clock);
    // Every timer fires 5 ms before its delay (at least 1 ms after it was set); Node's fire up to
    // ~2 ms early by performance.now(). The first expiry check then finds the permit still valid.
    const EARLY_MS = 5;
    const early: Timers = {
      setTimeout: (callback, delayMs) => manual.setTimeout(callback, Math.max(1, delayMs - EARLY_MS)),
      clearTimeout: (handle) => manual.clearTimeout(handle),
    };
    const reader = await coordinator(db, { role: 'reader', shared: { slot: 1, policy }, clock, timers: early });
    const fencedAt: number[] = [];
    reader.onFenced(() => fencedAt.push(clock.monotonicMs()));
    const held = await holdLeaseRow(db, 1);
    try {
      const start = clock.monotonicMs();
      await manual.advance(PERMIT_MS - EARLY_MS);
      expect(fencedAt).toEqual([]);
      await manual.advance(EARLY_MS + 1);
      expect(fencedAt).toHaveLength(1);
      expect(fencedAt[0]).toBeGreaterThanOrEqual(start + PERMIT_MS);
      expect(fencedAt[0]).toBeLessThanOrEqual(start + PERMIT_MS + 1);
    } finally {
      await held.release();
    }
  });

  it('fences when the lease connection is lost (its barriers are gone with it)', async () => {
    const db = await freshDb();
    const writer = await coordinator(db, { role: 'api' });
    const fenced = new Promise<string>((resolve) => writer.onFenced(resolve));
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'arkvory-api-lease'`,
    );
    expect(await fenced).toMatch(/lease connection/);
    expect(writer.isPermitted()).toBe(false);
  });

  it('keeps its connection through the database’s idle_session_timeout: a standalone gateway’s is idle from start to stop', async () => {
    const db = await freshDb();
    await endIdleSessions(db);
    const writer = await coordinator(db, { role: 'api' });
    const fenced: string[] = [];
    writer.onFenced((reason) => fenced.push(reason));
    await sleep(700);
    expect(fenced).toEqual([]);
    expect(writer.isPermitted()).toBe(true);
    // Its session still holds the writer barrier: a second writer is refused.
    await expect(coordinator(db, { role: 'api' })).rejects.toThrow(/another writer/);
  });

  it('policy reset refuses while a gateway runs or a lease is unexpired, then resets in one transaction', async () => {
    const db = await freshDb();
    const writer = await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await expect(resetPolicy(client)).rejects.toThrow(/hold the maintenance barrier/);
      await writer.close();
      await expect(resetPolicy(client)).rejects.toThrow(/slot 0 \(\d+(\.\d)? s left\)/);
      await db.pool.query(`UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() - interval '1 second'`);
      expect(await resetPolicy(client)).toEqual({ leasesDeleted: 1, policyDeleted: true });
    } finally {
      await client.end();
    }
    // After the reset a standalone writer may start again.
    await coordinator(db, { role: 'api' });
    const shown = await runCli(['policy', 'show'], { ARKVORY_DATABASE_URL: db.url });
    expect(JSON.parse(shown.stdout)).toEqual({ policy: null, leases: [] });
    const refused = await runCli(['policy', 'reset'], { ARKVORY_DATABASE_URL: db.url });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('refused');
  });
});

describe('leased download shares across a slot takeover (real PostgreSQL)', () => {
  /** A gateway that takes `slot` on its own connection and asks for one share at most, then dies. */
  async function deadOwner(db: TestDatabase, slot: number, reservationMs: number, weightSum?: number): Promise<void> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const owner = randomUUID();
      const { rows } = await client.query<{ g: string }>(
        `SELECT arkvory_lease_acquire($1, $2, 'reader', NULL, $3)::text AS g`,
        [slot, owner, reservationMs],
      );
      if (weightSum !== undefined)
        await client.query('SELECT arkvory_lease_share($1, $2, $3, $4, $5, 0)', [
          slot,
          owner,
          rows[0]!.g,
          reservationMs,
          weightSum,
        ]);
    } finally {
      await client.end();
    }
  }

  it('a reader dying between its acquire and its first share request leaves every share ≥ 0 and fences no one', async () => {
    const db = await freshDb();
    const rate = 3_000_000;
    const shared = { slots: 3, downloadBytesPerSec: rate, downloadBytesPerSecPerPrincipal: 0 };
    await db.pool.query(
      'INSERT INTO arkvory_download_policy (slots, download_bytes_per_second, download_bytes_per_second_per_principal) VALUES ($1, $2, 0)',
      [shared.slots, rate],
    );
    // A, alone on slot 1 at the heaviest weight, holds almost the whole rate (floor(3e6 × 1000 / 1002)), then dies.
    await deadOwner(db, 1, 1500, 1000);
    const heldByA = await db.pool.query('SELECT held_bytes_per_second::text AS held FROM arkvory_gateway_leases');
    expect(heldByA.rows).toEqual([{ held: '2994011' }]);
    await sleep(1700);

    const shares: Array<{ slot: number; share: number }> = [];
    const outcomes: Array<{ slot: number; outcome: RenewalOutcome }> = [];
    const fenced: string[] = [];
    const gateway = async (slot: number, role: 'api' | 'reader') => {
      const c = await coordinator(db, { role, shared: { slot, policy: shared } });
      shares.push({ slot, share: c.shareBytesPerSec });
      c.onShare((share) => shares.push({ slot, share }));
      c.onRenewal((outcome) => outcomes.push({ slot, outcome }));
      c.onFenced((reason) => fenced.push(`slot ${slot}: ${reason}`));
      c.reportWeightSum(() => 1000);
      return c;
    };
    const writer = await gateway(0, 'api');
    const reader = await gateway(2, 'reader');
    // Two heavy gateways and a free slot: floor(3e6 × 1000 / 2001) each, once the writer releases.
    const even = Math.floor((rate * 1000) / 2001);
    await until(() => writer.shareBytesPerSec === even && reader.shareBytesPerSec === even, 20_000);

    // B takes the expired slot 1 and dies before it asks for a share.
    await deadOwner(db, 1, 10_000);
    // Two renewals of each gateway after the takeover (each 2 s after the previous one).
    const after = outcomes.length;
    const renewalsSince = (slot: number) => outcomes.slice(after).filter((o) => o.slot === slot).length;
    await until(() => renewalsSince(0) >= 2 && renewalsSince(2) >= 2, 15_000);

    expect(shares.filter((s) => s.share < 0)).toEqual([]);
    expect(outcomes.filter((o) => o.outcome !== 'confirmed')).toEqual([]);
    expect(fenced).toEqual([]);
    expect(writer.isPermitted()).toBe(true);
    expect(reader.isPermitted()).toBe(true);
    expect([writer.shareBytesPerSec, reader.shareBytesPerSec]).toEqual([even, even]);
    const { rows } = await db.pool.query<{ held: string }>(
      'SELECT coalesce(sum(held_bytes_per_second), 0)::text AS held FROM arkvory_gateway_leases WHERE expires_at > clock_timestamp()',
    );
    expect(Number(rows[0]!.held)).toBeLessThanOrEqual(rate);
    // B's row (unexpired, never renewed) holds nothing of A's: the neutral weight sum and no share.
    const taken = await db.pool.query(
      'SELECT weight_sum, held_bytes_per_second::text AS held FROM arkvory_gateway_leases WHERE slot = 1',
    );
    expect(taken.rows).toEqual([{ weight_sum: 1, held: '0' }]);
  }, 60_000);

  it('shares follow weight sums past 1000: a gateway serving 2000 beside one serving 1000 gets two thirds', async () => {
    // Up to 1000 principals at weights up to 1000 share one gateway's governor (bandwidth-governor.ts):
    // a sum cut at 1000 gave 2 principals of weight 1000 on one gateway half of the rate between
    // them, and the one principal of weight 1000 on the other gateway the other half alone.
    const db = await freshDb();
    const rate = 3_000_000;
    await db.pool.query(
      'INSERT INTO arkvory_download_policy (slots, download_bytes_per_second, download_bytes_per_second_per_principal) VALUES (3, $1, 0)',
      [rate],
    );
    const gateways = await Promise.all(
      [1, 2].map(async (slot) => {
        const client = new pg.Client({ connectionString: db.url });
        await client.connect();
        const owner = randomUUID();
        const { rows } = await client.query<{ g: string }>(
          `SELECT arkvory_lease_acquire($1, $2, 'reader', NULL, 10000)::text AS g`,
          [slot, owner],
        );
        return { client, slot, owner, generation: rows[0]!.g, share: 0 };
      }),
    );
    const weightSums = [2000, 1000];
    try {
      // Each renewal asks with the share in use (the last answer); a lowered share is held until then.
      for (let round = 0; round < 4; round++)
        for (const [i, g] of gateways.entries()) {
          const { rows } = await g.client.query<{ share: string }>(
            'SELECT arkvory_lease_share($1, $2, $3, 10000, $4, $5)::text AS share',
            [g.slot, g.owner, g.generation, weightSums[i], g.share],
          );
          g.share = Number(rows[0]!.share);
        }
      // W = 2000 + 1000 + 1 (the free slot 0).
      expect(gateways.map((g) => g.share)).toEqual([
        Math.floor((rate * 2000) / 3001),
        Math.floor((rate * 1000) / 3001),
      ]);
      const { rows } = await db.pool.query('SELECT slot, weight_sum FROM arkvory_gateway_leases ORDER BY slot');
      expect(rows).toEqual([
        { slot: 1, weight_sum: 2000 },
        { slot: 2, weight_sum: 1000 },
      ]);
    } finally {
      await Promise.all(gateways.map((g) => g.client.end()));
    }
  });

  it('a gateway reports its weight sum past 1000 as it is (injected clock)', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const reader = await coordinator(db, { role: 'reader', shared: { slot: 1, policy }, clock, timers });
    reader.reportWeightSum(() => 2500);
    const renewals: RenewalOutcome[] = [];
    reader.onRenewal((outcome) => renewals.push(outcome));
    await timers.advance(RENEW_AFTER_MS);
    await until(() => renewals.length > 0);
    expect(renewals).toEqual(['confirmed']);
    const { rows } = await db.pool.query('SELECT weight_sum FROM arkvory_gateway_leases WHERE slot = 1');
    expect(rows).toEqual([{ weight_sum: 2500 }]);
  });

  it('a share request that waited while its slot was taken over answers NULL and leaves the new owner’s row alone', async () => {
    const db = await freshDb();
    await db.pool.query(
      'INSERT INTO arkvory_download_policy (slots, download_bytes_per_second, download_bytes_per_second_per_principal) VALUES (3, 3000000, 0)',
    );
    const old = new pg.Client({ connectionString: db.url });
    const next = new pg.Client({ connectionString: db.url });
    await old.connect();
    await next.connect();
    try {
      const oldOwner = randomUUID();
      const { rows } = await old.query<{ g: string; pid: number }>(
        `SELECT arkvory_lease_acquire(1, $1, 'reader', NULL, 1500)::text AS g, pg_backend_pid() AS pid`,
        [oldOwner],
      );
      const { g: generation, pid } = rows[0]!;
      // The next owner's session locks the row first; the old owner's share request then waits on it.
      await next.query('BEGIN');
      await next.query('SELECT 1 FROM arkvory_gateway_leases WHERE slot = 1 FOR UPDATE');
      const answer = old.query<{ share: string | null }>(
        'SELECT arkvory_lease_share(1, $1, $2, 10000, 1000, 0)::text AS share',
        [oldOwner, generation],
      );
      const waiting = async () =>
        (await db.pool.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [pid]))
          .rowCount === 1;
      const deadline = Date.now() + 5000;
      while (!(await waiting())) {
        if (Date.now() > deadline) throw new Error('the share request never waited on the lease row');
        await sleep(10);
      }
      // The old reservation expires while the request waits; the next owner takes the slot over.
      await sleep(1700);
      const taken = await next.query<{ g: string }>(
        `SELECT arkvory_lease_acquire(1, $1, 'reader', NULL, 10000)::text AS g`,
        [randomUUID()],
      );
      expect(taken.rows[0]!.g).toBe(String(Number(generation) + 1));
      const before = await next.query('SELECT * FROM arkvory_gateway_leases WHERE slot = 1');
      await next.query('COMMIT');
      expect((await answer).rows).toEqual([{ share: null }]);
      const after = await db.pool.query('SELECT * FROM arkvory_gateway_leases WHERE slot = 1');
      expect(after.rows).toEqual(before.rows);
    } finally {
      await old.end();
      await next.end();
    }
  }, 30_000);
});
