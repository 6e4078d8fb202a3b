/**
 * In-process benchmark of the bandwidth governor (ADR 0008): S streams over P principals each take
 * full quanta as fast as they are granted, against one governor of rate R. No HTTP (the HTTP version
 * adds the network edge); this measures the scheduler itself.
 *
 *   node bench/governor.ts [--seconds 10] [--rate 67108864] [--per-principal 0] [--simulated]
 *
 * Prints per run: achieved/R (target 0.97–1.00 plus the burst allowance burst/(R × T)), the largest
 * excess of bytes granted over R × t + burst at any grant (target 0; measured on the governor's own
 * microsecond clock), Jain's fairness index over the principals' bytes (target ≥ 0.99), grants/s
 * and CPU time per GiB granted. `--simulated` runs on a manual clock (deterministic, instant).
 */
import { parseArgs } from 'node:util';
import { type Clock, ManualClock, systemClock } from '../policy/clock.ts';
import { ManualTimers, systemTimers, type Timers } from '../policy/timers.ts';
import { BandwidthGovernor } from '../policy/bandwidth/bandwidth-governor.ts';
import { burstBytes, toMicros } from '../policy/bandwidth/token-bucket.ts';

export interface GovernorRun {
  streams: number;
  principals: number;
  seconds: number;
  rateBytesPerSec: number;
  perPrincipalBytesPerSec: number;
  simulated: boolean;
}

export interface GovernorResult extends GovernorRun {
  grantedBytes: number;
  achievedOverRate: number;
  burstAllowance: number;
  maxExcessBytes: number;
  jainIndex: number;
  grantsPerSec: number;
  cpuMsPerGiB: number;
}

/** Jain's fairness index: (Σx)² / (n Σx²); 1 when all equal. */
export function jainIndex(values: readonly number[]): number {
  const sum = values.reduce((a, b) => a + b, 0);
  const squares = values.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? 1 : (sum * sum) / (values.length * squares);
}

export async function runGovernor(run: GovernorRun): Promise<GovernorResult> {
  const manual = run.simulated ? new ManualClock(0, 0) : null;
  const clock: Clock = manual ?? systemClock;
  const timers: Timers = manual ? new ManualTimers(manual) : systemTimers;
  const rate = BigInt(run.rateBytesPerSec);
  const burst = BigInt(burstBytes(run.rateBytesPerSec));
  const perPrincipal = new Map<string, number>();
  let granted = 0n;
  let grants = 0;
  let maxExcessMicroBytes = -(1n << 200n);
  let startUs = 0n;

  const governor = new BandwidthGovernor({
    rateBytesPerSec: run.rateBytesPerSec,
    perPrincipalBytesPerSec: run.perPrincipalBytesPerSec,
    clock,
    timers,
    onGrant: (principal, bytes, nowMs) => {
      grants++;
      granted += BigInt(bytes);
      perPrincipal.set(principal, (perPrincipal.get(principal) ?? 0) + bytes);
      if (rate > 0n) {
        const excess = granted * 1_000_000n - rate * (BigInt(toMicros(nowMs)) - startUs) - burst * 1_000_000n;
        if (excess > maxExcessMicroBytes) maxExcessMicroBytes = excess;
      }
    },
  });
  startUs = BigInt(toMicros(clock.monotonicMs())); // the governor's buckets start at construction
  const startMs = clock.monotonicMs();
  const cpuBefore = process.cpuUsage();
  let stopped = false;
  const controller = new AbortController();
  const loops = Array.from({ length: run.streams }, async (_, i) => {
    const meter = governor.meter(`principal-${i % run.principals}`);
    try {
      while (!stopped) await meter.take(meter.quantumBytes, controller.signal);
    } catch {
      // stopped while waiting
    }
  });
  const durationMs = run.seconds * 1000;
  if (manual) {
    await (timers as ManualTimers).advance(durationMs);
  } else {
    await new Promise<void>((resolve) => setTimeout(resolve, durationMs));
  }
  stopped = true;
  const elapsedMs = clock.monotonicMs() - startMs;
  const grantedAtStop = Number(granted);
  controller.abort();
  governor.close();
  await Promise.all(loops);
  const cpu = process.cpuUsage(cpuBefore);
  const ideal = (run.rateBytesPerSec * elapsedMs) / 1000;
  const shares = Array.from({ length: run.principals }, (_, p) => perPrincipal.get(`principal-${p}`) ?? 0);
  return {
    ...run,
    grantedBytes: grantedAtStop,
    achievedOverRate: ideal > 0 ? grantedAtStop / ideal : NaN,
    burstAllowance: ideal > 0 ? Number(burst) / ideal : NaN,
    maxExcessBytes: rate > 0n ? Number(maxExcessMicroBytes) / 1e6 : NaN,
    jainIndex: jainIndex(shares),
    grantsPerSec: grants / (elapsedMs / 1000),
    cpuMsPerGiB: grantedAtStop > 0 ? (cpu.user + cpu.system) / 1000 / (grantedAtStop / 2 ** 30) : NaN,
  };
}

/**
 * CPU cost of the governor's own bookkeeping per take, with no waiting and no timer (manual clock,
 * every take passes at once): what the scheduler adds on top of the event loop and the I/O.
 */
export async function measureTakeCost(
  rateBytesPerSec: number,
  takes = 1_000_000,
): Promise<{ microsPerTake: number; msPerGiB: number }> {
  const clock = new ManualClock(0, 0);
  const governor = new BandwidthGovernor({
    rateBytesPerSec,
    perPrincipalBytesPerSec: rateBytesPerSec,
    clock,
    timers: new ManualTimers(clock),
  });
  const meters = Array.from({ length: 16 }, (_, i) => governor.meter(`principal-${i % 4}`));
  const quantum = governor.quantumBytes;
  const before = process.cpuUsage();
  for (let i = 0; i < takes; i++) {
    clock.advance(0.001);
    await meters[i % meters.length]!.take(quantum);
  }
  const cpu = process.cpuUsage(before);
  const micros = cpu.user + cpu.system;
  return { microsPerTake: micros / takes, msPerGiB: micros / 1000 / ((takes * quantum) / 2 ** 30) };
}

export function formatResult(r: GovernorResult): string {
  return [
    `${String(r.streams).padStart(3)} streams / ${String(r.principals).padStart(2)} principals`,
    `achieved/R ${r.achievedOverRate.toFixed(4)} (+burst ${r.burstAllowance.toFixed(4)})`,
    `max excess ${r.maxExcessBytes <= 0 ? '0' : r.maxExcessBytes.toFixed(0)} B`,
    `Jain ${r.jainIndex.toFixed(4)}`,
    `${r.grantsPerSec.toFixed(0)} grants/s`,
    `CPU ${r.cpuMsPerGiB.toFixed(1)} ms/GiB`,
  ].join('  ');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      seconds: { type: 'string', default: '10' },
      rate: { type: 'string', default: String(64 * 2 ** 20) },
      'per-principal': { type: 'string', default: '0' },
      simulated: { type: 'boolean', default: false },
    },
  });
  const base = {
    seconds: Number(values.seconds),
    rateBytesPerSec: Number(values.rate),
    perPrincipalBytesPerSec: Number(values['per-principal']),
    simulated: values.simulated,
  };
  console.log(
    `governor bench: R = ${base.rateBytesPerSec} B/s, per principal ${base.perPrincipalBytesPerSec || 'off'}, ${base.seconds} s per run, ${base.simulated ? 'simulated clock' : 'real clock and timers'}`,
  );
  for (const streams of [1, 16, 64]) {
    for (const principals of [1, 4, 16]) {
      if (principals > streams) continue; // every principal needs a stream
      console.log(formatResult(await runGovernor({ ...base, streams, principals })));
    }
  }
  for (const [label, rate] of [
    ['both ceilings off', 0],
    ['1 TiB/s, every take passes', 2 ** 40],
  ] as const) {
    const cost = await measureTakeCost(rate);
    console.log(
      `bookkeeping, ${label}: ${cost.microsPerTake.toFixed(3)} µs CPU per take, ${cost.msPerGiB.toFixed(1)} ms per GiB in 64 KiB quanta`,
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
