/**
 * The shared profile with real processes: one writer and two readers on one PostgreSQL and one
 * storage root, sharing a download budget through slot leases (read-gateways spec, "Checks").
 */
import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import http from 'node:http';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { type SharedProfile, sharedProfileEnv, waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
/** Three participants run; slot 3 stays free for the refusal cases. */
const SLOTS = 4;
/** 4 × 1 MiB/s + 3: each participant gets floor(rate / 4) = 1 MiB/s, the remainder is unused. */
const RATE = SLOTS * MiB + 3;
const SHARE = Math.floor(RATE / SLOTS);
const BURST = Math.floor(Math.min(SHARE / 10, MiB));

const file = randomContent(3 * MiB + 12345);
const contentPath = '/api/v1/repositories/shared/artifacts/big.bin/content';

/** Downloads for at most `ms` and returns how many bytes arrived (the body may be cut short). */
function downloadFor(
  url: string,
  authKey: string,
  ms: number,
): Promise<{ bytes: number; elapsedMs: number; firstByteMs: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let bytes = 0;
    let firstByteMs: number | undefined;
    const done = () => {
      const elapsedMs = performance.now() - started;
      resolve({ bytes, elapsedMs, firstByteMs: firstByteMs ?? elapsedMs });
    };
    const req = http.get(url, { headers: bearer(authKey), agent: false }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
      res.on('data', (c: Buffer) => {
        firstByteMs ??= performance.now() - started;
        bytes += c.length;
      });
      res.on('end', done);
      res.on('error', done);
    });
    req.on('error', reject);
    setTimeout(() => {
      req.destroy();
      done();
    }, ms);
  });
}

// Each participant as one process, then as an instance of two workers (docs/architecture.md,
// "Workers"): the same assertions, since the lease and its share are the instance's.
describe.each([1, 2])('shared profile: one writer, two readers, %i worker(s) each', (workers) => {
  let db: TestDatabase & { drop(): Promise<void> };
  let dataDir: string;
  let writer: GatewayProcess;
  let readers: GatewayProcess[];
  let key: string;
  let writeKey: string;
  let outsiderKey: string;

  /** The shared profile's settings, known once the database is made. */
  let profile: SharedProfile;
  const sharedEnv = (role: 'api' | 'reader', slot: number) => ({
    ...sharedProfileEnv({ ...profile, role, slot }),
    ARKVORY_WORKERS: String(workers),
  });

  beforeAll(async () => {
    db = await createTestDatabase();
    profile = { databaseUrl: db.url, redis: inject('redisUrl'), slots: SLOTS, downloadBytesPerSecond: RATE };
    dataDir = await makeTempDir();
    await createRepository(db.pool, 'shared');
    await createRepository(db.pool, 'hidden');
    ({ key } = await createServiceAccount(db.pool, { scopes: ['read'], grants: { shared: 'read' } }));
    ({ key: writeKey } = await createServiceAccount(db.pool, {
      scopes: ['read', 'write'],
      grants: { shared: 'write' },
    }));
    ({ key: outsiderKey } = await createServiceAccount(db.pool, {
      scopes: ['read', 'write'],
      grants: { hidden: 'write' },
    }));
    writer = await startGateway({ env: sharedEnv('api', 0), dataDir });
    const put = await request(`${writer.url}/api/v1/repositories/shared/artifacts/big.bin`, {
      method: 'PUT',
      headers: { ...bearer(writeKey), 'content-type': 'application/octet-stream' },
      body: file,
    });
    expect(put.status).toBe(201);
    readers = await Promise.all([1, 2].map((slot) => startGateway({ env: sharedEnv('reader', slot), dataDir })));
  });

  afterAll(async () => {
    await Promise.all([writer, ...(readers ?? [])].filter(Boolean).map((g) => g.stop('SIGTERM')));
    await db?.drop();
  });

  it('serves the same file byte-identically from every participant, with Range and ACL on readers', async () => {
    // All at once: each participant paces its own share, so three take the time of one.
    const participants = [writer, ...readers];
    const fulls = await Promise.all(
      participants.map((gw) => request(`${gw.url}${contentPath}`, { headers: bearer(key) })),
    );
    for (const [i, gw] of participants.entries()) {
      const full = fulls[i]!;
      expect(full.status).toBe(200);
      expect(sha256(full.body)).toBe(sha256(file));
      const range = await request(`${gw.url}${contentPath}`, { headers: { ...bearer(key), range: 'bytes=1000-1999' } });
      expect(range.status).toBe(206);
      expect(range.headers['content-range']).toBe(`bytes 1000-1999/${file.length}`);
      expect(range.body.equals(file.subarray(1000, 2000))).toBe(true);
      expect((await request(`${gw.url}${contentPath}`, { headers: bearer(outsiderKey) })).status).toBe(404);
    }
  });

  it('answers every mutating method on a reader with 405 read_only and Allow: GET, HEAD, even with a write key', async () => {
    for (const method of ['PUT', 'POST', 'DELETE', 'PATCH']) {
      // Node's client sends a DELETE body without Content-Length (unframed bytes); send none there.
      const body = method === 'DELETE' ? undefined : Buffer.from('x');
      const res = await request(`${readers[0]!.url}/api/v1/repositories/shared/artifacts/other.bin`, {
        method,
        headers: bearer(writeKey),
        ...(body ? { body } : {}),
      });
      expect(res.status, method).toBe(405);
      expect(res.headers.allow).toBe('GET, HEAD');
      expect(JSON.parse(res.body.toString()).code).toBe('read_only');
    }
  });

  it('reports role, writable and the lease in /health/ready', async () => {
    const ready = JSON.parse(
      (await request(`${readers[1]!.url}/health/ready`, { headers: bearer(key) })).body.toString(),
    );
    expect(ready).toMatchObject({
      role: 'reader',
      writable: false,
      sharedDownloads: { slot: 2, slots: 4, active: true, leaseSeconds: 10 },
    });
    expect(ready.transfers.downloads.bytesPerSecond).toBe(SHARE);
    expect(ready.workers).toHaveLength(workers);
    // The lease is the instance's, once: held, whatever the number of workers.
    const scrape = (await request(`${readers[1]!.url}/metrics`)).body.toString();
    for (const [state, value] of Object.entries({ held: 1, standalone: 0, lapsed: 0, fenced: 0 }))
      expect(scrape, state).toMatch(new RegExp(`^arkvory_lease_state\\{state="${state}"\\} ${value}$`, 'm'));
    const w = JSON.parse((await request(`${writer.url}/health/ready`, { headers: bearer(key) })).body.toString());
    expect(w).toMatchObject({ role: 'api', writable: true, sharedDownloads: { slot: 0, slots: 4, active: true } });
  });

  it('keeps each participant within its floor(rate / SLOTS) share and all three within the global rate over ≥ 5 s', async () => {
    const windowMs = 5500;
    const results = await Promise.all(
      [writer, ...readers].map((gw) => downloadFor(`${gw.url}${contentPath}`, key, windowMs)),
    );
    let total = 0;
    for (const r of results) {
      // The bound of the spec: granted ≤ share × elapsed + burst (from a full bucket).
      expect(r.bytes).toBeLessThanOrEqual(SHARE * (r.elapsedMs / 1000) + BURST);
      // And the share is actually used: from the first byte to the end, at least 85 % of
      // share × time + burst. The governor guarantees it within a quantum and 1 ms of rate on an
      // injected clock (bandwidth-governor.test.ts); over HTTP on this 2-core machine at load
      // average 14–19, nine downloads (three runs) measured 96–100 %, and the floor leaves room for
      // a gateway the OS runs late past what its burst absorbs.
      const pace = r.bytes / ((SHARE * (r.elapsedMs - r.firstByteMs)) / 1000 + BURST);
      if (process.env.ARKVORY_PACING_REPORT) console.log(`shared share pace: ${(pace * 100).toFixed(1)} %`);
      expect(pace).toBeGreaterThan(0.85);
      total += r.bytes;
    }
    const elapsed = Math.max(...results.map((r) => r.elapsedMs)) / 1000;
    expect(total).toBeLessThanOrEqual(RATE * elapsed + 3 * BURST);
  });

  it('after kill -9 of a reader, the file still downloads through the writer, and the killed slot restarts after its reservation', async () => {
    const victim = readers[0]!;
    await victim.stop('SIGKILL');
    const viaWriter = await request(`${writer.url}${contentPath}`, {
      headers: { ...bearer(key), range: `bytes=${file.length - 5000}-` },
    });
    expect(viaWriter.status).toBe(206);
    expect(viaWriter.body.equals(file.subarray(file.length - 5000))).toBe(true);
    const { rows } = await db.pool.query(
      `SELECT extract(epoch FROM expires_at - clock_timestamp()) * 1000 AS ms FROM arkvory_gateway_leases WHERE slot = 1`,
    );
    const remainingMs = Number(rows[0].ms);
    const started = Date.now();
    const restarted = await startGateway({ env: sharedEnv('reader', 1), dataDir, timeoutMs: 30_000 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(remainingMs - 100);
    readers[0] = restarted;
    const again = await request(`${restarted.url}${contentPath}`, { headers: bearer(key) });
    expect(sha256(again.body)).toBe(sha256(file));
  }, 60_000);

  it('refuses a second process on a live slot, and a standalone start beside the stored policy', async () => {
    const dup = await startGateway({ env: sharedEnv('reader', 2), dataDir, waitFor: 'none' });
    expect(await dup.exited).toBe(1);
    expect(dup.logs()).toContain('held by a running gateway');
    const standalone = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: String(workers) },
      dataDir,
      waitFor: 'none',
    });
    expect(await standalone.exited).toBe(1);
    expect(standalone.logs()).toMatch(/another writer|bypass/);
  });

  it('refuses a reader on a storage root the writer never initialised', async () => {
    const empty = await makeTempDir();
    await mkdir(`${empty}/blobs`, { recursive: true });
    const reader = await startGateway({ env: sharedEnv('reader', 3), dataDir: empty, waitFor: 'none' });
    expect(await reader.exited).toBe(1);
    expect(reader.logs()).toMatch(/storage/i);
  });
  it('fences every worker of a reader whose slot was taken over: 503 fenced and downloads refused with lease_lost', async () => {
    const victim = readers[1]!;
    // What a successor does once the reservation lapsed: the next renewal finds another owner.
    await db.pool.query('UPDATE arkvory_gateway_leases SET owner = $1, generation = generation + 1 WHERE slot = 2', [
      randomUUID(),
    ]);
    const fencedWorkers = new Set<number>();
    await waitUntil(
      async () => {
        // A new connection lands on any worker (SO_REUSEPORT): ask until each one was seen fenced.
        const client = new Client(victim.url);
        try {
          const status = await client.request({ path: '/health/status', method: 'GET' });
          const body = (await status.body.json()) as { status: string; workerIndex: number };
          if (status.statusCode !== 503) return false;
          expect(body.status).toBe('fenced');
          const download = await client.request({ path: contentPath, method: 'GET', headers: bearer(key) });
          const refused = (await download.body.json()) as { code: string };
          expect([download.statusCode, refused.code]).toEqual([503, 'lease_lost']);
          fencedWorkers.add(body.workerIndex);
          return fencedWorkers.size === workers;
        } finally {
          await client.close();
        }
      },
      { timeoutMs: 15_000, intervalMs: 50, what: `all ${workers} worker(s) of the reader on slot 2 fenced` },
    );
  }, 30_000);
});
