/**
 * The lease functions run as the schema owner (0020), so they check the calling login (0074): the
 * writer's slot (0, role `api`, where routers send writes with clients' credentials) is only for a
 * writer login; every reservation is at most a minute; a gateway holds no more share than it was
 * answered. Logins as `arkvory db roles` and docs/deploy.md make them.
 */
import { randomUUID } from 'node:crypto';
import { copyFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../policy/clock.ts';
import { Coordinator } from '../policy/lease/coordinator.ts';
import { backendsFromLeases } from '../proxy/router/discovery.ts';
import { createLogger } from '../proxy/server/logger.ts';
import { createTestDatabase, type TestDatabase } from '../test/support/database.ts';
import { installRoleLogins } from '../test/support/database-roles.ts';
import { makeTempDir } from '../test/support/gateway.ts';
import type { DatabaseRole } from './grants.ts';
import { listMigrations, migrate } from './runner.ts';

const log = createLogger('silent');
const policy = { slots: 3, downloadBytesPerSec: 3_000_000, downloadBytesPerSecPerPrincipal: 0 };
const A_DECADE_MS = 3.0e11;
let db: TestDatabase & { drop(): Promise<void> };
let urls: Record<DatabaseRole, string>;
const clients: pg.Client[] = [];
const coordinators: Coordinator[] = [];

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  urls = await installRoleLogins(db.url);
}, 60_000);

afterAll(async () => {
  for (const c of coordinators) await c.close();
  for (const c of clients) await c.end();
  await db?.drop();
});

/** A coordinator on `login`'s own database login, advertising http://<login>.example:8080. */
async function openCoordinator(login: 'writer' | 'reader', role: 'api' | 'reader', slot: number): Promise<Coordinator> {
  const coordinator = await Coordinator.open({
    databaseUrl: urls[login],
    role,
    shared: { slot, policy, advertiseUrl: `http://${login}.example:8080` },
    clock: systemClock,
    log,
  });
  coordinators.push(coordinator);
  return coordinator;
}

async function session(role: DatabaseRole): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: urls[role] });
  await client.connect();
  clients.push(client);
  return client;
}

async function refused(client: pg.Client, sql: string, params: unknown[]): Promise<void> {
  const err = await client.query(sql, params).then(
    () => undefined,
    (e: unknown) => e as { code?: string; message: string },
  );
  expect(err, `${sql} ${JSON.stringify(params)} should be refused`).toBeDefined();
  expect(err!.code, err!.message).toBe('42501'); // insufficient_privilege
}

/** Seconds from now until the slot's lease expires, by the database's clock. */
async function remainingSeconds(slot: number): Promise<number> {
  const r = await db.pool.query<{ s: number }>(
    'SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 AS s FROM arkvory_gateway_leases WHERE slot = $1',
    [slot],
  );
  return r.rows[0]!.s;
}

describe('lease slots by login (real PostgreSQL, least-privilege logins)', () => {
  it("a reader login cannot take the writer's slot or role, while slot 0 is free", async () => {
    const reader = await session('reader');
    const acquire = 'SELECT arkvory_lease_acquire($1, $2, $3, $4, $5)::text AS g';
    await refused(reader, acquire, [0, randomUUID(), 'api', 'http://attacker.example:9', A_DECADE_MS]);
    await refused(reader, acquire, [0, randomUUID(), 'reader', 'http://attacker.example:9', 10_000]);
    await refused(reader, acquire, [2, randomUUID(), 'api', 'http://attacker.example:9', 10_000]);
    const live = await db.pool.query('SELECT slot, role, advertise_url FROM arkvory_gateway_leases');
    expect(backendsFromLeases(live.rows).backends).toEqual([]);
  });

  it('the writer and a reader still take their own slots with their own logins', async () => {
    const writer = await openCoordinator('writer', 'api', 0);
    const reader = await openCoordinator('reader', 'reader', 1);
    expect(writer.isPermitted()).toBe(true);
    expect(reader.isPermitted()).toBe(true);
    const live = await db.pool.query('SELECT slot, role, advertise_url FROM arkvory_gateway_leases ORDER BY slot');
    expect(backendsFromLeases(live.rows).backends).toEqual([
      { url: 'http://writer.example:8080', role: 'writer' },
      { url: 'http://reader.example:8080', role: 'reader' },
    ]);
  });

  it('no reservation, taken or renewed, lasts more than a minute', async () => {
    const reader = await session('reader');
    const owner = randomUUID();
    const { rows } = await reader.query<{ g: string }>(
      `SELECT arkvory_lease_acquire(2, $1, 'reader', NULL, $2)::text AS g`,
      [owner, A_DECADE_MS],
    );
    expect(rows[0]!.g).toBe('1');
    expect(await remainingSeconds(2)).toBeLessThanOrEqual(60);
    const renewed = await reader.query<{ ok: boolean }>('SELECT arkvory_lease_renew(2, $1, 1, $2) AS ok', [
      owner,
      A_DECADE_MS,
    ]);
    expect(renewed.rows[0]!.ok).toBe(true);
    expect(await remainingSeconds(2)).toBeLessThanOrEqual(60);
    const share = await reader.query('SELECT arkvory_lease_share(2, $1, 1, $2, 1, 0)', [owner, 'Infinity']);
    expect(share.rows).toHaveLength(1);
    expect(await remainingSeconds(2)).toBeLessThanOrEqual(60);
  });

  it('a reader cannot hold more share than it was answered by reporting it in use', async () => {
    const reader = await session('reader');
    const { owner, generation } = (
      await db.pool.query<{ owner: string; generation: string }>(
        'SELECT owner::text, generation::text FROM arkvory_gateway_leases WHERE slot = 2',
      )
    ).rows[0]!;
    // Slot 2's lease is another session's: take it over once it is free.
    await db.pool.query('UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() WHERE slot = 2');
    const next = randomUUID();
    const g = (
      await reader.query<{ g: string }>(`SELECT arkvory_lease_acquire(2, $1, 'reader', NULL, 10000)::text AS g`, [next])
    ).rows[0]!.g;
    expect(g).toBe(String(Number(generation) + 1));
    expect(owner).not.toBe(next);
    const answer = await reader.query<{ share: string }>(
      'SELECT arkvory_lease_share(2, $1, $2, 10000, 1, $3)::text AS share',
      [next, g, policy.downloadBytesPerSec],
    );
    const held = await db.pool.query<{ held: string }>(
      'SELECT held_bytes_per_second::text AS held FROM arkvory_gateway_leases WHERE slot = 2',
    );
    expect(Number(answer.rows[0]!.share)).toBeLessThan(policy.downloadBytesPerSec);
    expect(held.rows[0]!.held).toBe(answer.rows[0]!.share);
  });

  it("no login takes a slot at or past the stored policy's SLOTS; a row there (taken before 0087) is neither renewed nor shared", async () => {
    // The policy stored by the writer's start above: SLOTS = 3.
    const reader = await session('reader');
    const acquire = `SELECT arkvory_lease_acquire($1, $2, 'reader', 'http://beyond.example:8080', 10000)::text AS g`;
    for (const slot of [3, 15]) await refused(reader, acquire, [slot, randomUUID()]);
    const writer = await session('writer');
    await refused(writer, acquire, [3, randomUUID()]);
    expect((await db.pool.query('SELECT slot FROM arkvory_gateway_leases WHERE slot >= 3')).rows).toEqual([]);
    // A reader's row in slot 3 as an older acquire wrote it for its session: moved there from slot 2.
    await db.pool.query('UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() WHERE slot = 2');
    const owner = randomUUID();
    const g = (await reader.query<{ g: string }>(acquire, [2, owner])).rows[0]!.g;
    await db.pool.query('UPDATE arkvory_gateway_leases SET slot = 3 WHERE slot = 2');
    const renewed = await reader.query<{ ok: boolean }>('SELECT arkvory_lease_renew(3, $1, $2, 10000) AS ok', [
      owner,
      g,
    ]);
    expect(renewed.rows[0]!.ok).toBe(false);
    const share = await reader.query<{ share: string | null }>(
      'SELECT arkvory_lease_share(3, $1, $2, 10000, 1, 0)::text AS share',
      [owner, g],
    );
    expect(share.rows[0]!.share).toBeNull();
    await db.pool.query('DELETE FROM arkvory_gateway_leases WHERE slot = 3');
  });

  it("a reader session holding the writer's slot (taken before 0074) can no longer renew it", async () => {
    const reader = await session('reader');
    // The row as the 0020 acquire wrote it for this session, moved to the writer's slot.
    await db.pool.query('UPDATE arkvory_gateway_leases SET expires_at = clock_timestamp() WHERE slot = 2');
    const owner = randomUUID();
    const g = (
      await reader.query<{ g: string }>(`SELECT arkvory_lease_acquire(2, $1, 'reader', NULL, 10000)::text AS g`, [
        owner,
      ])
    ).rows[0]!.g;
    await db.pool.query('DELETE FROM arkvory_gateway_leases WHERE slot = 0');
    await db.pool.query(`UPDATE arkvory_gateway_leases SET slot = 0, role = 'api' WHERE slot = 2`);
    const renewed = await reader.query<{ ok: boolean }>('SELECT arkvory_lease_renew(0, $1, $2, 10000) AS ok', [
      owner,
      g,
    ]);
    expect(renewed.rows[0]!.ok).toBe(false);
    const share = await reader.query<{ share: string | null }>(
      'SELECT arkvory_lease_share(0, $1, $2, 10000, 1, 0)::text AS share',
      [owner, g],
    );
    expect(share.rows[0]!.share).toBeNull();
  });
});

describe('migrating to 0074 (real PostgreSQL)', () => {
  it('cuts a lease reserved far ahead to a minute from now', async () => {
    const fresh = await createTestDatabase({ migrated: false });
    try {
      const before = await makeTempDir();
      for (const m of await listMigrations())
        if (m.version < 74) await copyFile(m.file, path.join(before, path.basename(m.file)));
      await migrate(fresh.pool, { dir: before });
      await fresh.pool.query(
        `INSERT INTO arkvory_gateway_leases (slot, owner, generation, role, advertise_url, acquired_at, renewed_at, expires_at)
         VALUES (0, $1, 1, 'api', 'http://attacker.example:9', now(), now(), now() + interval '10 years')`,
        [randomUUID()],
      );
      await migrate(fresh.pool);
      const r = await fresh.pool.query<{ s: number }>(
        'SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 AS s FROM arkvory_gateway_leases WHERE slot = 0',
      );
      expect(r.rows[0]!.s).toBeLessThanOrEqual(60);
    } finally {
      await fresh.drop();
    }
  });
});
