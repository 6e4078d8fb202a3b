import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../proxy/server/logger.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { runCli } from '../../test/support/gateway.ts';
import { systemClock } from '../clock.ts';
import { Coordinator, type CoordinatorOptions } from './coordinator.ts';
import { resetPolicy } from './download-policy.ts';

const log = createLogger('silent');
const policy = { slots: 3, downloadBytesPerSec: 3 * 1024 * 1024, downloadBytesPerSecPerPrincipal: 0 };
const open: Coordinator[] = [];
const dbs: Array<{ drop(): Promise<void> }> = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
  await Promise.all(dbs.splice(0).map((d) => d.drop()));
});

async function freshDb(): Promise<TestDatabase> {
  const db = await createTestDatabase();
  dbs.push(db);
  return db;
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

  it('gives up waiting for a slot after 15 s (spec: "the wait is limited to 15 seconds") when a reservation outlasts it', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const first = await coordinator(db, { role: 'reader', shared: { slot: 1, policy } });
    await first.close();
    // A stationary reservation longer than any renewal would leave (a stopped owner whose database
    // clock jumped ahead): not renewing, so not "live", but not expiring within the bound either.
    await db.pool.query(
      `UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() + interval '60 seconds' WHERE slot = 1`,
    );
    const started = Date.now();
    await expect(coordinator(db, { role: 'reader', shared: { slot: 1, policy } })).rejects.toThrow(
      /stayed reserved for 15 s/,
    );
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(15_000);
    expect(waited).toBeLessThan(18_000);
  }, 40_000);

  it('fences when a newer generation takes the slot, and never revives', async () => {
    const db = await freshDb();
    await coordinator(db, { role: 'api', shared: { slot: 0, policy } });
    const reader = await coordinator(db, { role: 'reader', shared: { slot: 1, policy } });
    const reasons: string[] = [];
    reader.onFenced((r) => reasons.push(r));
    // Another owner took over (as if our reservation had expired during a partition).
    await db.pool.query('UPDATE arkvory_gateway_leases SET owner = $1, generation = generation + 1 WHERE slot = 1', [
      randomUUID(),
    ]);
    const deadline = Date.now() + 4000;
    while (reader.isPermitted() && Date.now() < deadline) await sleep(50);
    expect(reader.isPermitted()).toBe(false);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatch(/newer generation/);
    // Give it the slot back in the database: it stays fenced.
    await db.pool.query(
      "UPDATE arkvory_gateway_leases SET owner = $1, generation = $2, expires_at = clock_timestamp() + interval '10 s' WHERE slot = 1",
      [reader.owner, 1],
    );
    await sleep(2500);
    expect(reader.isPermitted()).toBe(false);
    expect(reader.snapshot()?.active).toBe(false);
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
