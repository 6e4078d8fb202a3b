/**
 * Scenario 3 (issue 24): reader2 is partitioned from the store host (silently, both ways) in the
 * middle of a download through the router. Expected: that download is cut (the store's silence
 * outlasts ARKVORY_STORAGE_TIMEOUT_SECONDS and the router destroys the client connection, never a
 * short body that looks complete); `curl -C - --retry` through the router resumes on a gateway that
 * reaches the store and ends with the exact file; the downloads on the other hosts are untouched.
 */
import { statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { curlOnClient, gatewayServing, MiB, readDownload, routerLineFor, sha256, startDeployment, waitUntil, type Deployment } from './deployment.ts';
import { heal, partition } from './netns.ts';

/** floor(rate / 4) = 256 KiB/s per gateway: the 4 MiB file takes 16 s on one gateway. */
const RATE = 4 * 256 * 1024;

let d: Deployment;

beforeAll(async () => {
  d = await startDeployment({
    policy: { slots: 4, rateBytesPerSec: RATE },
    fileBytes: 4 * MiB,
    // A silent store is given up after 3 s (default 30 s), a connect after 1 s.
    gatewayEnv: { ARKVORY_STORAGE_TIMEOUT_SECONDS: '3', ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: '1000' },
  });
}, 150_000);

afterAll(async () => {
  await d?.stop();
});

const fileSize = (name: string): number => {
  try {
    return statSync(path.join(d.downloads, name)).size;
  } catch {
    return 0;
  }
};

describe('reader2 partitioned from the store host mid-download', () => {
  it('cuts the download on reader2, which the client resumes with Range through the router to the exact file', async () => {
    const { topology } = d;
    const [reader1, reader2] = d.readers;
    const ids = ['s3-a', 's3-b', 's3-c'];
    const curls = ids.map((id) =>
      topology.spawn('client', `curl ${id}`, 'curl', ['-sS', '--fail', '-H', `Authorization: Bearer ${d.readKey}`, '-H', `X-Request-Id: ${id}`, '-o', path.join(d.downloads, id), `${d.routerUrl}${d.contentPath}`]),
    );
    await waitUntil('all three downloads to receive bytes', () => ids.every((id) => fileSize(id) > 0), 10_000, 50);
    partition(topology.hosts.reader2, topology.hosts.store);
    try {
      const codes = await Promise.all(curls.map((c) => c.exited));
      expect(codes.filter((c) => c === 0)).toHaveLength(2);
      const cut = ids[codes.findIndex((c) => c !== 0)]!;
      await waitUntil('every gateway to log its download', () => ids.every((id) => gatewayServing(d, [d.writer, reader1, reader2], id) !== undefined), 5000, 50);
      expect(gatewayServing(d, [d.writer, reader1, reader2], cut)).toBe(reader2);
      for (const id of ids.filter((i) => i !== cut)) expect(sha256(readDownload(d, id))).toBe(sha256(d.file));
      expect(await routerLineFor(d, cut)).toMatchObject({ backend: reader2.url, completed: false });
      expect(fileSize(cut)).toBeLessThan(d.file.length);

      // reader2 still passes its health probe (its lease is fine), so a resume may land on it and
      // get 504 upstream_timeout; curl --retry treats that as transient and resumes again.
      const resumed = await curlOnClient(d, ['--fail', '-C', '-', '--retry', '6', '--retry-delay', '1', '-H', 'X-Request-Id: s3-resume', '-o', path.join(d.downloads, cut), `${d.routerUrl}${d.contentPath}`], 90_000);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(sha256(readDownload(d, cut))).toBe(sha256(d.file));
      await waitUntil('the resume to be logged', () => d.router.logLines().some((l) => l.msg === 'request' && l.reqId === 's3-resume' && l.status === 206), 5000, 50);
      const served = d.router.logLines().filter((l) => l.msg === 'request' && l.reqId === 's3-resume' && l.status === 206);
      expect(served).toHaveLength(1);
      expect(served[0]).toMatchObject({ completed: true });
      expect(served[0]!.backend).not.toBe(reader2.url);
      // Whatever reached reader2 meanwhile was refused as the store's fault, never served short.
      for (const line of d.router.logLines().filter((l) => l.msg === 'request' && l.reqId === 's3-resume' && l.backend === reader2.url)) expect(line.status).toBe(504);
    } finally {
      heal(topology.hosts.reader2, topology.hosts.store);
    }
    // Healed, reader2 serves exact bytes again.
    const again = await fetch(`${reader2.url}${d.contentPath}`, { headers: { authorization: `Bearer ${d.readKey}`, range: 'bytes=0-65535' } });
    expect(again.status).toBe(206);
    expect(Buffer.from(await again.arrayBuffer()).equals(d.file.subarray(0, 65536))).toBe(true);
  }, 150_000);
});
