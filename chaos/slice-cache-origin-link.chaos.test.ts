/**
 * Fault: the link between a gateway's slice cache and its S3 server (SeaweedFS) goes through
 * toxiproxy while slices are being filled, with two readers on the same blob (one started the
 * fills, the other waits on them). The cache logic is the same for every remote store; one S3
 * server stands for all. Slices are 1 MiB and blobs 16 MiB, enough for fills in flight at any moment.
 * - Cut mid-fill (the link slowed, then disabled). Expected: both responses end short of
 *   Content-Length with only right bytes received (a clean error to the client, never a complete
 *   wrong body). Recovery: nothing half-filled was kept (tmp/ empty, every slice on disk is exactly
 *   its bytes), and once the link is back a full GET is byte-exact and leaves every slice cached.
 * - Slowed mid-fill (a latency toxic added while the fills run, below the store timeout). Expected:
 *   both readers' streams go on and complete byte-exact. Recovery: none needed; the slices kept are exact.
 */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { randomContent, sha256 } from '../test/support/content.ts';
import { makeTempDir, startGateway } from '../test/support/gateway.ts';
import { waitForSliceFills, waitForStoreOk, waitUntil } from '../test/harness/index.ts';
import { call, startDownload } from './support/gateways.ts';
import { setEnabled } from './support/shared-cluster.ts';
import { addLatency, addToxic } from './support/toxiproxy.ts';
import { useS3Link } from './support/s3-link.ts';

const MiB = 1024 * 1024;
const SLICE = MiB;

/** Every slice file under the cache directory, by name (`<sha256>-<sliceBytes>-<index>`). */
async function sliceFiles(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const shard of await readdir(path.join(dir, 'slices')).catch(() => []))
    for (const f of await readdir(path.join(dir, 'slices', shard))) out.set(f, path.join(dir, 'slices', shard, f));
  return out;
}

/** Every slice kept on disk holds exactly its bytes of `blob`. */
async function expectKeptSlicesExact(dir: string, blob: Buffer): Promise<number> {
  let n = 0;
  for (const [name, file] of await sliceFiles(dir)) {
    const index = Number(name.split('-')[2]);
    const bytes = await readFile(file);
    expect(bytes.equals(blob.subarray(index * SLICE, (index + 1) * SLICE)), `slice ${index} on disk`).toBe(true);
    n++;
  }
  return n;
}

describe('the slice cache↔S3 link (seaweedfs)', () => {
  const s3 = useS3Link('seaweedfs');
  const env = (cacheDir: string) => ({
    ...s3.env(),
    ARKVORY_CACHE_DIR: cacheDir,
    ARKVORY_CACHE_SLICE_BYTES: String(SLICE),
    ARKVORY_CACHE_MIN_FREE_BYTES: '0',
    ARKVORY_BLOB_CACHE_BYTES: '0',
  });

  /**
   * A gateway with a fresh slice cache and a 16 MiB blob published as `name`; then the store link is
   * slowed to `kbPerSec` and two readers start on the blob (the filler, and the waiter on its fills).
   */
  async function twoReadersThroughSlowLink(name: string, kbPerSec: number) {
    const cacheDir = await makeTempDir('arkvory-chaos-slices-');
    const gw = await startGateway({ env: env(cacheDir), timeoutMs: 60_000 });
    const blob = randomContent(16 * MiB);
    const url = `${gw.url}/api/v1/repositories/chaos/artifacts/${name}`;
    expect((await call(url, { method: 'PUT', key: s3.key, body: blob })).status).toBe(201);
    const slow = await addToxic(s3.link, 'bandwidth', 'downstream', { rate: kbPerSec }, 'slow-store');
    const filler = await startDownload(`${url}/content`, { authorization: `Bearer ${s3.key}` });
    const waiter = await startDownload(`${url}/content`, { authorization: `Bearer ${s3.key}` });
    return { cacheDir, gw, blob, url, slow, filler, waiter };
  }

  it('cut mid-fill: filler and waiter are cut with only right bytes; nothing half-filled is kept; a GET after the link returns is exact', async () => {
    // About 4 MiB/s from the store, so fills are surely in flight when the link goes.
    const { cacheDir, gw, blob, url, slow, filler, waiter } = await twoReadersThroughSlowLink('cut.bin', 4096);
    expect([filler.status, waiter.status]).toEqual([200, 200]);
    await waitUntil(() => filler.receivedBytes() >= 2 * MiB, { timeoutMs: 30_000, intervalMs: 20, what: '2 MiB' });
    await setEnabled(s3.link, false);
    for (const d of [filler, waiter]) {
      expect((await d.ended).complete).toBe(false);
      const got = d.received();
      expect(got.length).toBeLessThan(blob.length);
      expect(got.equals(blob.subarray(0, got.length))).toBe(true);
    }
    // The failed fills discard their temporaries; what was kept had been verified whole.
    await waitUntil(async () => (await readdir(path.join(cacheDir, 'tmp'))).length === 0, {
      timeoutMs: 10_000,
      intervalMs: 50,
      what: 'tmp/ to be empty',
    });
    const keptBefore = await expectKeptSlicesExact(cacheDir, blob);
    expect(keptBefore).toBeLessThan(16);

    await slow.remove();
    await setEnabled(s3.link, true);
    // The gateway takes reads again once its store probe passed twice (store health's hysteresis).
    await waitForStoreOk(gw.url);
    const again = await call(`${url}/content`, { key: s3.key });
    expect(again.status).toBe(200);
    expect(sha256(again.body)).toBe(sha256(blob));
    // The last slices are kept once verified, which may end just after the response does.
    await waitForSliceFills(gw.url);
    expect(await expectKeptSlicesExact(cacheDir, blob)).toBe(16);
    expect(await gw.stop('SIGTERM')).toBe(0);
    expect(gw.logs()).not.toMatch(/unhandled|uncaught/i);
  }, 180_000);

  it('slowed mid-fill: filler and waiter streams go on and complete byte-exact', async () => {
    const { cacheDir, gw, blob, slow, filler, waiter } = await twoReadersThroughSlowLink('slow.bin', 8192);
    await waitUntil(() => filler.receivedBytes() >= 2 * MiB, { timeoutMs: 30_000, intervalMs: 20, what: '2 MiB' });
    // Mid-fill, every byte from the store now also waits 300 ms (well under the 5 s store timeout).
    const latency = await addLatency(s3.link, { name: 'late-store', stream: 'downstream', latencyMs: 300 });
    for (const d of [filler, waiter]) {
      expect((await d.ended).complete).toBe(true);
      expect(sha256(d.received())).toBe(sha256(blob));
    }
    await latency.remove();
    await slow.remove();
    await waitForSliceFills(gw.url);
    expect(await readdir(path.join(cacheDir, 'tmp'))).toEqual([]);
    expect(await expectKeptSlicesExact(cacheDir, blob)).toBe(16);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    // One origin copy of the blob for two readers.
    const origin = Number(/^arkvory_slice_cache_origin_bytes_total (\d+)/m.exec(metrics)?.[1]);
    expect(origin).toBe(blob.length);
    expect(await gw.stop('SIGTERM')).toBe(0);
  }, 180_000);
});
