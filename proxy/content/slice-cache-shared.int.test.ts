/**
 * The slice cache across a live writer and a reader (shared profile, one nginx WebDAV store, a
 * cache directory each), over real sockets:
 * - a purge through one gateway's admin API: the other removes the slices and stops serving them
 *   from its cache within the catalog cache's bound;
 * - a blob's digests deleted (what gc and scrub do to a blob they remove or quarantine; both hold
 *   the maintenance barrier, so here the row is deleted as they delete it, while both gateways run):
 *   both stop serving it from their caches within the bound (its reads relay from the store) and
 *   remove its slices;
 * - digests recorded later for a blob that had none (a re-upload of a blob published before they
 *   were recorded): every gateway caches it within the bound (the insert bumps the catalog epoch).
 */
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { waitForSliceFills } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
/** The catalog cache's bound (docs/storage-and-content.md, "Caches"), and slack for a loaded machine. */
const BOUND_MS = 2000;
const SLACK_MS = 1500;

async function heldBlobs(dir: string): Promise<Set<string>> {
  const out = new Set<string>();
  for (const shard of await readdir(path.join(dir, 'slices')).catch(() => []))
    for (const f of await readdir(path.join(dir, 'slices', shard))) out.add(f.slice(0, 64));
  return out;
}

async function counter(gw: GatewayProcess, line: string): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const found = text.split('\n').find((l) => l.startsWith(`${line} `));
  return found ? Number(found.split(' ').at(-1)) : 0;
}

/** Polls `check` until it holds or `BOUND_MS + SLACK_MS` after `since`; returns the elapsed ms. */
async function withinBound(since: number, check: () => Promise<boolean>, what: string): Promise<number> {
  while (!(await check())) {
    if (performance.now() - since > BOUND_MS + SLACK_MS)
      throw new Error(`${what}: not after ${Math.round(performance.now() - since)} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
  return performance.now() - since;
}

describe('slice cache across a live writer and reader (nginx WebDAV)', () => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let key: string;
  let adminKey: string;
  let writer: GatewayProcess;
  let reader: GatewayProcess;
  const dirs = { writer: '', reader: '' };

  beforeAll(async () => {
    backing = await startStoreBacking('http');
    await createRepository(db.pool, 'live');
    ({ key } = await createServiceAccount(db.pool, { grants: { live: 'write' } }));
    ({ key: adminKey } = await createServiceAccount(db.pool, { scopes: ['admin', 'read', 'write'] }));
    dirs.writer = await makeTempDir('arkvory-slices-writer-');
    dirs.reader = await makeTempDir('arkvory-slices-reader-');
    const shared = {
      ARKVORY_DATABASE_URL: db.url,
      ...backing.env,
      ARKVORY_REDIS_URL: inject('redisUrl'),
      ARKVORY_GATEWAY_SLOTS: '2',
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(1024 * MiB),
      ARKVORY_CACHE_SLICE_BYTES: String(MiB),
      ARKVORY_CACHE_MIN_FREE_BYTES: '0',
      ARKVORY_BLOB_CACHE_BYTES: '0',
    };
    writer = await startGateway({ env: { ...shared, ARKVORY_GATEWAY_SLOT: '0', ARKVORY_CACHE_DIR: dirs.writer } });
    reader = await startGateway({
      env: { ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1', ARKVORY_CACHE_DIR: dirs.reader },
      dataDir: writer.dataDir,
    });
  }, 120_000);
  afterAll(async () => {
    await reader?.stop('SIGTERM');
    await writer?.stop('SIGTERM');
    await backing?.stop();
  });

  const content = (gw: GatewayProcess, id: string) => `${gw.url}/api/v1/repositories/live/artifacts/${id}/content`;
  async function upload(id: string, body: Buffer): Promise<void> {
    const res = await request(`${writer.url}/api/v1/repositories/live/artifacts/${id}`, {
      method: 'PUT',
      headers: bearer(key),
      body,
    });
    expect(res.status).toBe(201);
  }
  async function readBoth(id: string, body: Buffer): Promise<void> {
    for (const gw of [writer, reader]) {
      const res = await request(content(gw, id), { headers: bearer(key) });
      expect(res.status).toBe(200);
      expect(sha256(res.body)).toBe(sha256(body));
    }
  }

  it('a purge through the writer removes the slices from the reader within the bound', async () => {
    const blob = randomContent(3 * MiB + 5);
    await upload('purged.bin', blob);
    await readBoth('purged.bin', blob);
    for (const gw of [writer, reader]) await waitForSliceFills(gw.url);
    expect((await heldBlobs(dirs.writer)).has(sha256(blob))).toBe(true);
    expect((await heldBlobs(dirs.reader)).has(sha256(blob))).toBe(true);

    const purged = await request(`${writer.url}/api/v1/admin/cache/purge`, {
      method: 'POST',
      headers: { ...bearer(adminKey), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ sha256: sha256(blob) })),
    });
    const since = performance.now();
    expect(purged.status).toBe(200);
    expect((await heldBlobs(dirs.writer)).has(sha256(blob))).toBe(false);
    await withinBound(since, async () => !(await heldBlobs(dirs.reader)).has(sha256(blob)), 'reader purged');
    // Served again (fetched and verified again), byte-exact.
    await readBoth('purged.bin', blob);
  });

  it('a blob whose digests are deleted (gc, scrub) stops being served from either cache within the bound', async () => {
    const blob = randomContent(2 * MiB + 9);
    await upload('removed.bin', blob);
    await readBoth('removed.bin', blob);
    const bypassed = { writer: await counter(writer, bypass), reader: await counter(reader, bypass) };
    await db.pool.query('DELETE FROM arkvory_blob_slices WHERE sha256 = $1', [sha256(blob)]);
    const since = performance.now();
    for (const [name, gw] of [
      ['writer', writer],
      ['reader', reader],
    ] as const) {
      const dir = dirs[name];
      await withinBound(since, async () => !(await heldBlobs(dir)).has(sha256(blob)), `${name}'s slices removed`);
      // Its reads now relay from the store, uncached (the store still has the blob here).
      const res = await request(content(gw, 'removed.bin'), { headers: bearer(key) });
      expect(sha256(res.body)).toBe(sha256(blob));
      expect(await counter(gw, bypass)).toBe(bypassed[name] + 1);
      expect((await heldBlobs(dir)).has(sha256(blob))).toBe(false);
    }
  });

  it('digests recorded later (a re-upload of a blob that had none) are used by every gateway within the bound', async () => {
    const blob = randomContent(2 * MiB + 1);
    await upload('late.bin', blob);
    // As if published before digests were recorded: both gateways look it up and find none.
    await db.pool.query('DELETE FROM arkvory_blob_slices WHERE sha256 = $1', [sha256(blob)]);
    await new Promise((r) => setTimeout(r, BOUND_MS));
    await readBoth('late.bin', blob);
    expect((await heldBlobs(dirs.writer)).has(sha256(blob))).toBe(false);
    expect((await heldBlobs(dirs.reader)).has(sha256(blob))).toBe(false);

    // The same bytes published again under another name record the digests.
    await upload('late-again.bin', blob);
    const since = performance.now();
    for (const [name, gw] of [
      ['writer', writer],
      ['reader', reader],
    ] as const) {
      await withinBound(
        since,
        async () => {
          const res = await request(content(gw, 'late.bin'), { headers: bearer(key) });
          expect(sha256(res.body)).toBe(sha256(blob));
          return (await heldBlobs(dirs[name])).has(sha256(blob));
        },
        `${name} caching the blob`,
      );
    }
  });
});

const bypass = 'arkvory_slice_cache_requests_total{result="bypass"}';
