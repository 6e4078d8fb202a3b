/**
 * Reads across hosts, on one deployment (issue 24, scenarios 1, 4 and 3 in that order): the writer,
 * reader1 and reader2 on their own hosts share 3 slots of a global and a per-principal budget; the
 * client host reads through the router host with curl.
 *
 * 1. Reads spread over the three gateways, byte-exact.
 * 4. One principal on all three at once never gets more than P × t + B over any interval, where P is
 *    the per-principal budget and B the sum of the three buckets' bursts. Granted bytes are read from
 *    each gateway's `arkvory_bandwidth_granted_bytes_total{direction="download"}`; a counter was read
 *    somewhere between sending a scrape and its answer, so the interval between samples i < j is
 *    taken as [start_i, end_j], which only widens it.
 * 3. reader2 partitioned from the store host mid-download (silently, both ways): that download is cut
 *    (the store's silence outlasts ARKVORY_STORAGE_TIMEOUT_SECONDS and the router destroys the client
 *    connection, never a short body that looks complete); `curl -C - --retry` through the router
 *    resumes on a gateway that reaches the store and ends with the exact file.
 * Then a process pause: reader1 SIGSTOPped longer than its permit leaves the router pool, reads go
 * on elsewhere, and once continued it fences instead of serving.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { burstBytes } from '../../policy/bandwidth/token-bucket.ts';
import {
  curlOnClient,
  downloadedSize,
  downloadOnClient,
  fetchOnClient,
  gatewayServing,
  MiB,
  readDownload,
  resumeThroughRouter,
  routerHealthy,
  routerLineFor,
  sha256,
  startOnePerGateway,
} from './deployment.ts';
import { useDeployment } from './use-deployment.ts';
import { waitUntil } from '../harness/index.ts';
import { heal, partition } from './netns.ts';
import type { Gateway } from './topology.ts';

const SLOTS = 3;
const RATE = SLOTS * MiB;
/** One principal: the per-principal budget binds (P < rate); each gateway grants it 256 KiB/s. */
const PER_PRINCIPAL = SLOTS * 256 * 1024;
const SHARE = Math.floor(PER_PRINCIPAL / SLOTS);
const GLOBAL_BURST = SLOTS * burstBytes(SHARE);
const WINDOW_S = 6;

const d = useDeployment({
  policy: { slots: SLOTS, rateBytesPerSec: RATE, perPrincipalBytesPerSec: PER_PRINCIPAL },
  // 4 MiB at 256 KiB/s: 16 s on one gateway, so a fault lands mid-download.
  fileBytes: 4 * MiB,
  // A silent store is given up after 3 s (default 30 s), a connect after 1 s.
  gatewayEnv: { ARKVORY_STORAGE_TIMEOUT_SECONDS: '3', ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: '1000' },
});

const fileSize = (name: string): number => downloadedSize(d, name);

describe('scenario 1: reads through the router across hosts', () => {
  it('spreads nine sequential downloads 3/3/3 over writer, reader1 and reader2, all byte-exact', async () => {
    const small = randomBytes(96 * 1024 + 17);
    const put = await fetch(`${d.writer.url}/api/v1/repositories/shared/artifacts/small.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${d.writeKey}`, 'content-type': 'application/octet-stream' },
      body: small,
    });
    expect(put.status).toBe(201);
    const served = new Map<string, number>();
    for (let i = 0; i < 9; i++) {
      const id = `s1-${i}`;
      const res = await fetchOnClient(d, id, [], '/api/v1/repositories/shared/artifacts/small.bin/content');
      expect(res.code, res.stderr).toBe(0);
      expect(sha256(readDownload(d, id))).toBe(sha256(small));
      const line = await routerLineFor(d, id);
      expect(line).toMatchObject({ status: 200, completed: true, attempts: 1 });
      served.set(String(line.backend), (served.get(String(line.backend)) ?? 0) + 1);
    }
    expect(Object.fromEntries(served)).toEqual({ [d.writer.url]: 3, [d.readers[0].url]: 3, [d.readers[1].url]: 3 });
  });

  it('serves a Range through the router byte-exact, whichever host answers', async () => {
    const from = d.file.length - 100_000;
    const res = await curlOnClient(d, [
      '--fail',
      '-r',
      `${from}-`,
      '-o',
      path.join(d.downloads, 'range'),
      `${d.routerUrl}${d.contentPath}`,
    ]);
    expect(res.code, res.stderr).toBe(0);
    expect(readDownload(d, 'range').equals(d.file.subarray(from))).toBe(true);
  });
});

async function grantedBytes(gateway: Gateway): Promise<number> {
  const text = await (await fetch(`${gateway.url}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
  const match = /^arkvory_bandwidth_granted_bytes_total\{direction="download"\} (\d+)/m.exec(text);
  if (!match) throw new Error(`no download counter in ${gateway.url}/metrics`);
  return Number(match[1]);
}

describe('scenario 4: one principal on three gateways on three hosts', () => {
  it('never gets more than P × t + B over any interval, and does use its budget', async () => {
    const gateways = [d.writer, ...d.readers];
    const ids = Array.from({ length: 6 }, (_, i) => `s4-${i}`);
    const curls = ids.map((id) => downloadOnClient(d, id, ['--max-time', String(WINDOW_S + 2)]));
    const samples: Array<{ startMs: number; endMs: number; bytes: number }> = [];
    const until = performance.now() + WINDOW_S * 1000;
    while (performance.now() < until) {
      const startMs = performance.now();
      const counts = await Promise.all(gateways.map(grantedBytes));
      samples.push({ startMs, endMs: performance.now(), bytes: counts.reduce((a, b) => a + b, 0) });
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all(curls.map((c) => c.exited));
    // The router spread the six downloads over all three gateways.
    await waitUntil(() => ids.every((id) => gatewayServing(d, gateways, id) !== undefined), {
      what: 'every gateway to log its downloads',
      timeoutMs: 5000,
      intervalMs: 50,
    });
    expect(new Set(ids.map((id) => gatewayServing(d, gateways, id)?.host.name)).size).toBe(3);

    for (let i = 0; i < samples.length; i++) {
      for (let j = i + 1; j < samples.length; j++) {
        const a = samples[i]!;
        const b = samples[j]!;
        const bound = (PER_PRINCIPAL * (b.endMs - a.startMs)) / 1000 + GLOBAL_BURST;
        expect(b.bytes - a.bytes, `interval ${i}..${j}`).toBeLessThanOrEqual(bound);
      }
    }
    const first = samples[0]!;
    const last = samples[samples.length - 1]!;
    const usedPerSecond = ((last.bytes - first.bytes) * 1000) / (last.startMs - first.endMs);
    // The budget is actually used (loosely: a loaded machine may lag), so the bound is not vacuous.
    expect(usedPerSecond).toBeGreaterThan(PER_PRINCIPAL * 0.5);
  }, 90_000);
});

describe('scenario 3: reader2 partitioned from the store host mid-download', () => {
  it('cuts the download on reader2, which the client resumes with Range through the router to the exact file', async () => {
    const { topology } = d;
    const [reader1, reader2] = d.readers;
    const { ids, curls } = await startOnePerGateway(d, 's3');
    partition(topology.hosts.reader2, topology.hosts.store);
    try {
      const codes = await Promise.all(curls.map((c) => c.exited));
      // Which gateway served each download and what the router saw, should one not be cut.
      const outcome = () =>
        JSON.stringify({
          codes,
          served: ids.map((id) => gatewayServing(d, [d.writer, reader1, reader2], id)?.host.name),
          pool: d.router.logLines().filter((l) => /pool|store/.test(String(l.msg))),
        });
      expect(
        codes.filter((c) => c === 0),
        outcome(),
      ).toHaveLength(2);
      const cut = ids[codes.findIndex((c) => c !== 0)]!;
      await waitUntil(() => ids.every((id) => gatewayServing(d, [d.writer, reader1, reader2], id) !== undefined), {
        what: 'every gateway to log its download',
        timeoutMs: 5000,
        intervalMs: 50,
      });
      expect(gatewayServing(d, [d.writer, reader1, reader2], cut)).toBe(reader2);
      for (const id of ids.filter((i) => i !== cut)) expect(sha256(readDownload(d, id))).toBe(sha256(d.file));
      expect(await routerLineFor(d, cut)).toMatchObject({ backend: reader2.url, completed: false });
      expect(fileSize(cut)).toBeLessThan(d.file.length);

      // reader2 still passes its health probe (its lease is fine); until its store probe has failed
      // twice and the router read that (docs/router.md, "Store health"), a resume may land on it and
      // get 504 upstream_timeout, which the router retries elsewhere; curl --retry covers the rest.
      const resumed = await resumeThroughRouter(d, cut, 's3-resume', {
        curlOptions: ['--retry', '6', '--retry-delay', '1'],
        timeoutMs: 90_000,
      });
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(sha256(readDownload(d, cut))).toBe(sha256(d.file));
      await waitUntil(
        () => d.router.logLines().some((l) => l.msg === 'request' && l.clientReqId === 's3-resume' && l.status === 206),
        { what: 'the resume to be logged', timeoutMs: 5000, intervalMs: 50 },
      );
      const served = d.router
        .logLines()
        .filter((l) => l.msg === 'request' && l.clientReqId === 's3-resume' && l.status === 206);
      expect(served).toHaveLength(1);
      expect(served[0]).toMatchObject({ completed: true });
      expect(served[0]!.backend).not.toBe(reader2.url);
      // Whatever reached reader2 meanwhile was refused as the store's fault, never served short.
      for (const line of d.router
        .logLines()
        .filter((l) => l.msg === 'request' && l.clientReqId === 's3-resume' && l.backend === reader2.url))
        expect(line.status).toBe(504);
    } finally {
      heal(topology.hosts.reader2, topology.hosts.store);
    }
    // Healed, reader2 serves exact bytes again once two store probes in a row passed (until then it
    // answers 503 store_unreachable at once).
    await waitUntil(
      async () => {
        const res = await fetch(`${reader2.url}/health/status`);
        return ((await res.json()) as { store: { state: string } }).store.state !== 'unreachable';
      },
      { what: "reader2's store to be reachable again", timeoutMs: 15_000 },
    );
    const again = await fetch(`${reader2.url}${d.contentPath}`, {
      headers: { authorization: `Bearer ${d.readKey}`, range: 'bytes=0-65535' },
    });
    expect(again.status).toBe(206);
    expect(Buffer.from(await again.arrayBuffer()).equals(d.file.subarray(0, 65536))).toBe(true);
  }, 150_000);
});

describe('a paused reader (SIGSTOP longer than its permit)', () => {
  it('leaves the router pool, reads go on elsewhere, and once continued it fences instead of serving', async () => {
    const [reader1] = d.readers;
    const PROBE_MS = 1000;
    const stoppedAtMs = Date.now();
    reader1.signal('SIGSTOP');
    try {
      // A process that answers nothing fails its probe (no answer within 0.9 interval).
      await waitUntil(
        () =>
          d.router
            .logLines()
            .some(
              (l) =>
                l.msg === 'gateway left the pool' &&
                l.backend === reader1.url &&
                Date.parse(String(l.time)) >= stoppedAtMs,
            ),
        { what: 'the router to drop the paused reader', timeoutMs: 2 * PROBE_MS + 5000, intervalMs: 50 },
      );
      for (let i = 0; i < 3; i++) {
        const id = `pause-${i}`;
        const res = await fetchOnClient(d, id, ['-r', '0-99999']);
        expect(res.code, res.stderr).toBe(0);
        expect(readDownload(d, id).equals(d.file.subarray(0, 100_000))).toBe(true);
        expect((await routerLineFor(d, id)).backend).not.toBe(reader1.url);
      }
      // Paused past its 8 s permit (counted from a renewal before the pause).
      await new Promise((r) => setTimeout(r, Math.max(0, stoppedAtMs + 9000 - Date.now())));
    } finally {
      reader1.signal('SIGCONT');
    }
    // Continued, it finds its permit over: it fences, never serves again, and stays out of the pool.
    await waitUntil(() => reader1.logLines().some((l) => String(l.msg).startsWith('fenced:')), {
      what: 'the continued reader to fence',
      timeoutMs: 10_000,
      intervalMs: 50,
    });
    expect((await fetch(`${reader1.url}/health/status`)).status).toBe(503);
    const refused = await fetch(`${reader1.url}${d.contentPath}`, {
      headers: { authorization: `Bearer ${d.readKey}` },
    });
    expect([refused.status, ((await refused.json()) as { code: string }).code]).toEqual([503, 'lease_lost']);
    expect((await routerHealthy(d.routerUrl)).healthy).toBe(2);
  }, 60_000);
});
