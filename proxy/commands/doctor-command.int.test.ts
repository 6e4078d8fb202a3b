/**
 * `arkvory doctor` as a real process: each failure class gets its own FAIL line (variables,
 * database, migrations, storage, Redis, policy, slot), a sound configuration passes, and nothing
 * is written to the database.
 */
import { randomUUID } from 'node:crypto';
import { rename, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli, startGateway } from '../../test/support/gateway.ts';
import { CHECKS } from './doctor-command.ts';
import { freeLoopbackPort, startRedisServer } from '../../test/harness/index.ts';

type Db = TestDatabase & { drop(): Promise<void> };
let migrated: Db;
let empty: Db;

function lines(stdout: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of stdout.trim().split('\n')) {
    const m = /^(ok|FAIL|skip) +([a-z]+): /.exec(line);
    expect(m, line).not.toBeNull();
    out.set(m![2]!, m![1]!);
  }
  expect([...out.keys()]).toEqual([...CHECKS]);
  return out;
}

/**
 * `arkvory doctor` under `env`, run again (at most `tries` times) until its output matches `wanted`:
 * the last run. The gateway of the store-state test probes every 200 ms within 180 ms; on a loaded
 * machine one probe's read may wait past that for a thread of libuv's pool, and the store then shows
 * degraded, with that timeout as its last error, until 400 ms after it. The doctor prints what the
 * gateway reports at that moment.
 */
async function doctorUntil(env: Record<string, string>, wanted: RegExp, tries = 20) {
  let r = await runCli(['doctor'], env);
  for (let i = 1; i < tries && !wanted.test(r.stdout); i++) {
    await sleep(250);
    r = await runCli(['doctor'], env);
  }
  return r;
}

const sharedReader = (db: Db, dataDir: string, redisUrl: string) => ({
  ARKVORY_ROLE: 'reader',
  ARKVORY_DATABASE_URL: db.url,
  ARKVORY_REDIS_URL: redisUrl,
  ARKVORY_DATA_DIR: dataDir,
  ARKVORY_GATEWAY_SLOTS: '2',
  ARKVORY_GATEWAY_SLOT: '1',
  ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: '1048576',
});

beforeAll(async () => {
  [migrated, empty] = await Promise.all([createTestDatabase(), createTestDatabase({ migrated: false })]);
});

afterAll(async () => {
  await Promise.all([migrated?.drop(), empty?.drop()]);
});

describe('arkvory doctor', () => {
  it('a sound writer configuration passes every check and writes nothing', async () => {
    const dataDir = await makeTempDir();
    const r = await runCli(['doctor'], {
      ARKVORY_DATABASE_URL: migrated.url,
      ARKVORY_REDIS_URL: inject('redisUrl'),
      ARKVORY_DATA_DIR: dataDir,
    });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const result = lines(r.stdout);
    expect(result.get('database')).toBe('ok');
    expect(result.get('migrations')).toBe('ok');
    expect(result.get('storage')).toBe('ok');
    expect(result.get('redis')).toBe('ok');
    expect(result.get('policy')).toBe('ok');
    expect(result.get('slot')).toBe('skip');
    expect(r.stdout).toMatch(/^ok {3}database: PostgreSQL \d+(\.\d+)*\S* reachable/m);
    expect((await migrated.pool.query('SELECT count(*)::int AS n FROM arkvory_storage')).rows[0].n).toBe(0);
  });

  it('on the embedded default: skip while no gateway runs it, then every database check against the one `npm start` runs', async () => {
    const dataDir = await makeTempDir();
    const before = await runCli(['doctor'], { ARKVORY_DATA_DIR: dataDir });
    expect(before.code).toBe(0);
    expect(lines(before.stdout).get('database')).toBe('skip');
    expect(before.stdout).toContain('no gateway is running the embedded PostgreSQL');
    const gw = await startGateway({ dataDir });
    const r = await runCli(['doctor'], { ARKVORY_DATA_DIR: dataDir });
    expect(r.code, r.stdout).toBe(0);
    expect(Object.fromEntries(lines(r.stdout))).toEqual({
      variables: 'ok',
      database: 'ok',
      migrations: 'ok',
      storage: 'ok',
      redis: 'skip',
      policy: 'ok',
      slot: 'skip',
      proxies: 'ok',
      privileges: 'ok',
      credentials: 'ok',
      gateways: 'skip',
    });
    expect(r.stdout).toMatch(/^ok {3}database: PostgreSQL \d+(\.\d+)*\S* reachable \(the embedded one/m);
    expect(r.stdout).toContain(`the embedded one of the running gateway under ${dataDir}/.pg`);
    expect(r.stdout).toMatch(/ok {3}storage: .* and the database are both storage [0-9a-f-]{36}/);
    await gw.stop('SIGTERM');
  }, 90_000);

  it('invalid variables: one FAIL line naming them, exit 2, the rest skipped', async () => {
    const r = await runCli(['doctor'], { ARKVORY_PORT: 'eighty', ARKVORY_TYPO: '1' });
    expect(r.code).toBe(2);
    const first = r.stdout.split('\n')[0]!;
    expect(first).toMatch(/^FAIL variables: /);
    expect(first).toContain('ARKVORY_PORT: expected an integer');
    expect(first).toContain('ARKVORY_TYPO: unknown variable');
    expect([...lines(r.stdout).values()].slice(1).every((s) => s === 'skip')).toBe(true);
  });

  it('an unreachable database: FAIL database', async () => {
    const port = await freeLoopbackPort();
    const r = await runCli(['doctor'], {
      ARKVORY_DATABASE_URL: `postgres://postgres:secret@127.0.0.1:${port}/x`,
      ARKVORY_DATA_DIR: await makeTempDir(),
    });
    expect(r.code).toBe(1);
    expect(lines(r.stdout).get('database')).toBe('FAIL');
    expect(r.stdout).not.toContain('secret');
  });

  it('an unreachable database and Redis with passwords in their query strings: neither password printed', async () => {
    const [pgPort, redisPort] = [await freeLoopbackPort(), await freeLoopbackPort()];
    const r = await runCli(['doctor'], {
      ARKVORY_DATABASE_URL: `postgres://arkvory@127.0.0.1:${pgPort}/arkvory?password=PgQueryS3cret`,
      ARKVORY_REDIS_URL: `redis://127.0.0.1:${redisPort}/0?password=RedisQueryS3cret`,
      ARKVORY_DATA_DIR: await makeTempDir(),
    });
    expect(r.code).toBe(1);
    expect(Object.fromEntries(lines(r.stdout))).toMatchObject({ database: 'FAIL', redis: 'FAIL' });
    expect(r.stdout).toContain(`cannot reach postgres://<redacted>@127.0.0.1:${pgPort}/arkvory?<redacted>`);
    expect(r.stdout).toContain(`cannot reach redis://127.0.0.1:${redisPort}/0?<redacted>`);
    expect(r.stdout + r.stderr).not.toMatch(/S3cret/);
  });

  it('a Redis that takes the connection and never answers: FAIL redis within its bound, not a hang', async () => {
    // A stopped redis-server: the kernel still completes the connection, nothing answers on it.
    const redis = await startRedisServer();
    process.kill(redis.child.pid!, 'SIGSTOP');
    try {
      const { port } = redis;
      const r = await runCli(['doctor'], {
        ARKVORY_DATABASE_URL: migrated.url,
        ARKVORY_REDIS_URL: `redis://127.0.0.1:${port}`,
        ARKVORY_DATA_DIR: await makeTempDir(),
      });
      expect(r.code, r.stderr).toBe(1);
      expect(lines(r.stdout).get('redis')).toBe('FAIL');
      expect(r.stdout).toContain(`FAIL redis: cannot reach redis://127.0.0.1:${port}: `);
    } finally {
      process.kill(redis.child.pid!, 'SIGCONT');
      await redis.stop('SIGKILL');
    }
  }, 120_000);

  it('a database without the migrations: FAIL migrations', async () => {
    const r = await runCli(['doctor'], { ARKVORY_DATABASE_URL: empty.url, ARKVORY_DATA_DIR: await makeTempDir() });
    expect(r.code).toBe(1);
    const result = lines(r.stdout);
    expect(result.get('database')).toBe('ok');
    expect(result.get('migrations')).toBe('FAIL');
    expect(r.stdout).toMatch(/FAIL migrations: \d+ pending .*arkvory migrate/);
  });

  it('a root marked by a restore that did not finish: FAIL storage, naming it', async () => {
    const db = await createTestDatabase();
    try {
      const dataDir = await makeTempDir();
      await writeFile(path.join(dataDir, 'storage-id'), `restoring ${randomUUID()}\n`);
      for (const env of [{ ARKVORY_DATABASE_URL: db.url }, {}]) {
        const r = await runCli(['doctor'], { ...env, ARKVORY_DATA_DIR: dataDir });
        expect(r.code).toBe(1);
        expect(lines(r.stdout).get('storage')).toBe('FAIL');
        expect(r.stdout).toMatch(/FAIL storage: .*storage-id marks a restore that did not finish/);
      }
    } finally {
      await db.drop();
    }
  });

  it('a reader with a foreign storage root, a dead Redis, a different stored policy and a busy slot: four FAIL lines', async () => {
    const dataDir = await makeTempDir();
    await writeFile(path.join(dataDir, 'storage-id'), `${randomUUID()}\n`);
    await migrated.pool.query('INSERT INTO arkvory_storage (id) VALUES ($1)', [randomUUID()]);
    await migrated.pool.query(
      'INSERT INTO arkvory_download_policy (slots, download_bytes_per_second, download_bytes_per_second_per_principal) VALUES (2, 2097152, 0)',
    );
    await migrated.pool.query(
      `INSERT INTO arkvory_gateway_leases (slot, owner, generation, role, acquired_at, renewed_at, expires_at)
       VALUES (1, $1, 1, 'reader', clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '60 seconds')`,
      [randomUUID()],
    );
    const deadRedis = `redis://127.0.0.1:${await freeLoopbackPort()}`;
    const r = await runCli(['doctor'], sharedReader(migrated, dataDir, deadRedis));
    expect(r.code).toBe(1);
    const result = lines(r.stdout);
    expect(Object.fromEntries(result)).toEqual({
      variables: 'ok',
      database: 'ok',
      migrations: 'ok',
      storage: 'FAIL',
      redis: 'FAIL',
      policy: 'FAIL',
      slot: 'FAIL',
      proxies: 'ok',
      privileges: 'ok',
      credentials: 'ok',
      gateways: 'skip',
    });
    expect(r.stdout).toMatch(/FAIL storage: .*different installations/);
    expect(r.stdout).toMatch(/FAIL policy: the stored policy \(SLOTS=2, SHARED_DOWNLOAD_BYTES_PER_SECOND=2097152/);
    expect(r.stdout).toMatch(/FAIL slot: slot 1 is held by a reader/);
    // The same reader against the matching policy and a free slot passes those two checks.
    await migrated.pool.query('DELETE FROM arkvory_gateway_leases');
    const fixed = await runCli(['doctor'], {
      ...sharedReader(migrated, dataDir, inject('redisUrl')),
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: '2097152',
    });
    expect(Object.fromEntries(lines(fixed.stdout))).toMatchObject({
      redis: 'ok',
      policy: 'ok',
      slot: 'ok',
      storage: 'FAIL',
    });
  });

  it("shows the store state of every gateway it can see, and fails while one's store is unreachable", async () => {
    const dataDir = await makeTempDir();
    const gw = await startGateway({ dataDir, env: { ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS: '200' } });
    // A router's configuration sees the gateways it lists.
    const routerEnv = { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: gw.url };
    const r = await doctorUntil(routerEnv, / store ok$/m);
    expect(lines(r.stdout).get('gateways'), r.stdout).toBe('ok');
    expect(r.stdout).toContain(`ok   gateways: ${gw.url} serving, workers 1/1 serving, store ok`);
    const id = path.join(dataDir, 'storage-id');
    await rename(id, `${id}.away`);
    for (let i = 0; i < 100; i++) {
      const status = (await (await fetch(`${gw.url}/health/status`)).json()) as { store: { state: string } };
      if (status.store.state === 'unreachable') break;
      await sleep(50);
    }
    const down = await doctorUntil(routerEnv, /store unreachable \(last error storage_mismatch /);
    expect(down.code).toBe(1);
    expect(down.stdout).toMatch(
      new RegExp(
        `^FAIL gateways: ${gw.url} serving, workers 1/1 serving, store unreachable \\(last error storage_mismatch at \\d{4}-`,
        'm',
      ),
    );
    await rename(`${id}.away`, id);
    await gw.stop('SIGTERM');
  }, 60_000);
});
