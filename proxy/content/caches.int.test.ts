/**
 * The read-path caches seen from outside, with real gateway processes: a DELETE reaches the writer
 * and a reader within the documented bound, nothing stale survives a restart after scrub, and the
 * rate-limit and admission decisions are the same with the caches on and off.
 */
import { writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256, type RawResponse } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { readsByPrincipal, writeRateLimitsFile } from '../../test/harness/index.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
/** docs/storage-and-content.md: a DELETE reaches every gateway within 2 s (poll 0.5 s, trust 1.5 s). */
const DELETE_BOUND_MS = 2000;
/** What a loaded test machine may add to the bound (process scheduling, one extra poll round trip). */
const SCHEDULING_SLACK_MS = 1500;

const CACHES_OFF = {
  ARKVORY_CATALOG_CACHE_ENTRIES: '0',
  ARKVORY_OPEN_FILE_CACHE_ENTRIES: '0',
  ARKVORY_BLOB_CACHE_BYTES: '0',
};

const blobPath = (root: string, hex: string) =>
  path.join(root, 'blobs', 'sha256', hex.slice(0, 2), hex.slice(2, 4), hex);

async function cacheCounter(gw: GatewayProcess, family: string, cache: string): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${family}{cache="${cache}"}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe('read-path caches (real gateway processes)', () => {
  const db = useTestDatabase();

  it('a deleted artifact is not served after the bound, from the writer or a reader; the name can then carry other bytes', async () => {
    await createRepository(db.pool, 'del');
    const { key } = await createServiceAccount(db.pool, { grants: { del: 'write' } });
    const shared = {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_REDIS_URL: inject('redisUrl'),
      ARKVORY_GATEWAY_SLOTS: '2',
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(1024 * MiB),
    };
    // One database is bound to one storage root: every gateway of this file shares the default one.
    const writer = await startGateway({ env: { ...shared, ARKVORY_GATEWAY_SLOT: '0' } });
    const reader = await startGateway({
      env: { ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1' },
      dataDir: writer.dataDir,
    });
    const small = randomContent(4 * KiB);
    const large = randomContent(MiB + 7);
    const url = (gw: GatewayProcess, id: string) => `${gw.url}/api/v1/repositories/del/artifacts/${id}`;
    for (const [id, body] of [
      ['small', small],
      ['large', large],
    ] as const)
      expect((await request(url(writer, id), { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
    const get = (gw: GatewayProcess, id: string): Promise<RawResponse> =>
      request(`${url(gw, id)}/content`, { headers: bearer(key) });

    for (const gw of [writer, reader]) {
      for (let i = 0; i < 3; i++) {
        expect(sha256((await get(gw, 'small')).body)).toBe(sha256(small));
        expect(sha256((await get(gw, 'large')).body)).toBe(sha256(large));
      }
      // Served from memory: otherwise this test would prove nothing about the caches.
      expect(await cacheCounter(gw, 'arkvory_cache_hits_total', 'catalog')).toBeGreaterThanOrEqual(4);
      expect(await cacheCounter(gw, 'arkvory_cache_hits_total', 'blob')).toBeGreaterThanOrEqual(2);
      expect(await cacheCounter(gw, 'arkvory_cache_hits_total', 'open_file')).toBeGreaterThanOrEqual(2);
    }

    for (const id of ['small', 'large']) {
      expect((await request(url(writer, id), { method: 'DELETE', headers: bearer(key) })).status).toBe(204);
      const deletedAt = performance.now();
      // The writer forgets at once; the reader within the bound.
      expect((await get(writer, id)).status).toBe(404);
      let status = (await get(reader, id)).status;
      while (status !== 404 && performance.now() - deletedAt < DELETE_BOUND_MS + SCHEDULING_SLACK_MS) {
        await new Promise((r) => setTimeout(r, 20));
        status = (await get(reader, id)).status;
      }
      expect(
        status,
        `${id} still served by the reader ${Math.round(performance.now() - deletedAt)} ms after the DELETE`,
      ).toBe(404);
    }

    // The free name now carries other bytes: both gateways serve the new ones, never the cached old.
    const replacement = randomContent(4 * KiB);
    expect(
      (await request(url(writer, 'small'), { method: 'PUT', headers: bearer(key), body: replacement })).status,
    ).toBe(201);
    for (const gw of [writer, reader]) {
      const res = await get(gw, 'small');
      expect(res.headers.etag).toBe(`"${sha256(replacement)}"`);
      expect(sha256(res.body)).toBe(sha256(replacement));
    }
    // One writer per storage root: the next tests start their own.
    expect(await reader.stop('SIGTERM')).toBe(0);
    expect(await writer.stop('SIGTERM')).toBe(0);
  }, 120_000);
});

// Standalone gateways: a database that carried a shared profile would refuse them.
describe('read-path caches across restarts and with policy (real gateway processes)', () => {
  const db = useTestDatabase();

  it('after a restart nothing stale is served: a damaged small blob is refused, and blobs scrub quarantined are gone', async () => {
    await createRepository(db.pool, 'scrub');
    const { key } = await createServiceAccount(db.pool, { grants: { scrub: 'write' } });
    const env = { ARKVORY_DATABASE_URL: db.url };
    let gw = await startGateway({ env });
    const dataDir = gw.dataDir;
    const small = randomContent(8 * KiB);
    const large = randomContent(2 * MiB);
    const url = (id: string) => `${gw.url}/api/v1/repositories/scrub/artifacts/${id}`;
    for (const [id, body] of [
      ['small', small],
      ['large', large],
    ] as const)
      expect((await request(url(id), { method: 'PUT', headers: bearer(key), body })).status).toBe(201);
    // Warm every cache.
    for (let i = 0; i < 2; i++)
      for (const id of ['small', 'large'])
        expect((await request(`${url(id)}/content`, { headers: bearer(key) })).status).toBe(200);
    expect(await gw.stop('SIGTERM')).toBe(0);

    // Damage both blobs on disk, same length (what bit rot or a bad disk does).
    await writeFile(blobPath(dataDir, sha256(small)), randomContent(small.length));
    await writeFile(blobPath(dataDir, sha256(large)), randomContent(large.length));
    gw = await startGateway({ env, dataDir });
    // A small blob is checked against its sha256 when it enters the cache: 500, not damaged bytes.
    const damaged = await request(`${url('small')}/content`, { headers: bearer(key) });
    expect(damaged.status).toBe(500);
    expect(JSON.parse(damaged.body.toString())).toMatchObject({ code: 'internal' });
    await expect.poll(() => gw.logs()).toContain('is damaged');
    expect(await gw.stop('SIGTERM')).toBe(0);

    const scrub = await runCli(['scrub'], { ...env, ARKVORY_DATA_DIR: dataDir });
    expect(scrub.code, scrub.stderr).toBe(1);
    expect(
      (JSON.parse(scrub.stdout) as { corrupt: Array<{ blob: string }> }).corrupt.map((c) => c.blob).sort(),
    ).toEqual([sha256(small), sha256(large)].sort());

    gw = await startGateway({ env, dataDir });
    for (const id of ['small', 'large']) {
      for (const method of ['GET', 'HEAD'])
        expect((await request(`${url(id)}/content`, { method, headers: bearer(key) })).status, `${method} ${id}`).toBe(
          500,
        );
    }
    expect(await gw.stop('SIGTERM')).toBe(0);
  }, 120_000);

  it('rate-limit and admission decisions are the same with the caches on and off', async () => {
    await createRepository(db.pool, 'same');
    const rules = await writeRateLimitsFile(
      { gateway_request: [readsByPrincipal('reads_by_principal', 5, 3600)] },
      await makeTempDir('arkvory-rules-'), // removed when the file ends
    );
    const admin = await createServiceAccount(db.pool, { grants: { same: 'write' } });
    const small = randomContent(4 * KiB);
    const big = randomContent(32 * MiB);
    const outcomes: Record<string, unknown> = {};
    for (const [label, extra] of [
      ['caches on', {}],
      ['caches off', CACHES_OFF],
    ] as const) {
      const gw = await startGateway({
        env: {
          ARKVORY_DATABASE_URL: db.url,
          ARKVORY_RATE_LIMITS_FILE: rules,
          ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '2',
          ARKVORY_ADMISSION_QUEUE_LENGTH: '0',
          ...extra,
        },
      });
      const base = `${gw.url}/api/v1/repositories/same/artifacts`;
      for (const [id, body] of [
        ['small', small],
        ['big', big],
      ] as const) {
        const put = await request(`${base}/${id}`, { method: 'PUT', headers: bearer(admin.key), body });
        expect([200, 201]).toContain(put.status);
      }
      // Rate limit: a fresh principal, 8 reads of a (cached, after the first) small object. Two
      // download slots per principal: a slot still being released after an answer never makes a
      // sequential client's next read `busy` (that would be admission, not the rule under test).
      const limited = await createServiceAccount(db.pool, { grants: { same: 'read' }, scopes: ['read'] });
      const statuses: Array<number | string> = [];
      for (let i = 0; i < 8; i++) {
        const res = await request(`${base}/small/content`, { headers: bearer(limited.key) });
        statuses.push(
          res.status === 200 ? 200 : `${res.status} ${(JSON.parse(res.body.toString()) as { code: string }).code}`,
        );
      }

      // Admission: a second principal holds both its download slots with stalled big downloads.
      const holder = await createServiceAccount(db.pool, { grants: { same: 'read' }, scopes: ['read'] });
      const sockets: net.Socket[] = [];
      for (let i = 0; i < 2; i++) {
        const socket = net.connect(gw.port, '127.0.0.1');
        await new Promise((r) => socket.once('connect', r));
        // A stalled reader only: a reset when it is destroyed must not be an uncaught error.
        socket.on('error', () => {});
        socket.write(
          `GET /api/v1/repositories/same/artifacts/big/content HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${holder.key}\r\n\r\n`,
        );
        socket.pause();
        sockets.push(socket);
      }
      await expect
        .poll(
          async () =>
            (await fetch(`${gw.url}/metrics`).then((r) => r.text())).includes(
              'arkvory_admission_active{kind="download"} 2',
            ),
          { timeout: 10_000 },
        )
        .toBe(true);
      const whileHeld = await request(`${base}/small/content`, { headers: bearer(holder.key) });
      for (const socket of sockets) socket.destroy();
      await expect
        .poll(
          async () =>
            (await fetch(`${gw.url}/metrics`).then((r) => r.text())).includes(
              'arkvory_admission_active{kind="download"} 0',
            ),
          { timeout: 10_000 },
        )
        .toBe(true);
      const afterRelease = await request(`${base}/small/content`, { headers: bearer(holder.key) });
      outcomes[label] = {
        statuses,
        whileHeld: [whileHeld.status, JSON.parse(whileHeld.body.toString()).code],
        afterRelease: afterRelease.status,
      };
      if (label === 'caches on') expect(await cacheCounter(gw, 'arkvory_cache_hits_total', 'blob')).toBeGreaterThan(0);
      expect(await gw.stop('SIGTERM')).toBe(0);
    }
    expect(outcomes['caches on']).toEqual({
      statuses: [200, 200, 200, 200, 200, '429 rate_limited', '429 rate_limited', '429 rate_limited'],
      whileHeld: [429, 'busy'],
      afterRelease: 200,
    });
    expect(outcomes['caches off']).toEqual(outcomes['caches on']);
  }, 180_000);
});
