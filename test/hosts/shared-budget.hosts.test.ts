/**
 * Scenario 4 (issue 24): three gateways on three hosts (writer, reader1, reader2 share 3 slots)
 * serve one principal at once through the router. Each enforces floor(rate / SLOTS) of the global
 * and per-principal budgets, so over every interval the bytes all three granted together stay
 * within P × t + B, where P is the per-principal budget and B the sum of the three buckets' bursts.
 *
 * Granted bytes are read from each gateway's `arkvory_bandwidth_granted_bytes_total{direction=
 * "download"}`; a sample's counter was read somewhere between sending the scrape and its answer,
 * so an interval between samples i < j is bounded by [start_i, end_j], which only widens it.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { burstBytes } from '../../policy/bandwidth/token-bucket.ts';
import { MiB, startDeployment, type Deployment } from './deployment.ts';
import type { Gateway } from './topology.ts';

const SLOTS = 3;
const RATE = SLOTS * MiB;
/** One principal: the per-principal budget is what binds (P < rate). */
const PER_PRINCIPAL = SLOTS * 256 * 1024;
const SHARE = Math.floor(PER_PRINCIPAL / SLOTS);
const GLOBAL_BURST = SLOTS * burstBytes(SHARE);
const WINDOW_S = 6;

let d: Deployment;

beforeAll(async () => {
  d = await startDeployment({ policy: { slots: SLOTS, rateBytesPerSec: RATE, perPrincipalBytesPerSec: PER_PRINCIPAL }, fileBytes: 8 * MiB });
}, 150_000);

afterAll(async () => {
  await d?.stop();
});

async function grantedBytes(gateway: Gateway): Promise<number> {
  const text = await (await fetch(`${gateway.url}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
  const match = /^arkvory_bandwidth_granted_bytes_total\{direction="download"\} (\d+)/m.exec(text);
  if (!match) throw new Error(`no download counter in ${gateway.url}/metrics`);
  return Number(match[1]);
}

interface Sample {
  startMs: number;
  endMs: number;
  bytes: number;
}

describe('one principal on three gateways on three hosts', () => {
  it('never gets more than P × t + B over any interval, and does use its budget', async () => {
    const gateways = [d.writer, ...d.readers];
    const curls = Array.from({ length: 6 }, (_, i) =>
      d.topology.spawn('client', `curl s4-${i}`, 'curl', ['-sS', '--max-time', String(WINDOW_S + 2), '-H', `Authorization: Bearer ${d.readKey}`, '-o', path.join(d.downloads, `s4-${i}`), `${d.routerUrl}${d.contentPath}`]),
    );
    const samples: Sample[] = [];
    const until = performance.now() + WINDOW_S * 1000;
    while (performance.now() < until) {
      const startMs = performance.now();
      const counts = await Promise.all(gateways.map(grantedBytes));
      samples.push({ startMs, endMs: performance.now(), bytes: counts.reduce((a, b) => a + b, 0) });
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all(curls.map((c) => c.exited));
    // The router spread the six downloads over all three gateways.
    for (const g of gateways) expect(g.logLines().some((l) => l.msg === 'request' && l.status === 200), g.name).toBe(true);

    let worst = -Infinity;
    for (let i = 0; i < samples.length; i++) {
      for (let j = i + 1; j < samples.length; j++) {
        const a = samples[i]!;
        const b = samples[j]!;
        const bound = (PER_PRINCIPAL * (b.endMs - a.startMs)) / 1000 + GLOBAL_BURST;
        worst = Math.max(worst, b.bytes - a.bytes - bound);
        expect(b.bytes - a.bytes, `interval ${i}..${j}`).toBeLessThanOrEqual(bound);
      }
    }
    const first = samples[0]!;
    const last = samples[samples.length - 1]!;
    const usedPerSecond = ((last.bytes - first.bytes) * 1000) / (last.startMs - first.endMs);
    // The budget is actually used (loosely: a loaded machine may lag), so the bound is not vacuous.
    expect(usedPerSecond).toBeGreaterThan(PER_PRINCIPAL * 0.5);
    expect(worst).toBeLessThanOrEqual(0);
  }, 90_000);
});
