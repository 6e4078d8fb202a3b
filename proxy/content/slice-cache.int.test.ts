/**
 * The slice cache in front of each remote store (nginx WebDAV, SeaweedFS, MinIO), over real
 * sockets: a gateway process whose store link runs through a counting relay, so the origin's
 * traffic is measured on the wire. Slices are 1 MiB here (ARKVORY_CACHE_SLICE_BYTES; 64 KiB for the
 * crowd of readers) so a few MiB cover many slices; the small-blob cache is off so every read reaches
 * the slice cache.
 */
import { readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { startCountingLink, type CountingLink } from '../../test/support/counting-link.ts';
import { parseMultipart, randomContent, request, requestDigest, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { isS3Kind, startStoreBacking, STORE_KINDS, type StoreBacking } from '../../test/support/store-kinds.ts';
import { waitForSliceFills, waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
const SLICE = MiB;
const REMOTE_KINDS = STORE_KINDS.filter((k) => k.kind !== 'fs');

/** Slack for response heads on the origin link (a few hundred bytes per ranged GET). */
const HEADS = 64 * 1024;

async function files(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const shard of await readdir(path.join(dir, 'slices')).catch(() => [])) {
    for (const f of await readdir(path.join(dir, 'slices', shard))) out.push(path.join(dir, 'slices', shard, f));
  }
  return out;
}

describe.each(REMOTE_KINDS)('slice cache in front of $server', ({ kind }) => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let link: CountingLink;
  let key: string;
  let cacheDir: string;

  const env = (extra: Record<string, string> = {}) => {
    const base: Record<string, string> = { ARKVORY_DATABASE_URL: db.url, ...backing.env };
    if (isS3Kind(kind)) base.ARKVORY_S3_ENDPOINT = `http://${link.host}:${link.port}`;
    else {
      const u = new URL(backing.nginx!.url);
      u.host = `${link.host}:${link.port}`;
      base.ARKVORY_STORAGE_URL = u.toString();
    }
    return {
      ...base,
      ARKVORY_CACHE_DIR: cacheDir,
      ARKVORY_CACHE_SLICE_BYTES: String(SLICE),
      ARKVORY_CACHE_MIN_FREE_BYTES: '0',
      ARKVORY_BLOB_CACHE_BYTES: '0',
      // The store probe's GET of storage-id would pass the counting link at random moments.
      ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS: '60000',
      ...extra,
    };
  };

  beforeAll(async () => {
    backing = await startStoreBacking(kind);
    const port = isS3Kind(kind) ? backing.s3!.port : backing.nginx!.port;
    link = await startCountingLink({ host: '127.0.0.1', port });
    await createRepository(db.pool, 'cache');
    ({ key } = await createServiceAccount(db.pool, { grants: { cache: 'write' } }));
  });
  afterAll(async () => {
    await backing?.stop();
  });

  const auth = () => ({ authorization: `Bearer ${key}` });
  async function upload(gw: GatewayProcess, name: string, bytes: Buffer): Promise<string> {
    const url = `${gw.url}/api/v1/repositories/cache/artifacts/${name}`;
    const res = await request(url, { method: 'PUT', headers: auth(), body: bytes });
    expect(res.status).toBe(201);
    return `${url}/content`;
  }

  it('records slice digests at publish; range, multi-range and full reads are byte-exact cold, half-warm and warm, and pull only the slices they cover', async () => {
    cacheDir = await makeTempDir('arkvory-slice-cache-');
    const gw = await startGateway({ env: env() });
    const blob = randomContent(10 * MiB + 12345);
    const url = await upload(gw, 'ten.bin', blob);
    const row = await db.pool.query<{ slice_bytes: number; n: number }>(
      'SELECT slice_bytes, octet_length(digests) / 32 AS n FROM arkvory_blob_slices WHERE sha256 = $1',
      [sha256(blob)],
    );
    expect(row.rows[0]).toEqual({ slice_bytes: SLICE, n: 11 });

    // Cold 1 MiB range straddling slices 3 and 4: exactly those two slices from the origin.
    let before = link.fromOrigin();
    const start = 3 * MiB + MiB / 2;
    let res = await request(url, { headers: { ...auth(), range: `bytes=${start}-${start + MiB - 1}` } });
    expect(res.status).toBe(206);
    expect(res.body.equals(blob.subarray(start, start + MiB))).toBe(true);
    const pulled = link.fromOrigin() - before;
    expect(pulled).toBeGreaterThanOrEqual(2 * SLICE);
    expect(pulled).toBeLessThanOrEqual(2 * SLICE + HEADS);

    // Warm: the same range again costs the origin nothing.
    before = link.fromOrigin();
    res = await request(url, { headers: { ...auth(), range: `bytes=${start}-${start + MiB - 1}` } });
    expect(res.body.equals(blob.subarray(start, start + MiB))).toBe(true);
    expect(link.fromOrigin() - before).toBe(0);

    // Multi-range over a warm and a cold slice.
    before = link.fromOrigin();
    res = await request(url, {
      headers: { ...auth(), range: `bytes=10-99,${3 * MiB + 5}-${3 * MiB + 9},${8 * MiB}-${8 * MiB + 3}` },
    });
    expect(res.status).toBe(206);
    const parts = parseMultipart(res.body, String(res.headers['content-type']));
    expect(parts.map((p) => p.data)).toEqual([
      blob.subarray(10, 100),
      blob.subarray(3 * MiB + 5, 3 * MiB + 10),
      blob.subarray(8 * MiB, 8 * MiB + 4),
    ]);
    expect(link.fromOrigin() - before).toBeLessThanOrEqual(2 * SLICE + HEADS);

    // Half-warm full GET: byte-exact; the origin sends only the slices not yet held (11 - 4 = 7).
    before = link.fromOrigin();
    res = await request(url, { headers: auth() });
    expect(res.status).toBe(200);
    expect(sha256(res.body)).toBe(sha256(blob));
    const rest = link.fromOrigin() - before;
    expect(rest).toBeLessThanOrEqual(blob.length - 4 * SLICE + HEADS);
    expect(rest).toBeGreaterThanOrEqual(blob.length - 4 * SLICE - SLICE);

    // Warm full GET and HEAD: nothing from the origin.
    before = link.fromOrigin();
    res = await request(url, { headers: auth() });
    expect(sha256(res.body)).toBe(sha256(blob));
    const head = await request(url, { method: 'HEAD', headers: auth() });
    expect(head.headers['content-length']).toBe(String(blob.length));
    expect(link.fromOrigin() - before).toBe(0);
    await waitForSliceFills(gw.url);
    expect((await files(cacheDir)).length).toBe(11);
  });

  it('64 concurrent cold GETs of one object of 64 slices pull each slice from the origin about once', async () => {
    cacheDir = await makeTempDir('arkvory-slice-cache-');
    // The smallest slice the gateway takes: the crowd races for 64 slices, as it would for a 64 MiB
    // object of 1 MiB slices, with 1/16 of the bytes to move and hash 64 times.
    const crowdSlice = 64 * 1024;
    const gw = await startGateway({
      env: env({
        ARKVORY_CACHE_SLICE_BYTES: String(crowdSlice),
        ARKVORY_MAX_DOWNLOADS: '128',
        ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '128',
      }),
      timeoutMs: 60_000,
    });
    const blob = randomContent(64 * crowdSlice);
    const url = await upload(gw, 'crowd.bin', blob);
    const before = link.fromOrigin();
    const digests = await Promise.all(
      Array.from({ length: 64 }, async () => {
        const res = await requestDigest(url, auth());
        expect(res.status).toBe(200);
        return res.sha256;
      }),
    );
    expect(new Set(digests)).toEqual(new Set([sha256(blob)]));
    const pulled = link.fromOrigin() - before;
    expect(pulled).toBeLessThanOrEqual(1.05 * blob.length);
  }, 120_000);

  it('a slice damaged on local disk is never served: re-checked, removed, fetched again', async () => {
    cacheDir = await makeTempDir('arkvory-slice-cache-');
    const gw = await startGateway({ env: env() });
    const blob = randomContent(3 * MiB);
    const url = await upload(gw, 'disk.bin', blob);
    expect(sha256((await request(url, { headers: auth() })).body)).toBe(sha256(blob));
    await waitForSliceFills(gw.url);
    const [victim] = (await files(cacheDir)).sort();
    await writeFile(victim!, Buffer.alloc(SLICE, 0x41));
    const before = link.fromOrigin();
    const res = await request(url, { headers: auth() });
    expect(sha256(res.body)).toBe(sha256(blob));
    // Exactly the damaged slice came again.
    expect(link.fromOrigin() - before).toBeGreaterThanOrEqual(SLICE);
    expect(link.fromOrigin() - before).toBeLessThanOrEqual(SLICE + HEADS);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toMatch(/arkvory_slice_cache_digest_failures_total\{where="disk"\} 1/);
  });

  it('a slice changed at the origin behind the gateway is never served: 502 slice_digest_mismatch or a cut, never wrong bytes', async () => {
    cacheDir = await makeTempDir('arkvory-slice-cache-');
    const gw = await startGateway({ env: env() });
    const small = randomContent(300 * 1024);
    const smallUrl = await upload(gw, 'small.bin', small);
    const big = randomContent(3 * MiB);
    const bigUrl = await upload(gw, 'big.bin', big);
    const probe = backing.probe();
    const blobPath = (b: Buffer) => {
      const h = sha256(b);
      return `blobs/sha256/${h.slice(0, 2)}/${h.slice(2, 4)}/${h}`;
    };
    const tamper = (b: Buffer) => {
      const copy = Buffer.from(b);
      copy[copy.length - 7]! ^= 0xff;
      return copy;
    };
    await probe.write(blobPath(small), tamper(small));
    await probe.write(blobPath(big), tamper(big));

    // A small range waits for its slice's check: a clean 502 with the code.
    const res = await request(smallUrl, { headers: { ...auth(), range: 'bytes=0-1023' } });
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body.toString()).code).toBe('slice_digest_mismatch');

    // A large read streams while the slices fill: the response is cut before its end.
    const full = await fetch(bigUrl, { headers: auth() });
    expect(full.status).toBe(200);
    const got = await full
      .arrayBuffer()
      .then((b) => Buffer.from(b))
      .catch(() => undefined);
    if (got !== undefined) expect(got.equals(tamper(big))).toBe(false);
    if (got !== undefined) expect(got.length).toBeLessThan(big.length);
    // Nothing of the damaged slice was kept.
    await waitForSliceFills(gw.url);
    const kept = await files(cacheDir);
    expect(kept.filter((f) => f.endsWith(`${sha256(big)}-${SLICE}-2`))).toEqual([]);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toMatch(/arkvory_slice_cache_digest_failures_total\{where="origin"\} [1-9]/);
  });

  it('a store link reset mid-slice is read on from where it stopped: the client gets every byte, the slices are kept', async () => {
    cacheDir = await makeTempDir('arkvory-slice-cache-');
    const gw = await startGateway({ env: env() });
    const blob = randomContent(4 * MiB);
    const url = await upload(gw, 'reset.bin', blob);
    const connections = link.connections();
    link.cutOnceAfter(2 * SLICE + SLICE / 3);
    const res = await request(url, { headers: auth() });
    expect(res.status).toBe(200);
    expect(sha256(res.body)).toBe(sha256(blob));
    expect(link.connections() - connections).toBeGreaterThanOrEqual(2);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toMatch(/^arkvory_slice_cache_origin_resumes_total 1$/m);
    expect(
      gw.logLines().filter((l) => String(l.msg).startsWith("the artifact store's answer stopped mid-slice")),
    ).toHaveLength(1);
    await waitForSliceFills(gw.url);
    expect((await files(cacheDir)).filter((f) => path.basename(f).startsWith(sha256(blob)))).toHaveLength(4);
    // Warm: served from the kept slices, nothing more from the store.
    const before = link.fromOrigin();
    expect(sha256((await request(url, { headers: auth() })).body)).toBe(sha256(blob));
    expect(link.fromOrigin() - before).toBeLessThan(64 * 1024);
    await gw.stop();
  });

  it('evicts least recently used slices to stay under its bound', async () => {
    cacheDir = await makeTempDir('arkvory-slice-cache-');
    const gw = await startGateway({ env: env({ ARKVORY_CACHE_MAX_BYTES: String(4 * MiB) }) });
    const blobs = await Promise.all([0, 1, 2, 3].map(() => randomContent(3 * MiB)));
    const urls: string[] = [];
    for (const [i, b] of blobs.entries()) urls.push(await upload(gw, `e${i}.bin`, b));
    for (const [i, u] of urls.entries())
      expect(sha256((await request(u, { headers: auth() })).body)).toBe(sha256(blobs[i]!));
    await waitForSliceFills(gw.url);
    const held = await files(cacheDir);
    expect(held.length).toBeLessThanOrEqual(4);
    // The newest blob's slices are the ones kept.
    expect(held.filter((f) => path.basename(f).startsWith(sha256(blobs[3]!))).length).toBe(3);
  });

  it('a cache directory deleted while stopped, and a kill -9 mid-fill, are cold starts; nothing unverified is served', async () => {
    cacheDir = await makeTempDir('arkvory-slice-cache-');
    let gw = await startGateway({ env: env() });
    const blob = randomContent(6 * MiB);
    const url = await upload(gw, 'crash.bin', blob);
    // Mid-fill: the origin stops after a slice and a half, so the fills of the rest wait for its
    // bytes when the process is killed.
    const before = link.fromOrigin();
    link.holdAfter(SLICE + SLICE / 2);
    try {
      const download = await fetch(url, { headers: auth() });
      const reader = download.body!.getReader();
      await reader.read();
      await waitUntil(() => link.fromOrigin() - before >= SLICE + SLICE / 2, {
        what: 'a slice and a half from the origin',
      });
      await gw.stop('SIGKILL');
      expect(link.fromOrigin() - before).toBeLessThan(blob.length / 2);
      await reader.cancel().catch(() => {});
    } finally {
      link.release();
    }
    gw = await startGateway({ env: env() });
    // The fills the kill interrupted left only temporaries, removed at start.
    expect(await readdir(path.join(cacheDir, 'tmp'))).toEqual([]);
    const path_ = new URL(url).pathname;
    expect(sha256((await request(`${gw.url}${path_}`, { headers: auth() })).body)).toBe(sha256(blob));
    await gw.stop();
    await rm(cacheDir, { recursive: true, force: true });
    gw = await startGateway({ env: env() });
    expect(sha256((await request(`${gw.url}${path_}`, { headers: auth() })).body)).toBe(sha256(blob));
  });
});
