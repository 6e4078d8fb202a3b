/**
 * Usage statistics over real gateways and a real PostgreSQL: 1,000 downloads across a writer and a
 * reader give exact sums once flushed (downloads, bytes, last downloader, requests per principal and
 * day), readable through the admin API and `arkvory stats`; a gateway killed with SIGKILL loses at
 * most the counts of its last flush interval.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort, waitUntil, type SharedProfile, sharedProfileEnv } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { utcDay } from './usage-tally.ts';

const redis = useTestRedis();
const FLUSH_SECONDS = 2;
let db: TestDatabase & { drop(): Promise<void> };
let admin: { key: string; principalId: string };
let alice: { key: string; principalId: string; name: string };
let bob: { key: string; principalId: string; name: string };
const body = Buffer.alloc(4096, 9);

/** The shared profile's settings, known once the database is made. */
let profile: SharedProfile;
const usageEnv = (role: 'api' | 'reader', slot: number, port: number) => ({
  ...sharedProfileEnv({ ...profile, role, slot, port }),
  ARKVORY_USAGE_STATS_FLUSH_SECONDS: String(FLUSH_SECONDS),
});

beforeAll(async () => {
  db = await createTestDatabase();
  profile = { databaseUrl: db.url, redis, slots: 2, downloadBytesPerSecond: 1024 * 1024 * 1024 };
  await createRepository(db.pool, 'us');
  admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
  alice = await createServiceAccount(db.pool, { grants: { us: 'write' } });
  bob = await createServiceAccount(db.pool, { grants: { us: 'read' } });
}, 60_000);

afterAll(async () => {
  await db?.drop();
});

const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });

/** GETs `url` `n` times with 16 connections; every answer must be 200 with the whole body. */
async function download(url: string, key: string, n: number): Promise<void> {
  let next = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      http
        .get(url, { agent, headers: bearer(key) }, (res) => {
          let size = 0;
          res.on('data', (c: Buffer) => (size += c.length));
          res.on('end', () =>
            res.statusCode === 200 && size === body.length ? resolve() : reject(new Error(`${res.statusCode} ${size}`)),
          );
        })
        .on('error', reject);
    });
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < n) {
        next++;
        await one();
      }
    }),
  );
}

async function artifactRow(name: string) {
  const r = await db.pool.query(
    `SELECT downloads::int, bytes::int, last_downloader::text, last_downloaded_at FROM arkvory_usage_artifacts
      WHERE repository = 'us' AND kind = 'artifact' AND name = $1`,
    [name],
  );
  return r.rows[0] as { downloads: number; bytes: number; last_downloader: string } | undefined;
}

async function publish(gw: GatewayProcess, name: string): Promise<void> {
  const put = await fetch(`${gw.url}/api/v1/repositories/us/artifacts/${name}`, {
    method: 'PUT',
    headers: bearer(alice.key),
    body,
  });
  expect(put.status).toBe(201);
}

describe('across two gateways', () => {
  let writer: GatewayProcess;
  let reader: GatewayProcess;

  it('1,000 downloads give exact counts once flushed, through the API and the CLI', async () => {
    const [writerPort, readerPort] = [await freeLoopbackPort(), await freeLoopbackPort()];
    writer = await startGateway({ env: usageEnv('api', 0, writerPort), timeoutMs: 90_000 });
    reader = await startGateway({ env: usageEnv('reader', 1, readerPort), timeoutMs: 90_000 });
    await publish(writer, 'hot.bin');
    await publish(writer, 'cold.bin');
    const path = '/api/v1/repositories/us/artifacts/hot.bin/content';
    await Promise.all([
      download(`${writer.url}${path}`, alice.key, 600),
      download(`${reader.url}${path}`, bob.key, 399),
    ]);
    // The last one, once every other was counted (a gateway notes a download when it observes the
    // response's end, which may follow the client's last byte): its downloader is the last downloader.
    await waitUntil(async () => (await artifactRow('hot.bin'))?.downloads === 999, {
      what: 'both gateways to flush the first 999',
      timeoutMs: 30_000,
    });
    await download(`${reader.url}${path}`, bob.key, 1);
    await waitUntil(async () => (await artifactRow('hot.bin'))?.downloads === 1000, {
      what: 'both gateways to flush',
      timeoutMs: 30_000,
    });
    expect(await artifactRow('hot.bin')).toMatchObject({
      downloads: 1000,
      bytes: 1000 * body.length,
      last_downloader: bob.principalId,
    });
    expect(await artifactRow('cold.bin')).toBeUndefined();
    const today = utcDay(Date.now());
    const days = await db.pool.query(
      `SELECT principal_id::text, requests::int, bytes_down::bigint, bytes_up::bigint FROM arkvory_usage_principal_days
        WHERE day = $1 AND principal_id = ANY($2::uuid[]) ORDER BY requests`,
      [today, [alice.principalId, bob.principalId]],
    );
    // Alice also made the two uploads.
    expect(days.rows.map((r) => [r.principal_id, r.requests])).toEqual([
      [bob.principalId, 400],
      [alice.principalId, 602],
    ]);
    const bobDay = days.rows[0]!;
    expect(Number(bobDay.bytes_down)).toBeGreaterThan(400 * body.length);
    expect(Number(days.rows[1]!.bytes_up)).toBeGreaterThanOrEqual(2 * body.length);

    const top = (await (
      await fetch(`${writer.url}/api/v1/admin/stats/artifacts?limit=1`, { headers: bearer(admin.key) })
    ).json()) as { artifacts: Array<Record<string, unknown>> };
    expect(top.artifacts).toEqual([
      expect.objectContaining({
        name: 'hot.bin',
        downloads: 1000,
        bytes: 1000 * body.length,
        lastDownloader: bob.principalId,
      }),
    ]);
    const perPrincipal = (await (
      await fetch(`${writer.url}/api/v1/admin/stats/principals?principal=${bob.name}`, { headers: bearer(admin.key) })
    ).json()) as { days: Array<Record<string, unknown>> };
    expect(perPrincipal.days).toEqual([
      expect.objectContaining({ principalName: bob.name, day: today, requests: 400 }),
    ]);
    // Paged: `nextCursor` reaches the rows past the limit (at most 1000), null on the last page.
    const stats = async (query: string) =>
      (await (await fetch(`${writer.url}/api/v1/admin/stats/${query}`, { headers: bearer(admin.key) })).json()) as {
        days: Array<Record<string, unknown>>;
        nextCursor: string | null;
      };
    // The admin's own calls here are counted too, and its row (a few requests, so last) is there
    // once its gateway has flushed them, which may happen between two pages: walked to the end.
    const firstDay = await stats('principals?limit=1');
    expect(firstDay.days).toEqual([expect.objectContaining({ principalId: alice.principalId, requests: 602 })]);
    const walked = [...firstDay.days];
    let cursor = firstDay.nextCursor;
    for (let page = 0; cursor !== null && page < 5; page++) {
      const next = await stats(`principals?limit=1&cursor=${encodeURIComponent(cursor)}`);
      expect(next.days.length).toBe(1);
      walked.push(...next.days);
      cursor = next.nextCursor;
    }
    expect(cursor).toBeNull();
    expect(walked.map((d) => d.principalId)).toEqual(
      [alice.principalId, bob.principalId, admin.principalId].slice(0, Math.max(2, walked.length)),
    );
    expect(
      (await fetch(`${writer.url}/api/v1/admin/stats/artifacts?view=never`, { headers: bearer(admin.key) })).status,
    ).toBe(400);
    // A day the calendar does not have is the caller's mistake, not a database error.
    for (const since of ['2024-02-30', '0000-01-01']) {
      const res = await fetch(`${writer.url}/api/v1/admin/stats/principals?since=${since}`, {
        headers: bearer(admin.key),
      });
      expect(res.status, since).toBe(400);
      expect(await res.json()).toMatchObject({ code: 'invalid_request', message: expect.stringContaining('since') });
    }
    const badDay = await runCli(['stats', 'principals', '--until', '2023-02-29'], { ARKVORY_DATABASE_URL: db.url });
    expect(badDay.code).toBe(2);
    expect(badDay.stderr).toContain('until must be a calendar day');

    // Published long ago: cold.bin was never downloaded, hot.bin was.
    await db.pool.query(`UPDATE arkvory_artifacts SET created_at = now() - interval '10 days' WHERE repository = 'us'`);
    const idle = await runCli(['stats', 'artifacts', '--idle-days', '5'], { ARKVORY_DATABASE_URL: db.url });
    expect(idle.code, idle.stderr).toBe(0);
    expect(
      idle.stdout
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { name: string }).name),
    ).toEqual(['cold.bin']);
    const cli = await runCli(['stats', 'principals', '--principal', alice.principalId], {
      ARKVORY_DATABASE_URL: db.url,
    });
    expect(JSON.parse(cli.stdout.trim())).toMatchObject({ principalId: alice.principalId, requests: 602 });
    await Promise.all([writer.stop('SIGTERM'), reader.stop('SIGTERM')]);
  }, 300_000);
});

describe('a crash', () => {
  it('kill -9 loses at most the counts of the last flush interval', async () => {
    const port = await freeLoopbackPort();
    const gw = await startGateway({ env: usageEnv('api', 0, port), timeoutMs: 90_000 });
    await publish(gw, 'crash.bin');
    const url = `${gw.url}/api/v1/repositories/us/artifacts/crash.bin/content`;
    await download(url, bob.key, 50);
    // Counted before the last interval began: flushed within one interval (bounded here by three).
    await waitUntil(async () => (await artifactRow('crash.bin'))?.downloads === 50, {
      what: 'the first 50 downloads flushed',
      timeoutMs: 3 * FLUSH_SECONDS * 1000 + 10_000,
    });
    await download(url, bob.key, 30);
    await gw.stop('SIGKILL');
    const after = (await artifactRow('crash.bin'))!.downloads;
    expect(after).toBeGreaterThanOrEqual(50);
    expect(after).toBeLessThanOrEqual(80);
  }, 180_000);
});
