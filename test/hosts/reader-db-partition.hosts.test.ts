import { describe, expect, it } from 'vitest';
import { leaseRow, logTimeMs } from '../../chaos/support/gateways.ts';
import {
  downloadedSize,
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
import { waitForHealth, waitUntil } from '../harness/index.ts';
import { heal, partition } from './netns.ts';
import type { Gateway } from './topology.ts';

const PROBE_MS = 1000;
/** floor(rate / 4) = 256 KiB/s per gateway: the 4 MiB file takes 16 s, longer than a fence (≤ 8 s). */
const RATE = 4 * 256 * 1024;

const d = useDeployment({
  policy: { slots: 4, rateBytesPerSec: RATE },
  fileBytes: 4 * MiB,
  probeIntervalMs: PROBE_MS,
});

const fileSize = (name: string): number => downloadedSize(d, name);

describe('reader1 partitioned from the database host', () => {
  it('fences within 8 s, is cut and dropped by the router, the client resumes elsewhere, and nothing revives it', async () => {
    const { topology } = d;
    const [reader1, reader2] = d.readers;
    const { ids, curls } = await startOnePerGateway(d, 's2');

    partition(topology.hosts.reader1, topology.hosts.db);
    await waitUntil(() => reader1.logLines().some((l) => String(l.msg).startsWith('fenced:')), {
      what: 'reader1 to log its fence',
      timeoutMs: 15_000,
      intervalMs: 50,
    });
    const fence = reader1.logLines().find((l) => String(l.msg).startsWith('fenced:'))!;
    const fencedAtMs = logTimeMs(fence);
    const lastRenewal = (await leaseRow(topology.pool, 1))!;
    // The permit lasts at most 8 s from the start of the renewal that confirmed it, which began
    // before the database stamped renewed_at. Grants check the permit's end themselves; the slack
    // is only for the fence's log line, written by a timer a loaded machine may run late.
    expect(fencedAtMs - lastRenewal.renewedAtMs).toBeLessThanOrEqual(8000 + 500);
    expect(fencedAtMs).toBeLessThan(lastRenewal.expiresAtMs);

    // The replacement on slot 1, on another host, starts now: it may serve only after expires_at.
    const replacement = await topology.startGateway('spare', { role: 'reader', slot: 1, waitFor: 'none' });
    const replacementServing = waitServingAt(replacement);

    // The download on reader1 is cut; the other two end complete and exact.
    const codes = await Promise.all(curls.map((c) => c.exited));
    expect(codes.filter((c) => c === 0)).toHaveLength(2);
    const onReader1 = ids[codes.findIndex((c) => c !== 0)]!;
    // Gateways log a request when it ends: each download was served by a different host.
    await waitUntil(() => ids.every((id) => gatewayServing(d, [d.writer, reader1, reader2], id) !== undefined), {
      what: 'every gateway to log its download',
      timeoutMs: 5000,
      intervalMs: 50,
    });
    expect(ids.map((id) => gatewayServing(d, [d.writer, reader1, reader2], id)?.host.name).sort()).toEqual([
      'reader1',
      'reader2',
      'writer',
    ]);
    expect(gatewayServing(d, [reader1], onReader1)).toBe(reader1);
    for (const id of ids.filter((i) => i !== onReader1)) expect(sha256(readDownload(d, id))).toBe(sha256(d.file));
    const cutLine = await routerLineFor(d, onReader1);
    expect(cutLine).toMatchObject({ backend: reader1.url, completed: false });
    expect(fileSize(onReader1)).toBeLessThan(d.file.length);

    // Out of the router's pool within two probe intervals of the fence.
    await waitUntil(
      () => d.router.logLines().some((l) => l.msg === 'gateway left the pool' && l.backend === reader1.url),
      { what: 'the router to drop reader1', timeoutMs: 2 * PROBE_MS + 5000, intervalMs: 50 },
    );
    const left = d.router.logLines().find((l) => l.msg === 'gateway left the pool' && l.backend === reader1.url)!;
    expect(logTimeMs(left) - fencedAtMs).toBeLessThanOrEqual(2 * PROBE_MS);

    // Resume with Range through the router: another gateway, the exact file.
    const resumed = await resumeThroughRouter(d, onReader1, 's2-resume');
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(sha256(readDownload(d, onReader1))).toBe(sha256(d.file));
    const resumeLine = await routerLineFor(d, 's2-resume');
    expect(resumeLine).toMatchObject({ status: 206, completed: true });
    expect(resumeLine.backend).not.toBe(reader1.url);

    // The replacement took the slot (and so could serve) only after the old reservation expired,
    // with the next generation (both times on the database clock).
    await replacementServing;
    const taken = (await leaseRow(topology.pool, 1))!;
    expect(taken.acquiredAtMs).toBeGreaterThanOrEqual(lastRenewal.expiresAtMs);
    expect(taken.generation).toBe(lastRenewal.generation + 1);
    expect(taken.owner).not.toBe(lastRenewal.owner);

    // Healing revives nothing: reader1 keeps answering 503 lease_lost, the slot stays taken.
    heal(topology.hosts.reader1, topology.hosts.db);
    const healedAtMs = Date.now();
    while (Date.now() - healedAtMs < 3000) {
      expect((await fetch(`${reader1.url}/health/status`)).status).toBe(503);
      const refused = await fetch(`${reader1.url}${d.contentPath}`, {
        headers: { authorization: `Bearer ${d.readKey}` },
      });
      expect([refused.status, ((await refused.json()) as { code: string }).code]).toEqual([503, 'lease_lost']);
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(reader1.isRunning()).toBe(true);
    expect(reader1.logLines().filter((l) => String(l.msg).startsWith('fenced:'))).toHaveLength(1);
    const after = (await leaseRow(topology.pool, 1))!;
    expect([after.owner, after.generation]).toEqual([taken.owner, taken.generation]);
    // The router finds the replacement through its lease and serves from it.
    await waitUntil(async () => (await routerHealthy(d.routerUrl)).healthy === 3, {
      what: 'the router to add the replacement',
      timeoutMs: 10_000,
      intervalMs: 100,
      retryOnError: true,
    });
  }, 120_000);
});

/** Resolves with Date.now() at the replacement's first 200 on /health/status. */
async function waitServingAt(gateway: Gateway): Promise<number> {
  await waitForHealth(gateway, { timeoutMs: 90_000 });
  return Date.now();
}
