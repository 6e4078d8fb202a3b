/**
 * Every role as its own database login (made by `arkvory db roles` and the test's CREATE ROLE … IN
 * ROLE …), as real processes: the writer uploads and administers, a separate worker completes a
 * multipart upload, a reader serves the full read path and renews its lease, maintenance runs
 * scrub, gc and backup; a login without a needed grant is refused at start naming it; a superuser
 * starts with a warning and the metric, and not at all under the strict variable.
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmod, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import type { DatabaseRole } from '../../migrations/grants.ts';
import { bearer } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { installRoleLogins, poolFor, urlAs } from '../../test/support/database-roles.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
let db: TestDatabase & { drop(): Promise<void> };
let urls: Record<DatabaseRole, string>;
let key: string;
let keyId: string;

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  urls = await installRoleLogins(db.url);
  const writerPool = poolFor(urls.writer);
  try {
    const admin = new AdminStore(writerPool);
    await admin.createRepository('lp');
    const principal = await admin.createPrincipal('lp-user');
    const created = await admin.createKey(principal.id, { scopes: ['read', 'write'] });
    ({ key, keyId } = created);
    await admin.addGrant(principal.id, 'lp', 'write');
  } finally {
    await writerPool.end();
  }
}, 60_000);

afterAll(async () => {
  await db?.drop();
});

const json = (r: { body: Buffer }) => JSON.parse(r.body.toString()) as Record<string, unknown>;
const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function sharedEnv(role: DatabaseRole): Record<string, string> {
  return {
    ARKVORY_DATABASE_URL: urls[role],
    ARKVORY_REDIS_URL: inject('redisUrl'),
    ARKVORY_GATEWAY_SLOTS: '2',
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(1024 * MiB),
    ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE: '1',
  };
}

async function metricsText(gw: GatewayProcess): Promise<string> {
  return (await request(`${gw.url}/metrics`)).body.toString();
}

/** A secret file readable by this user only (what systemd's LoadCredential= and a 0400 Secret volume give). */
async function secretFile(content: string, mode = 0o400): Promise<string> {
  const dir = await makeTempDir('arkvory-secret-');
  const file = path.join(dir, 'secret');
  await writeFile(file, `${content}\n`, { mode: 0o600 });
  await chmod(file, mode);
  return file;
}

/** A Redis ACL user with its own password (the `default` user stays as the harness made it). */
async function redisAclUser(): Promise<{ url: string; password: string }> {
  const user = `arkvory_t_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  const redis = new Redis(inject('redisUrl'), { lazyConnect: true });
  await redis.connect();
  try {
    await redis.call('ACL', 'SETUSER', user, 'on', `>${password}`, '~*', '&*', '+@all');
  } finally {
    redis.disconnect();
  }
  const u = new URL(inject('redisUrl'));
  u.username = user;
  return { url: u.toString(), password };
}

describe('each gateway role as its own login', () => {
  it('writer, worker and reader do all their work; maintenance runs scrub, gc and backup', async () => {
    // The writer takes its PostgreSQL and Redis passwords from files; the URLs carry none.
    const pgUrl = new URL(urls.writer);
    const pgPassword = decodeURIComponent(pgUrl.password);
    pgUrl.password = '';
    const redisUser = await redisAclUser();
    const writer = await startGateway({
      env: {
        ...sharedEnv('writer'),
        ARKVORY_DATABASE_URL: pgUrl.toString(),
        ARKVORY_DATABASE_PASSWORD_FILE: await secretFile(pgPassword),
        ARKVORY_REDIS_URL: redisUser.url,
        ARKVORY_REDIS_PASSWORD_FILE: await secretFile(redisUser.password),
        ARKVORY_GATEWAY_SLOT: '0',
        ARKVORY_EMBEDDED_WORKER: '0',
      },
    });
    expect(writer.logs()).not.toContain(pgPassword);
    expect(writer.logs()).not.toContain(redisUser.password);
    const worker = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: urls.worker,
        ARKVORY_ROLE: 'worker',
        ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE: '1',
      },
      dataDir: writer.dataDir,
    });
    const reader = await startGateway({
      env: { ...sharedEnv('reader'), ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1' },
      dataDir: writer.dataDir,
    });
    for (const gw of [writer, reader]) {
      expect(await metricsText(gw)).toMatch(/arkvory_database_login_privileged\{reason="superuser"\} 0/);
      // `db roles` gives each role its grants and nothing beyond them.
      expect(await metricsText(gw)).toMatch(/arkvory_database_login_privileged\{reason="excess_grants"\} 0/);
    }

    // A storage quota on the repository: the writer's reservations and the worker's check of a
    // multipart completion run under their own logins too.
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', 'lp', $1)`,
      [1024 * MiB],
    );

    // Writer: a whole upload, a delete, a pre-signed link.
    const body = randomContent(300 * 1024);
    const put = await request(`${writer.url}/api/v1/repositories/lp/artifacts/a.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body,
    });
    expect(put.status, put.body.toString()).toBe(201);
    const gone = await request(`${writer.url}/api/v1/repositories/lp/artifacts/gone.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body: randomContent(10),
    });
    expect(gone.status).toBe(201);
    expect(
      (
        await request(`${writer.url}/api/v1/repositories/lp/artifacts/gone.bin`, {
          method: 'DELETE',
          headers: bearer(key),
        })
      ).status,
    ).toBe(204);
    const presign = await request(`${writer.url}/api/v1/repositories/lp/artifacts/a.bin/presign`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ expiresInSeconds: 600 })),
    });
    expect(presign.status, presign.body.toString()).toBe(201);

    // Worker: a multipart upload the separate worker completes.
    const parts = [randomContent(MiB), randomContent(1000)];
    const opened = await request(`${writer.url}/api/v1/repositories/lp/artifacts/mp.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    expect(opened.status, opened.body.toString()).toBe(201);
    const upload = json(opened).upload as string;
    for (const [i, p] of parts.entries())
      expect(
        (
          await request(`${writer.url}/api/v1/repositories/lp/uploads/${upload}/parts/${i + 1}`, {
            method: 'PUT',
            headers: bearer(key),
            body: p,
          })
        ).status,
      ).toBe(200);
    const completed = await request(`${writer.url}/api/v1/repositories/lp/uploads/${upload}/complete`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: digest(p) })) })),
    });
    expect(completed.status, completed.body.toString()).toBe(202);
    let session: Record<string, unknown> = {};
    for (let i = 0; i < 200 && session.state !== 'done' && session.state !== 'failed'; i++) {
      session = json(await request(`${writer.url}/api/v1/repositories/lp/uploads/${upload}`, { headers: bearer(key) }));
      if (session.state !== 'done') await sleep(50);
    }
    expect(session.state, String(session.error)).toBe('done');

    // Reader: the full read path (GET, HEAD, ranges, a pre-signed link), its lease renewed, last_used_at.
    const usedBefore = (
      await db.pool.query<{ t: Date | null }>('SELECT last_used_at AS t FROM arkvory_api_keys WHERE key_id = $1', [
        keyId,
      ])
    ).rows[0]!.t;
    const got = await request(`${reader.url}/api/v1/repositories/lp/artifacts/a.bin/content`, { headers: bearer(key) });
    expect(got.status).toBe(200);
    expect(sha256(got.body)).toBe(sha256(body));
    const ranged = await request(`${reader.url}/api/v1/repositories/lp/artifacts/a.bin/content`, {
      headers: { ...bearer(key), range: 'bytes=10-19' },
    });
    expect(ranged.status).toBe(206);
    expect(ranged.body).toEqual(body.subarray(10, 20));
    const head = await request(`${reader.url}/api/v1/repositories/lp/artifacts/mp.bin/content`, {
      method: 'HEAD',
      headers: bearer(key),
    });
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toBe(String(MiB + 1000));
    const viaLink = await request(`${reader.url}${json(presign).path as string}`);
    expect(viaLink.status, viaLink.body.toString()).toBe(200);
    expect(
      (await request(`${reader.url}/api/v1/repositories/lp/artifacts/gone.bin/content`, { headers: bearer(key) }))
        .status,
    ).toBe(404);
    const usedAfter = async () =>
      (
        await db.pool.query<{ t: Date | null }>('SELECT last_used_at AS t FROM arkvory_api_keys WHERE key_id = $1', [
          keyId,
        ])
      ).rows[0]!.t;
    for (let i = 0; i < 100 && (await usedAfter())?.getTime() === usedBefore?.getTime(); i++) await sleep(50);
    expect((await usedAfter())?.getTime()).not.toBe(usedBefore?.getTime());
    const renewedAt = async () =>
      (await db.pool.query<{ r: Date }>('SELECT renewed_at AS r FROM arkvory_gateway_leases WHERE slot = 1')).rows[0]!
        .r;
    const firstRenewal = await renewedAt();
    await sleep(2500);
    expect((await renewedAt()).getTime()).toBeGreaterThan(firstRenewal.getTime());
    expect((await request(`${reader.url}/health/status`)).status).toBe(200);
    expect(reader.logs()).not.toMatch(/permission denied/);
    expect(writer.logs()).not.toMatch(/permission denied/);
    expect(worker.logs()).not.toMatch(/permission denied/);

    // Maintenance: offline scrub, gc and a backup, as its own login.
    for (const gw of [reader, worker, writer]) await gw.stop('SIGTERM');
    const env = { ARKVORY_DATABASE_URL: urls.maintenance, ARKVORY_DATA_DIR: writer.dataDir };
    const scrub = await runCli(['scrub'], env);
    expect(scrub.code, scrub.stderr).toBe(0);
    const gc = await runCli(['gc'], env);
    expect(gc.code, gc.stderr).toBe(0);
    const destination = await makeTempDir('arkvory-lp-backup-');
    const backup = await runCli(['backup', `${destination}/b`], env);
    expect(backup.code, backup.stderr).toBe(0);
  }, 120_000);

  it('a secret file others can read is refused at start, naming the file and not the secret', async () => {
    const pgUrl = new URL(urls.reader);
    const pgPassword = decodeURIComponent(pgUrl.password);
    pgUrl.password = '';
    const loose = await secretFile(pgPassword, 0o644);
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: pgUrl.toString(), ARKVORY_DATABASE_PASSWORD_FILE: loose },
      waitFor: 'none',
    });
    expect(await gw.exited).toBe(2);
    expect(gw.logs()).toContain(
      `ARKVORY_DATABASE_PASSWORD_FILE: ${loose} is accessible to group or others (mode 0644)`,
    );
    expect(gw.logs()).not.toContain(pgPassword);
  }, 30_000);

  it('doctor reports per role the database role, its standing, missing grants and secret sources, never a value', async () => {
    const pgUrl = new URL(urls.reader);
    const pgPassword = decodeURIComponent(pgUrl.password);
    pgUrl.password = '';
    const env = {
      ARKVORY_ROLE: 'reader',
      ARKVORY_DATABASE_URL: pgUrl.toString(),
      ARKVORY_DATABASE_PASSWORD_FILE: await secretFile(pgPassword),
      ARKVORY_REDIS_URL: inject('redisUrl'),
      ARKVORY_GATEWAY_SLOTS: '2',
      ARKVORY_GATEWAY_SLOT: '1',
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(1024 * MiB),
    };
    const doctor = await runCli(['doctor'], env);
    const lines = doctor.stdout.split('\n');
    const privileges = lines.find((l) => l.includes(' privileges: '));
    expect(privileges).toMatch(
      /^ok {3}privileges: role reader → database role reader, login "arkvory_t_reader_[0-9a-f]+" \(not superuser, not owner\); 0 missing/,
    );
    expect(lines.find((l) => l.includes(' credentials: '))).toBe(
      'ok   credentials: ARKVORY_DATABASE_URL from env, ARKVORY_DATABASE_PASSWORD from file, ARKVORY_REDIS_URL from env',
    );
    expect(doctor.stdout + doctor.stderr).not.toContain(pgPassword);
    // A login without the reader's grants: FAIL naming them.
    const asWorker = await runCli(['doctor'], {
      ...env,
      ARKVORY_DATABASE_URL: urls.worker,
      ARKVORY_DATABASE_PASSWORD_FILE: undefined,
    });
    expect(asWorker.stdout).toMatch(/FAIL privileges: .*GRANT SELECT ON TABLE arkvory_api_keys TO arkvory_reader/);
  }, 60_000);

  it('a login missing a grant its role needs is refused at start, naming the grant', async () => {
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const login = `arkvory_t_bare_${Date.now()}`;
    try {
      // A reader login that can read keys but not record last_used_at.
      await admin.query(`CREATE ROLE ${login} LOGIN PASSWORD 'bare' IN ROLE arkvory_reader`);
      await admin.query(`CREATE ROLE ${login}_w LOGIN PASSWORD 'bare'`);
      const bare = await startGateway({
        env: {
          ...sharedEnv('reader'),
          ARKVORY_DATABASE_URL: urlAs(db.url, `${login}_w`, 'bare'),
          ARKVORY_ROLE: 'reader',
          ARKVORY_GATEWAY_SLOT: '1',
        },
        waitFor: 'none',
      });
      expect(await bare.exited).toBe(1);
      expect(bare.logs()).toContain(`database login "${login}_w" lacks`);
      expect(bare.logs()).toContain('GRANT UPDATE (last_used_at) ON TABLE arkvory_api_keys TO arkvory_reader');
      expect(bare.logs()).not.toContain('bare@');
    } finally {
      await admin.query(`DROP ROLE IF EXISTS ${login}`);
      await admin.query(`DROP ROLE IF EXISTS ${login}_w`);
      await admin.end();
    }
  }, 60_000);

  it('a login holding more than its role needs (a reader login also in arkvory_maintenance) is refused under the strict variable, naming the excess', async () => {
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const login = `arkvory_t_wide_${randomBytes(4).toString('hex')}`;
    try {
      // Every grant the reader needs is there, so only a check of what lies beyond them tells this
      // login (DELETE on every table, keys and grants included) from the reader's own.
      await admin.query(`CREATE ROLE ${login} LOGIN PASSWORD 'wide' IN ROLE arkvory_reader, arkvory_maintenance`);
      const strict = await startGateway({
        env: {
          ...sharedEnv('reader'),
          ARKVORY_DATABASE_URL: urlAs(db.url, login, 'wide'),
          ARKVORY_ROLE: 'reader',
          ARKVORY_GATEWAY_SLOT: '1',
        },
        waitFor: 'none',
      });
      // A start the check lets through logs its finding and serves; one it refuses exits.
      await waitUntil(
        () => !strict.isRunning() || strict.logLines().some((l) => String(l.code ?? '').startsWith('database_login')),
        { what: 'the privilege check', timeoutMs: 30_000 },
      );
      expect(strict.logs()).not.toContain("holds the reader role's grants and no more");
      expect(await strict.exited).toBe(1);
      expect(strict.logs()).toMatch(
        /holds \d+ privilege\(s\) beyond the reader role's: .*INSERT ON TABLE arkvory_api_keys/,
      );
      expect(strict.logs()).toContain('refused because ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE is set');
      expect(strict.logs()).not.toContain('wide@');
    } finally {
      await admin.query(`DROP ROLE IF EXISTS ${login}`);
      await admin.end();
    }
  }, 60_000);

  it('under the strict variable, a database URL rotated to a superuser login is refused, the old login kept', async () => {
    const plain = await createTestDatabase();
    onTestFinished(() => plain.drop());
    const roleUrls = await installRoleLogins(plain.url);
    const urlFile = await secretFile(roleUrls.writer, 0o600);
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL_FILE: urlFile, ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE: '1' },
    });
    // What the start refuses, a rotation must refuse too: else one SIGHUP gets round the check.
    await writeFile(urlFile, `${plain.url}\n`);
    gw.signal('SIGHUP');
    const outcome = () => gw.logLines().find((l) => /ARKVORY_DATABASE_URL (not )?rotated/.test(String(l.msg)));
    await waitUntil(() => outcome() !== undefined, { what: 'the rotation', timeoutMs: 20_000, process: gw });
    expect(String(outcome()!.msg)).toMatch(
      /ARKVORY_DATABASE_URL not rotated.*is a superuser.*refused because ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE is set/,
    );
    const login = new URL(roleUrls.writer).username;
    const users = await plain.pool.query<{ u: string }>(
      `SELECT DISTINCT usename AS u FROM pg_stat_activity WHERE application_name = 'arkvory-api' AND datname = current_database()`,
    );
    expect(users.rows.map((r) => r.u)).toEqual([login]);
    expect(gw.logs()).not.toContain(new URL(plain.url).password || 'no password in the URL');
    await gw.stop('SIGTERM');
  }, 60_000);

  it('a superuser login starts with a warning and the metric, and is refused under the strict variable', async () => {
    const plain = await createTestDatabase();
    onTestFinished(() => plain.drop());
    const strict = await startGateway({
      env: { ARKVORY_DATABASE_URL: plain.url, ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE: '1' },
      waitFor: 'none',
    });
    expect(await strict.exited).toBe(1);
    expect(strict.logs()).toMatch(/is a superuser.*refused because ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE is set/);

    const lax = await startGateway({ env: { ARKVORY_DATABASE_URL: plain.url } });
    const warning = lax.logLines().find((l) => String(l.msg).includes('is a superuser'));
    expect(warning?.level).toBe('warn');
    expect(await metricsText(lax)).toMatch(/arkvory_database_login_privileged\{reason="superuser"\} 1/);
    await lax.stop('SIGTERM');
  }, 60_000);
});
