/**
 * The slice cache stays coherent with the catalog and leaves policy as it was, over real sockets
 * (a gateway in front of nginx WebDAV): purge through the admin API and the CLI, scrub's quarantine
 * and gc's removal (offline, every gateway stopped: seen at the next start), scrub's backfill of
 * digests for blobs published before they were recorded, and a warm (cached) blob refused to a
 * principal without a grant; rate limits, admission and the bandwidth governor count the same
 * request sequence identically with the cache on and off (their metrics compared).
 */
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { waitForSliceFills, waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;

/** The slice files of the cache in `dir` (slices/ only gets them renamed in whole). */
async function sliceFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const shard of await readdir(path.join(dir, 'slices')).catch(() => []))
    out.push(...(await readdir(path.join(dir, 'slices', shard))));
  return out;
}

async function heldBlobs(dir: string): Promise<Set<string>> {
  return new Set((await sliceFiles(dir)).map((f) => f.slice(0, 64)));
}

/** How many whole slices of `sha` the cache in `dir` holds. */
async function heldSlices(dir: string, sha: string): Promise<number> {
  return (await sliceFiles(dir)).filter((f) => f.startsWith(sha)).length;
}

describe('slice cache coherence and policy (nginx WebDAV)', () => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let writerKey: string;
  let adminKey: string;
  let cacheDir: string;
  const env = (extra: Record<string, string> = {}) => ({
    ARKVORY_DATABASE_URL: db.url,
    ...backing.env,
    ARKVORY_CACHE_DIR: cacheDir,
    ARKVORY_CACHE_SLICE_BYTES: String(MiB),
    ARKVORY_CACHE_MIN_FREE_BYTES: '0',
    ARKVORY_BLOB_CACHE_BYTES: '0',
    ...extra,
  });

  beforeAll(async () => {
    backing = await startStoreBacking('http');
    await createRepository(db.pool, 'coh');
    ({ key: writerKey } = await createServiceAccount(db.pool, { grants: { coh: 'write' } }));
    ({ key: adminKey } = await createServiceAccount(db.pool, { scopes: ['admin', 'read', 'write'] }));
    cacheDir = await makeTempDir('arkvory-slice-coherence-');
  });
  afterAll(async () => {
    await backing?.stop();
  });

  const auth = (key: string) => ({ authorization: `Bearer ${key}` });
  async function upload(gw: GatewayProcess, name: string, bytes: Buffer): Promise<string> {
    const url = `${gw.url}/api/v1/repositories/coh/artifacts/${name}`;
    expect((await request(url, { method: 'PUT', headers: auth(writerKey), body: bytes })).status).toBe(201);
    return `/api/v1/repositories/coh/artifacts/${name}/content`;
  }

  it('purge by artifact (admin API) and by blob (CLI) removes the slices; the next read fetches and verifies again', async () => {
    const gw = await startGateway({ env: env() });
    const a = randomContent(2 * MiB + 1);
    const b = randomContent(MiB + 7);
    const pathA = await upload(gw, 'purge-a.bin', a);
    const pathB = await upload(gw, 'purge-b.bin', b);
    for (const p of [pathA, pathB]) await request(`${gw.url}${p}`, { headers: auth(writerKey) });
    await waitForSliceFills(gw.url);
    // Every slice of both is held (a fill may still be starting once the answer is out): 3 of a, 2 of b.
    await waitUntil(
      async () => (await heldSlices(cacheDir, sha256(a))) === 3 && (await heldSlices(cacheDir, sha256(b))) === 2,
      {
        what: 'every slice of both blobs in the cache',
        timeoutMs: 10_000,
      },
    );
    expect(await heldBlobs(cacheDir)).toEqual(new Set([sha256(a), sha256(b)]));

    const purged = await request(`${gw.url}/api/v1/admin/cache/purge`, {
      method: 'POST',
      headers: { ...auth(adminKey), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ repository: 'coh', artifact: 'purge-a.bin' })),
    });
    expect(purged.status).toBe(200);
    expect(JSON.parse(purged.body.toString())).toEqual({ purged: [sha256(a)], removedHere: 3 });
    expect(await heldBlobs(cacheDir)).toEqual(new Set([sha256(b)]));

    // The CLI writes the request to the database; the gateway applies it on the epoch notification.
    const cli = await runCli(['cache', 'purge', '--sha256', sha256(b)], { ARKVORY_DATABASE_URL: db.url });
    expect(cli.code).toBe(0);
    const deadline = Date.now() + 5000;
    while ((await heldBlobs(cacheDir)).has(sha256(b)) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    expect(await heldBlobs(cacheDir)).toEqual(new Set());
    expect(sha256((await request(`${gw.url}${pathA}`, { headers: auth(writerKey) })).body)).toBe(sha256(a));
    // Its slice files are written behind the response.
    await waitForSliceFills(gw.url);

    const stats = JSON.parse(
      (await request(`${gw.url}/api/v1/admin/cache`, { headers: auth(adminKey) })).body.toString(),
    );
    expect(stats).toMatchObject({ enabled: true, heldSlices: 3 });
    const disk = await runCli(['cache', 'stats'], { ARKVORY_DATABASE_URL: db.url, ARKVORY_CACHE_DIR: cacheDir });
    expect(JSON.parse(disk.stdout)).toMatchObject({ enabled: true, slices: 3, blobs: 1 });

    // The console's status view shows the hit ratio and the size held.
    const session = await request(`${gw.url}/console/session`, { method: 'POST', headers: auth(adminKey) });
    expect(session.status).toBe(201);
    const cookie = String(session.headers['set-cookie']?.[0]).split(';')[0]!;
    await request(`${gw.url}${pathA}`, { headers: auth(writerKey) }); // a hit
    const status = JSON.parse(
      (await request(`${gw.url}/console/api/status`, { headers: { cookie } })).body.toString(),
    ) as { sliceCache: { requests: { hit: number; miss: number }; hitRatio: number; heldBytes: number } };
    const { hit, miss } = status.sliceCache.requests;
    expect(hit).toBeGreaterThanOrEqual(1);
    expect(miss).toBeGreaterThanOrEqual(1);
    expect(status.sliceCache.hitRatio).toBeCloseTo(hit / (hit + miss), 6);
    // Counted in whole blocks: the 1-byte last slice takes one.
    expect(status.sliceCache).toMatchObject({ heldBytes: 2 * MiB + 4096, heldSlices: 3, maxBytes: 10 * 1024 ** 3 });
  });

  it('scrub quarantines a damaged blob and gc removes an orphan: at the next start their slices are gone and never served; scrub backfills missing digests', async () => {
    let gw = await startGateway({ env: env() });
    const damaged = randomContent(2 * MiB);
    const orphan = randomContent(MiB);
    const old = randomContent(MiB + 3);
    const pathD = await upload(gw, 'damaged.bin', damaged);
    const pathO = await upload(gw, 'orphan.bin', orphan);
    const pathOld = await upload(gw, 'old.bin', old);
    for (const p of [pathD, pathO]) await request(`${gw.url}${p}`, { headers: auth(writerKey) });
    // A blob "published before digests were recorded": its row is gone; reads relay uncached.
    await db.pool.query('DELETE FROM arkvory_blob_slices WHERE sha256 = $1', [sha256(old)]);
    expect(sha256((await request(`${gw.url}${pathOld}`, { headers: auth(writerKey) })).body)).toBe(sha256(old));
    expect((await heldBlobs(cacheDir)).has(sha256(old))).toBe(false);
    expect(
      (
        await request(`${gw.url}/api/v1/repositories/coh/artifacts/orphan.bin`, {
          method: 'DELETE',
          headers: auth(writerKey),
        })
      ).status,
    ).toBeLessThan(300);
    await gw.stop();

    const h = sha256(damaged);
    const blobFile = `blobs/sha256/${h.slice(0, 2)}/${h.slice(2, 4)}/${h}`;
    const bytes = Buffer.from(damaged);
    bytes[5] = bytes[5]! ^ 1;
    await backing.probe().write(blobFile, bytes);
    const cliEnv = { ARKVORY_DATABASE_URL: db.url, ...backing.env, ARKVORY_CACHE_SLICE_BYTES: String(MiB) };
    expect((await runCli(['scrub'], cliEnv)).code).toBe(1);
    expect((await runCli(['gc'], cliEnv)).code).toBe(0);
    const rows = await db.pool.query<{ sha256: string }>('SELECT sha256 FROM arkvory_blob_slices');
    const recorded = new Set(rows.rows.map((r) => r.sha256));
    expect(recorded.has(sha256(old))).toBe(true); // backfilled
    expect(recorded.has(h)).toBe(false); // quarantined
    expect(recorded.has(sha256(orphan))).toBe(false); // collected

    gw = await startGateway({ env: env() });
    expect(await heldBlobs(cacheDir)).not.toContain(h);
    expect(await heldBlobs(cacheDir)).not.toContain(sha256(orphan));
    // The quarantined blob is not served from the cache (the store no longer has it).
    const res = await request(`${gw.url}${pathD}`, { headers: auth(writerKey) });
    expect(res.status).toBeGreaterThanOrEqual(500);
    // The backfilled blob is now cached.
    expect(sha256((await request(`${gw.url}${pathOld}`, { headers: auth(writerKey) })).body)).toBe(sha256(old));
    await waitForSliceFills(gw.url);
    expect((await heldBlobs(cacheDir)).has(sha256(old))).toBe(true);
  });

  it('a purge made while the gateway is stopped is applied when it starts; a directory not swept within the purge retention starts empty', async () => {
    const dir = await makeTempDir('arkvory-slice-purge-start-');
    let gw = await startGateway({ env: env({ ARKVORY_CACHE_DIR: dir }) });
    const a = randomContent(MiB + 11);
    const b = randomContent(MiB + 13);
    const pathA = await upload(gw, 'stopped-a.bin', a);
    const pathB = await upload(gw, 'stopped-b.bin', b);
    for (const p of [pathA, pathB]) await request(`${gw.url}${p}`, { headers: auth(writerKey) });
    await waitForSliceFills(gw.url);
    expect(await heldBlobs(dir)).toEqual(new Set([sha256(a), sha256(b)]));
    await gw.stop();

    // No gateway runs to hear it: the request waits in arkvory_cache_purges.
    expect((await runCli(['cache', 'purge', '--sha256', sha256(a)], { ARKVORY_DATABASE_URL: db.url })).code).toBe(0);
    gw = await startGateway({ env: env({ ARKVORY_CACHE_DIR: dir }) });
    expect(await heldBlobs(dir)).toEqual(new Set([sha256(b)]));
    expect(sha256((await request(`${gw.url}${pathA}`, { headers: auth(writerKey) })).body)).toBe(sha256(a));
    await waitForSliceFills(gw.url);
    expect(await heldBlobs(dir)).toEqual(new Set([sha256(a), sha256(b)]));
    await gw.stop();

    // Swept last two days ago: requests it never applied may have been cleared since.
    await writeFile(path.join(dir, 'purges'), `${new Date(Date.now() - 2 * 86_400_000).toISOString()}\n`);
    gw = await startGateway({ env: env({ ARKVORY_CACHE_DIR: dir }) });
    expect(await heldBlobs(dir)).toEqual(new Set());
    expect(gw.logs()).toContain('not swept within the purge retention');
    await gw.stop();

    // A note that cannot be written (here a directory in its place) costs a warning, not the start.
    await rm(path.join(dir, 'purges'));
    await mkdir(path.join(dir, 'purges', 'in-the-way'), { recursive: true });
    gw = await startGateway({ env: env({ ARKVORY_CACHE_DIR: dir }) });
    expect(gw.logs()).toContain('its purge note could not be written');
    expect(sha256((await request(`${gw.url}${pathB}`, { headers: auth(writerKey) })).body)).toBe(sha256(b));
    await gw.stop();
  });

  it('policy is unchanged on a hit: a cached blob is refused without a grant (404) or a key (401); Range answers are the same', async () => {
    const gw = await startGateway({ env: env() });
    const blob = randomContent(MiB + 11);
    const p = await upload(gw, 'policy.bin', blob);
    expect(sha256((await request(`${gw.url}${p}`, { headers: auth(writerKey) })).body)).toBe(sha256(blob));
    await waitForSliceFills(gw.url);
    expect((await heldBlobs(cacheDir)).has(sha256(blob))).toBe(true);
    const { key: stranger } = await createServiceAccount(db.pool, { grants: {} });
    // Without a grant the blob is not even acknowledged (as for any artifact): never its bytes.
    expect((await request(`${gw.url}${p}`, { headers: auth(stranger) })).status).toBe(404);
    expect((await request(`${gw.url}${p}`)).status).toBe(401);
    const cold = await request(`${gw.url}${p}`, { headers: { ...auth(writerKey), range: 'bytes=5-9' } });
    expect(cold.status).toBe(206);
    expect(cold.headers['content-range']).toBe(`bytes 5-9/${blob.length}`);
    expect(cold.body.equals(blob.subarray(5, 10))).toBe(true);
  });

  it('rate limits, admission and the bandwidth governor count hits exactly as misses (same sequence, cache on and off)', async () => {
    const DAY_S = 86_400;
    const small = randomContent(3 * MiB + 3);
    const big = randomContent(32 * MiB);
    const setup = await startGateway({ env: env() });
    const pathSmall = await upload(setup, 'policy-small.bin', small);
    const pathBig = await upload(setup, 'policy-big.bin', big);
    await setup.stop();
    const rules = path.join(await makeTempDir('arkvory-policy-rules-'), 'rules.yaml');
    await writeFile(
      rules,
      `rate_limits:
  gateway_request:
    - name: cache_policy_reads
      action: limit
      characteristics: [principal]
      limit: 6
      period_s: ${DAY_S}
      match:
        request_type: read
  transfer_bytes:
    - name: cache_policy_bytes
      action: log
      characteristics: [principal]
      limit: 1000000000
      period_s: 60
`,
    );
    const policyEnv = {
      ARKVORY_RATE_LIMITS_FILE: rules,
      ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(1024 * MiB),
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '1',
      ARKVORY_ADMISSION_QUEUE_LENGTH: '0',
    };
    const families = [
      'arkvory_rate_limit_checks_total',
      'arkvory_rate_limit_rule_evaluations_total',
      'arkvory_admission_rejected_total',
      'arkvory_http_requests_total',
    ];
    const snapshot = async (gw: GatewayProcess, names: string[]): Promise<Map<string, number>> => {
      const text = await (await fetch(`${gw.url}/metrics`)).text();
      const out = new Map<string, number>();
      for (const line of text.split('\n'))
        if (names.some((n) => line.startsWith(`${n}{`) || line.startsWith(`${n} `))) {
          const at = line.lastIndexOf(' ');
          out.set(line.slice(0, at), Number(line.slice(at + 1)));
        }
      return out;
    };
    const delta = (after: Map<string, number>, before: Map<string, number>) =>
      Object.fromEntries([...after].map(([k, v]) => [k, v - (before.get(k) ?? 0)]).filter(([, v]) => v !== 0));

    const sequence = async (cacheOn: boolean) => {
      // Windows are aligned to Unix time (docs/rate-limits.md): a sequence across a boundary would
      // start counting anew halfway. A day's window has one boundary a day; wait it out when near.
      const toBoundaryMs = DAY_S * 1000 - (Date.now() % (DAY_S * 1000));
      if (toBoundaryMs < 120_000) await sleep(toBoundaryMs + 100);
      const withCache = env(policyEnv);
      const { ARKVORY_CACHE_DIR: _dir, ...withoutCache } = withCache;
      const gw = await startGateway({ env: cacheOn ? withCache : withoutCache });
      const statuses: Array<number | string> = [];
      const before = await snapshot(gw, families);
      const bandwidthBefore = await snapshot(gw, ['arkvory_bandwidth_granted_bytes_total']);
      const get = async (p: string, headers: Record<string, string> = {}, method = 'GET') => {
        const res = await request(`${gw.url}${p}`, { method, headers: { ...auth(writerKey), ...headers } });
        const code = res.status >= 400 ? JSON.parse(res.body.toString()).code : undefined;
        statuses.push(code ? `${res.status} ${code}` : res.status);
        return res;
      };
      expect(sha256((await get(pathSmall)).body)).toBe(sha256(small));
      expect(sha256((await get(pathSmall)).body)).toBe(sha256(small));
      expect((await get(pathSmall, { range: 'bytes=5-9' })).body.equals(small.subarray(5, 10))).toBe(true);
      await get(pathSmall, {}, 'HEAD');
      const bandwidth = delta(await snapshot(gw, ['arkvory_bandwidth_granted_bytes_total']), bandwidthBefore);
      // One download held open (its client does not read) takes the principal's only slot.
      const held = await new Promise<http.ClientRequest>((resolve, reject) => {
        const req = http.get(`${gw.url}${pathBig}`, { headers: auth(writerKey), agent: false }, (res) => {
          statuses.push(res.statusCode ?? 0);
          res.pause();
          resolve(req);
        });
        req.on('error', reject);
      });
      await get(pathSmall);
      held.destroy();
      await expect
        .poll(async () =>
          (await snapshot(gw, ['arkvory_admission_active'])).get('arkvory_admission_active{kind="download"}'),
        )
        .toBe(0);
      await get(pathSmall);
      await get(pathSmall);
      const counted = delta(await snapshot(gw, families), before);
      // The test's own scrapes of /metrics (their number depends on the poll above) pass the
      // gateway_request limiter as skipped health checks: taken out, the rest must match exactly.
      const scrapes = counted['arkvory_http_requests_total{method="GET",route="/metrics",status="200"}'] ?? 0;
      delete counted['arkvory_http_requests_total{method="GET",route="/metrics",status="200"}'];
      for (const k of [
        'arkvory_rate_limit_checks_total{limiter="gateway_request",action="allow",matched="true",error="false"}',
        'arkvory_rate_limit_rule_evaluations_total{limiter="gateway_request",rule="skip_health_checks",action="skip",result="skip"}',
      ])
        counted[k] = (counted[k] ?? 0) - scrapes;
      if (cacheOn) await waitForSliceFills(gw.url);
      const held_ = cacheOn ? await heldBlobs(cacheDir) : new Set<string>();
      await gw.stop();
      return { statuses, counted, bandwidth, held: held_ };
    };

    const on = await sequence(true);
    const off = await sequence(false);
    // The cache really served: the small blob's slices were on disk in the first run.
    expect(on.held.has(sha256(small))).toBe(true);
    expect(on.statuses).toEqual([200, 200, 206, 200, 200, '429 busy', '429 rate_limited', '429 rate_limited']);
    expect(off.statuses).toEqual(on.statuses);
    expect(off.counted).toEqual(on.counted);
    expect(Object.keys(on.counted).some((k) => k.startsWith('arkvory_admission_rejected_total'))).toBe(true);
    expect(off.bandwidth).toEqual(on.bandwidth);
    expect(Object.values(on.bandwidth)[0]).toBeGreaterThanOrEqual(2 * small.length + 5);
  });
});
