/**
 * The rate-limit admin API while the rule store fails: a redis-server this test owns and stops, or
 * (without Redis) the PostgreSQL connection cut under the write. A publish or delete that could not
 * write changed nothing, and says so with 503 `unavailable`; one cut while its COMMIT was under way
 * may have landed, and says so with 503 `rules_outcome_unknown`; neither is an error of the gateway's own.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { startRedisServer, waitUntil, type RedisServer } from '../../test/harness/index.ts';

const db = useTestDatabase();
const servers: RedisServer[] = [];
afterAll(async () => {
  for (const server of servers) await server.stop();
});

/** Publishing one `log` rule named `name` for gateway_request, and deleting it, as an admin. */
function ruleCalls(url: string, key: string, name: string) {
  const rule = { name, action: 'log', characteristics: ['ip'], limit: 1000, period_s: 60 };
  return {
    publish: () =>
      fetch(`${url}/api/v1/admin/rate-limits`, {
        method: 'PUT',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: JSON.stringify({ rate_limits: { gateway_request: [rule] } }),
      }),
    remove: () =>
      fetch(`${url}/api/v1/admin/rate-limits/gateway_request/rules/${name}`, {
        method: 'DELETE',
        headers: bearer(key),
      }),
  };
}

/** A publish and a delete each answer 503 `unavailable`, saying nothing was written. */
async function expectNothingWritten(...calls: Array<() => Promise<Response>>): Promise<void> {
  for (const call of calls) {
    const res = await call();
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ code: 'unavailable', message: expect.stringContaining('nothing') });
  }
}

describe('rate-limit admin API with Redis down (real gateway, real redis-server stopped)', () => {
  it('answers 503 unavailable to a publish and a delete, logs no error, and publishes once Redis is back', async () => {
    const redis = await startRedisServer();
    servers.push(redis);
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_REDIS_URL: redis.url } });
    const { publish, remove } = ruleCalls(gw.url, admin.key, 'store_down_rule');
    expect((await publish()).status).toBe(200);

    await redis.stop();
    await expectNothingWritten(publish, remove);
    // The store's outage is no fault of the gateway's: no error line, no 500.
    expect(gw.logLines().filter((l) => Number(l.level) >= 50)).toEqual([]);

    servers.push(await startRedisServer({ port: redis.port }));
    await waitUntil(async () => (await remove()).status !== 503, {
      what: 'the admin API to reach the restarted Redis',
      timeoutMs: 30_000,
    });
    expect((await publish()).status).toBe(200);
    expect((await remove()).status).toBe(204);
    expect(await gw.stop()).toBe(0);
  });
});

describe('rate-limit admin API with its PostgreSQL rule store failing (real gateway without Redis, real PostgreSQL)', () => {
  /** Makes the backend running the trigger end its own session: the connection is cut there. */
  const cutFunction = `CREATE OR REPLACE FUNCTION arkvory_test_cut_session() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$`;

  it('answers 503 unavailable when the connection is cut before the COMMIT, rules_outcome_unknown when cut during it, and logs no error', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const { publish, remove } = ruleCalls(gw.url, admin.key, 'pg_store_rule');
    expect((await publish()).status).toBe(200);
    await db.pool.query(cutFunction);

    // Cut while a document is written, before the COMMIT: nothing was written.
    await db.pool.query(`CREATE TRIGGER arkvory_test_cut BEFORE INSERT OR UPDATE ON arkvory_rate_limit_rules
      FOR EACH ROW EXECUTE FUNCTION arkvory_test_cut_session()`);
    await expectNothingWritten(publish, remove);
    await db.pool.query('DROP TRIGGER arkvory_test_cut ON arkvory_rate_limit_rules');

    // Cut inside the COMMIT (a deferred trigger runs there): the change may or may not have landed.
    await db.pool.query(`CREATE CONSTRAINT TRIGGER arkvory_test_cut_commit AFTER INSERT OR UPDATE ON arkvory_rate_limit_rules
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION arkvory_test_cut_session()`);
    const unknown = await remove();
    expect(unknown.status).toBe(503);
    expect(await unknown.json()).toMatchObject({ code: 'rules_outcome_unknown' });
    const unknownPublish = await publish();
    expect(unknownPublish.status).toBe(503);
    expect(await unknownPublish.json()).toMatchObject({ code: 'rules_outcome_unknown' });
    await db.pool.query('DROP TRIGGER arkvory_test_cut_commit ON arkvory_rate_limit_rules');
    // A change that may have landed is in the audit trail, saying its outcome is unknown: before,
    // only a confirmed one was, so a change the store did make could leave no row.
    const audited = await db.pool.query(
      `SELECT action, target, details FROM arkvory_audit_events WHERE details->>'outcome' = 'unknown' ORDER BY id`,
    );
    expect(audited.rows).toEqual([
      {
        action: 'rate_limit.unpublish',
        target: { limiter: 'gateway_request', rule: 'pg_store_rule' },
        details: { outcome: 'unknown' },
      },
      {
        action: 'rate_limit.publish',
        target: {},
        details: { outcome: 'unknown', names: { gateway_request: ['pg_store_rule'] } },
      },
    ]);

    // The store's failure is no fault of the gateway's: no error line, no 500.
    expect(gw.logLines().filter((l) => Number(l.level) >= 50)).toEqual([]);
    expect((await remove()).status).toBe(204);
    expect((await publish()).status).toBe(200);
    expect(await gw.stop()).toBe(0);
  });
});
