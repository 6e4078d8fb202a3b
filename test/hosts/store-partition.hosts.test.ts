import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logTimeMs } from '../../chaos/support/gateways.ts';
import {
  type Deployment,
  downloadedSize,
  downloadOnClient,
  gatewayServing,
  MiB,
  readDownload,
  resumeThroughRouter,
  routerLineFor,
  sha256,
  startDeployment,
} from './deployment.ts';
import { waitUntil } from '../harness/index.ts';
import { heal, partition } from './netns.ts';

const STORE_PROBE_MS = 500;
const ROUTER_PROBE_MS = 500;
const BOUND_MS = 2.9 * STORE_PROBE_MS + 1.9 * ROUTER_PROBE_MS;
/** Timers on a loaded 2-core machine run late; the bound is asserted with this much slack. */
const SLACK_MS = 1000;
const SLOTS = 3;

let d: Deployment;

beforeAll(async () => {
  d = await startDeployment({
    // 1 MiB/s per gateway: the 8 MiB file takes ~8 s, so the partition lands mid-download.
    policy: { slots: SLOTS, rateBytesPerSec: SLOTS * MiB },
    fileBytes: 8 * MiB,
    probeIntervalMs: ROUTER_PROBE_MS,
    gatewayEnv: {
      ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS: String(STORE_PROBE_MS),
      ARKVORY_STORAGE_TIMEOUT_SECONDS: '3',
      ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: '1000',
      // Every read goes to the store (no blob held in memory).
      ARKVORY_BLOB_CACHE_BYTES: '0',
    },
  });
}, 150_000);

afterAll(async () => {
  await d?.stop();
});

interface ClientRead {
  id: string;
  startedAtMs: number;
  status: number;
  /** What curl said when it got no answer (status 0), for the failure message. */
  error?: string;
}

/** Sequential small reads (64 KiB ranges) through the router until `stop()`; each one's status. */
function readLoop(prefix: string) {
  const reads: ClientRead[] = [];
  let stopped = false;
  const done = (async () => {
    for (let i = 0; !stopped; i++) {
      const id = `${prefix}-${i}`;
      const startedAtMs = Date.now();
      const res = await d.topology.run(
        'client',
        'curl',
        [
          '-sS',
          '-o',
          '/dev/null',
          '-w',
          '%{http_code}',
          '-H',
          `Authorization: Bearer ${d.readKey}`,
          '-H',
          `X-Request-Id: ${id}`,
          '-H',
          `Range: bytes=${(i * 65536) % (4 * MiB)}-${((i * 65536) % (4 * MiB)) + 65535}`,
          `${d.routerUrl}${d.contentPath}`,
        ],
        30_000,
      );
      const status = Number(res.stdout.trim()) || 0;
      reads.push(status === 0 ? { id, startedAtMs, status, error: res.stderr.trim() } : { id, startedAtMs, status });
    }
  })();
  return {
    reads,
    async stop() {
      stopped = true;
      await done;
    },
  };
}

const lineAfter = (
  lines: Array<Record<string, unknown>>,
  sinceMs: number,
  match: (l: Record<string, unknown>) => boolean,
) => lines.find((l) => logTimeMs(l) >= sinceMs && match(l));

/** The router's first log line after `afterMs` about `backend` whose message includes `text`. */
const routerSaid = (backend: string, afterMs: number, text: string) =>
  lineAfter(d.router.logLines(), afterMs, (l) => l.backend === backend && String(l.msg).includes(text));

describe('reader1 partitioned from the store host while clients download through the router', () => {
  it('leaves reads within the bound, no client 5xx, the cut download resumes elsewhere, and it returns after the heal', async () => {
    const { topology } = d;
    const [reader1, reader2] = d.readers;
    const gateways = [d.writer, reader1, reader2];
    const ids = ['sp-a', 'sp-b', 'sp-c'];
    const long = ids.map((id) => downloadOnClient(d, id));
    await waitUntil(() => ids.every((id) => downloadedSize(d, id) > 0), {
      what: 'all three downloads to receive bytes',
      timeoutMs: 10_000,
      intervalMs: 50,
    });
    const loop = readLoop('sp-read');

    const partitionedAt = Date.now();
    partition(topology.hosts.reader1, topology.hosts.store);
    let healedAt = 0;
    let routerSawAt = 0;
    try {
      await waitUntil(() => routerSaid(reader1.url, partitionedAt, 'store unreachable') !== undefined, {
        what: "the router to take reader1's reads away",
        timeoutMs: BOUND_MS + 10_000,
        intervalMs: 50,
      });
      const gatewaySaw = lineAfter(reader1.logLines(), partitionedAt, (l) =>
        String(l.msg).startsWith('store unreachable'),
      )!;
      const routerSaw = routerSaid(reader1.url, partitionedAt, 'store unreachable')!;
      const gatewayDetectMs = logTimeMs(gatewaySaw) - partitionedAt;
      routerSawAt = logTimeMs(routerSaw);
      const routerDetectMs = routerSawAt - partitionedAt;
      console.log(
        `[measured] detection: reader1 saw its store unreachable after ${gatewayDetectMs} ms (bound ${2.9 * STORE_PROBE_MS} ms), the router stopped its reads after ${routerDetectMs} ms (bound ${BOUND_MS} ms)`,
      );
      expect(gatewaySaw).toMatchObject({ code: expect.stringMatching(/^upstream_(timeout|unreachable)$/) });
      expect(routerDetectMs).toBeLessThanOrEqual(BOUND_MS + SLACK_MS);

      // The long download on reader1 is cut; the other two end complete and exact.
      const codes = await Promise.all(long.map((c) => c.exited));
      expect(codes.filter((c) => c === 0)).toHaveLength(2);
      const cut = ids[codes.findIndex((c) => c !== 0)]!;
      await waitUntil(() => ids.every((id) => gatewayServing(d, gateways, id)), {
        what: 'every gateway to log its download',
        timeoutMs: 10_000,
        intervalMs: 50,
      });
      expect(gatewayServing(d, gateways, cut)).toBe(reader1);
      for (const id of ids.filter((i) => i !== cut)) expect(sha256(readDownload(d, id))).toBe(sha256(d.file));
      expect(await routerLineFor(d, cut)).toMatchObject({ backend: reader1.url, completed: false });
      expect(downloadedSize(d, cut)).toBeLessThan(d.file.length);

      // Resumed through the router with Range: another gateway, the exact file, first try.
      const resumed = await resumeThroughRouter(d, cut, 'sp-resume', { timeoutMs: 60_000 });
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(sha256(readDownload(d, cut))).toBe(sha256(d.file));
      const resumeLine = await routerLineFor(d, 'sp-resume');
      expect(resumeLine).toMatchObject({ status: 206, completed: true });
      expect(resumeLine.backend).not.toBe(reader1.url);
      await waitUntil(() => loop.reads.filter((r) => r.startedAtMs > routerSawAt).length >= 6, {
        what: 'a few reads after the detection',
        timeoutMs: 30_000,
        intervalMs: 50,
      });
    } finally {
      healedAt = Date.now();
      heal(topology.hosts.reader1, topology.hosts.store);
    }

    await waitUntil(() => routerSaid(reader1.url, healedAt, 'store is back') !== undefined, {
      what: 'the router to give reader1 reads again',
      timeoutMs: 20_000,
      intervalMs: 50,
    });
    const gatewayBack = lineAfter(reader1.logLines(), healedAt, (l) => l.msg === 'store reachable again')!;
    const routerBack = routerSaid(reader1.url, healedAt, 'store is back')!;
    const gatewayRecoverMs = logTimeMs(gatewayBack) - healedAt;
    const routerRecoverMs = logTimeMs(routerBack) - healedAt;
    // Two passing probes in a row (the first may wait out a probe still timing out), then the router's probe.
    const recoverBound = 3.9 * STORE_PROBE_MS + 1.9 * ROUTER_PROBE_MS;
    console.log(
      `[measured] recovery: reader1 saw its store back after ${gatewayRecoverMs} ms, the router gave it reads after ${routerRecoverMs} ms (bound ${recoverBound} ms)`,
    );
    expect(routerRecoverMs).toBeLessThanOrEqual(recoverBound + SLACK_MS);
    const backAt = logTimeMs(routerBack);
    await waitUntil(
      () => loop.reads.some((r) => r.startedAtMs > backAt && gatewayServing(d, [reader1], r.id) !== undefined),
      { what: 'reads to reach reader1 again', timeoutMs: 20_000, intervalMs: 100 },
    );
    await loop.stop();

    // No client read got a 5xx, not even before the bound (the retry took those elsewhere); after the
    // router's detection and until it took reader1 back, none went to reader1.
    const routerLines = d.router.logLines().filter((l) => l.msg === 'request');
    const lineOf = (id: string) => routerLines.find((l) => l.clientReqId === id);
    // Each failed read with the router's line for it (its backend and attempts), to say where it broke.
    const fives = loop.reads
      .filter((r) => r.status >= 500 || r.status === 0)
      .map((r) => ({ ...r, router: lineOf(r.id) ?? 'no router line' }));
    console.log(
      `[measured] ${loop.reads.length} client reads during the run; 5xx: ${fives.length}; retried: ${routerLines.filter((l) => String(l.clientReqId).startsWith('sp-read') && l.attempts === 2).length}`,
    );
    expect(fives.filter((r) => r.startedAtMs > partitionedAt + BOUND_MS + SLACK_MS)).toEqual([]);
    expect(fives).toEqual([]);
    const during = loop.reads.filter((r) => r.startedAtMs > routerSawAt && r.startedAtMs < healedAt);
    expect(during.length).toBeGreaterThanOrEqual(6);
    for (const r of during) expect(lineOf(r.id)?.backend, r.id).not.toBe(reader1.url);
  }, 180_000);
});
