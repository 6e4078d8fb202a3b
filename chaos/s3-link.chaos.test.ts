/**
 * Fault: the gateway's link to its S3 server (SeaweedFS, then MinIO) goes through toxiproxy.
 * - Cut mid-download (the link slowed by a bandwidth toxic, then disabled). Expected: the client's
 *   response ends short of Content-Length (never a complete-looking short 200). Recovery: link back,
 *   a `Range` request for the rest completes the file to the exact bytes.
 * - Cut mid-upload. Expected: 502 `upstream_unreachable` (or 504), no catalog row, no blob.
 *   Recovery: link back, `arkvory gc` leaves no temporary object and no open multipart upload.
 * - The store's answers trickled (a slicer toxic: a byte every 50 ms, never silent for the storage
 *   timeout). Expected: a range read over a socket of its own fails with 504 `upstream_timeout` once
 *   the storage timeout passed without a whole response head, not half a minute later with a 206.
 * - The S3 server gone when the gateway starts (its endpoint refuses connections: the link is
 *   disabled, toxiproxy then closes its listening port, which the gateway cannot tell from a stopped
 *   server). Expected: exit 1 before listening, with the store error naming the endpoint (systemd's
 *   `Restart=on-failure` retries, as documented). Recovery: endpoint back, the same gateway starts
 *   and serves.
 * The S3 server is the run's shared one of each kind, on a fresh bucket (test/support/shared-s3.ts):
 * it is never stopped, since other test files use it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { randomContent, request, sha256 } from '../test/support/content.ts';
import { runCli, startGateway } from '../test/support/gateway.ts';
import { listKeys } from '../test/support/s3-server.ts';
import { S3_STORE_KINDS } from '../test/support/store-kinds.ts';
import { call, startDownload } from './support/gateways.ts';
import { setEnabled } from './support/shared-cluster.ts';
import { addToxic } from './support/toxiproxy.ts';
import { waitForHealth, waitUntil } from '../test/harness/index.ts';
import { useS3Link } from './support/s3-link.ts';

const MiB = 1024 * 1024;

describe.each(S3_STORE_KINDS)('the gateway↔S3 link on %s', (kind) => {
  const s3 = useS3Link(kind);

  it('cut mid-download: the response ends short; a Range request after the link returns completes the exact bytes', async () => {
    const gw = await startGateway({ env: s3.env(), timeoutMs: 60_000 });
    const file = randomContent(24 * MiB);
    const url = `${gw.url}/api/v1/repositories/chaos/artifacts/download.bin`;
    expect((await call(url, { method: 'PUT', key: s3.key, body: file })).status).toBe(201);

    // About 4 MiB/s from the store, so the download is surely in flight when the link goes.
    const slow = await addToxic(s3.link, 'bandwidth', 'downstream', { rate: 4096 }, 'slow-store');
    const download = await startDownload(`${url}/content`, { authorization: `Bearer ${s3.key}` });
    expect(download.status).toBe(200);
    await waitUntil(() => download.receivedBytes() >= 2 * MiB, {
      timeoutMs: 30_000,
      intervalMs: 20,
      what: '2 MiB of the download',
    });
    await setEnabled(s3.link, false);
    const ended = await download.ended;
    expect(ended.complete).toBe(false);
    const have = download.receivedBytes();
    expect(have).toBeLessThan(file.length);
    expect(download.received().equals(file.subarray(0, have))).toBe(true);

    await slow.remove();
    await setEnabled(s3.link, true);
    const resume = () => call(`${url}/content`, { key: s3.key, headers: { range: `bytes=${have}-` } });
    // Had the probes found the store unreachable while the link was down, the gateway answers 503
    // `store_unreachable` with Retry-After until two probes pass (docs/router.md, "Store health"):
    // a client retries, as this does.
    let rest = await resume();
    for (const deadline = Date.now() + 30_000; rest.status === 503 && Date.now() < deadline; rest = await resume()) {
      expect(rest.code).toBe('store_unreachable');
      expect(rest.headers['retry-after']).toBeDefined();
      await sleep(200);
    }
    expect(rest.status).toBe(206);
    expect(rest.headers['content-range']).toBe(`bytes ${have}-${file.length - 1}/${file.length}`);
    expect(sha256(Buffer.concat([download.received(), rest.body]))).toBe(sha256(file));
    expect(await gw.stop('SIGTERM')).toBe(0);
    expect(gw.logs()).not.toMatch(/unhandled|uncaught/i);
  }, 180_000);

  it('cut mid-upload: a clear 5xx, nothing published; after the link returns gc leaves no temporary object', async () => {
    const gw = await startGateway({ env: s3.env(), timeoutMs: 60_000 });
    const file = randomContent(24 * MiB);
    const url = `${gw.url}/api/v1/repositories/chaos/artifacts/upload.bin`;
    let sent = 0;
    async function* body() {
      for (let offset = 0; offset < file.length; offset += MiB) {
        if (offset === 6 * MiB) await setEnabled(s3.link, false);
        sent += MiB;
        yield file.subarray(offset, offset + MiB);
      }
    }
    const put = await request(url, {
      method: 'PUT',
      headers: { authorization: `Bearer ${s3.key}`, 'content-length': String(file.length) },
      body: body(),
    }).catch((err: Error) => ({ status: -1, body: Buffer.from(err.message), headers: {} }));
    // The answer may come before the client finished sending (then the socket may close under it).
    if (put.status !== -1) {
      expect([502, 504]).toContain(put.status);
      expect(JSON.parse(put.body.toString()).code).toMatch(/^upstream_(unreachable|timeout)$/);
    }
    expect(sent).toBeGreaterThan(6 * MiB - 1);
    expect((await s3.db.pool.query(`SELECT 1 FROM arkvory_artifacts WHERE name = 'upload.bin'`)).rowCount).toBe(0);
    await setEnabled(s3.link, true);
    expect(await listKeys(s3.server, 'blobs/')).not.toContainEqual(expect.stringContaining(sha256(file)));
    expect(await gw.stop('SIGTERM')).toBe(0);
    expect(gw.logs()).not.toMatch(/unhandled|uncaught/i);

    const gc = await runCli(['gc'], { ...s3.env(), ARKVORY_DATA_DIR: gw.dataDir });
    expect(gc.code, gc.stderr).toBe(0);
    expect(await listKeys(s3.server, 'tmp/')).toEqual([]);
    const open: string[] = [];
    for await (const upload of s3.server.client().listMultipartUploads('')) open.push(upload.key);
    expect(open).toEqual([]);
  }, 180_000);

  it('the S3 server gone at start: exit 1 before listening with the store error; starts once the server is back', async () => {
    await setEnabled(s3.link, false);
    try {
      const gw = await startGateway({ env: s3.env(), waitFor: 'none', timeoutMs: 60_000 });
      expect(await gw.exited).toBe(1);
      expect(gw.logs()).toMatch(/upstream_unreachable|could not be reached|S3 server/);
      expect(gw.logs()).not.toContain(s3.server.secretAccessKey);
    } finally {
      await setEnabled(s3.link, true);
    }
    const gw = await startGateway({ env: s3.env(), timeoutMs: 60_000 });
    await waitForHealth(gw, { timeoutMs: 60_000 });
    expect(
      (
        await call(`${gw.url}/api/v1/repositories/chaos/artifacts/download.bin/content`, {
          key: s3.key,
          headers: { range: 'bytes=0-9' },
        })
      ).status,
    ).toBe(206);
    expect(await gw.stop('SIGTERM')).toBe(0);
  }, 180_000);

  it('answers trickled a byte at a time: a large range read is 504 upstream_timeout once the storage timeout passed without its head', async () => {
    const gw = await startGateway({ env: s3.env(), timeoutMs: 60_000 });
    const file = randomContent(3 * MiB);
    const url = `${gw.url}/api/v1/repositories/chaos/artifacts/trickled.bin`;
    expect((await call(url, { method: 'PUT', key: s3.key, body: file })).status).toBe(201);
    // About 20 bytes a second from the store: a response head of some hundred bytes takes half a
    // minute, and no gap comes near the 5 s storage timeout.
    const trickle = await addToxic(
      s3.link,
      'slicer',
      'downstream',
      { average_size: 1, size_variation: 0, delay: 50_000 },
      'trickle',
    );
    try {
      const started = performance.now();
      const read = await call(`${url}/content`, { key: s3.key, headers: { range: `bytes=0-${2 * MiB - 1}` } });
      expect(read.status).toBe(504);
      expect(read.code).toBe('upstream_timeout');
      // Two storage timeouts of margin for a loaded machine; the head alone would take six.
      expect(performance.now() - started).toBeLessThan(15_000);
    } finally {
      await trickle.remove();
    }
    expect(await gw.stop('SIGTERM')).toBe(0);
  }, 180_000);
});
