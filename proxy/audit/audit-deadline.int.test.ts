/**
 * An audited action whose row PostgreSQL does not take in time, through a real gateway and a real
 * PostgreSQL: the audit table is locked by this test (the insert waits, as on a database that takes
 * the statement and never answers). The action's answer ends all the same after AUDIT_TIMEOUT_MS,
 * with its whole entry in one `error` line; the insert, abandoned before its COMMIT, never lands
 * once the lock goes; the next action is recorded as usual. An insert PostgreSQL refuses is logged
 * the same way. Either is counted in arkvory_audit_entries_not_recorded_total by its reason.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import { AUDIT_TIMEOUT_MS } from './request-audit.ts';

const db = useTestDatabase();
let gw: GatewayProcess;
let admin: { key: string };

beforeAll(async () => {
  admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
}, 60_000);
afterAll(async () => {
  await gw?.stop('SIGTERM');
});

const createRepository = (name: string) =>
  fetch(`${gw.url}/api/v1/admin/repositories`, {
    method: 'POST',
    headers: { ...bearer(admin.key), 'content-type': 'application/json' },
    body: JSON.stringify({ name }),
  });
/** arkvory_audit_entries_not_recorded_total by reason, as the writer's /metrics says it. */
const notRecorded = async () => {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const count = (reason: string) =>
    Number(
      new RegExp(`^arkvory_audit_entries_not_recorded_total\\{reason="${reason}"\\} (\\d+)$`, 'm').exec(text)?.[1],
    );
  return { failed: count('failed'), timeout: count('timeout') };
};
const auditRows = async (name: string) =>
  Number(
    (await db.pool.query(`SELECT count(*) AS n FROM arkvory_audit_events WHERE details::text LIKE $1`, [`%${name}%`]))
      .rows[0].n,
  );

describe('an audit row the database does not take in time', () => {
  it(`ends the answer after ${AUDIT_TIMEOUT_MS} ms with the entry logged, and never lands later`, async () => {
    const lock = await db.pool.connect();
    let answer: Response | undefined;
    try {
      await lock.query('BEGIN');
      await lock.query('LOCK TABLE arkvory_audit_events IN SHARE ROW EXCLUSIVE MODE');
      const pending = createRepository('held-long').then((res) => (answer = res));
      // Answered while the lock is still held: well past the bound, but far short of forever.
      await waitUntil(() => answer !== undefined, { timeoutMs: AUDIT_TIMEOUT_MS + 20_000, what: 'the answer' });
      await pending;
    } finally {
      await lock.query('COMMIT');
      lock.release();
    }
    expect(answer!.status).toBe(201);
    const lines = gw.logLines().filter((l) => l.msg === 'audit entry not recorded');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 'error',
      audit: { action: 'repository.create', details: { repository: 'held-long' } },
    });
    expect(lines[0]!.unconfirmed).toBeUndefined();
    expect(await notRecorded()).toEqual({ failed: 0, timeout: 1 });

    // The abandoned insert's session goes on once the lock is gone and finds its client gone.
    await waitUntil(
      async () =>
        Number(
          (
            await db.pool.query(
              `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND state = 'active' AND query LIKE '%arkvory_audit_events%'`,
            )
          ).rows[0].n,
        ) === 0,
      { timeoutMs: 10_000, what: 'the abandoned insert to end' },
    );
    expect(await auditRows('held-long')).toBe(0);
    // The repository was made; the next action is recorded when its answer ends.
    expect((await createRepository('next-one')).status).toBe(201);
    expect(await auditRows('next-one')).toBe(1);
  }, 60_000);

  it('an insert the database refuses: logged and counted as failed, the action stands', async () => {
    // A check only new rows must pass: this one refuses every repository.create row.
    await db.pool.query(
      `ALTER TABLE arkvory_audit_events ADD CONSTRAINT refuse_test CHECK (action <> 'repository.create') NOT VALID`,
    );
    let answer: Response;
    try {
      answer = await createRepository('refused-row');
    } finally {
      await db.pool.query('ALTER TABLE arkvory_audit_events DROP CONSTRAINT refuse_test');
    }
    expect(answer.status).toBe(201);
    // Its line crosses the gateway's stdout pipe after the answer: waited for, by its repository.
    const line = () =>
      gw
        .logLines()
        .find(
          (l) =>
            l.msg === 'audit entry not recorded' &&
            (l.audit as { details?: { repository?: string } } | undefined)?.details?.repository === 'refused-row',
        );
    await waitUntil(() => line() !== undefined, { timeoutMs: 5_000, what: "the refused row's line" });
    expect(line()).toMatchObject({ level: 'error', audit: { details: { repository: 'refused-row' } } });
    expect(await auditRows('refused-row')).toBe(0);
    expect(await notRecorded()).toEqual({ failed: 1, timeout: 1 });
  });
});
