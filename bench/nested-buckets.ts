/**
 * The per-chunk cost of pacing through four nested buckets (global, group, repository, principal)
 * against one (global), issue 40. In process on a manual clock: every take passes at once (rates far
 * above what is taken), so what is measured is the governor's bookkeeping per 64 KiB quantum, not
 * waiting. Rounds alternate between the two shapes; the medians and their ratio are printed.
 *
 *   node bench/nested-buckets.ts [--rounds 9] [--takes 200000]
 *
 * Target: four buckets ≤ 1.1× the CPU per GiB of one.
 */
import { parseArgs } from 'node:util';
import { ManualClock } from '../policy/clock.ts';
import { ManualTimers } from '../policy/timers.ts';
import { BandwidthGovernor } from '../policy/bandwidth/bandwidth-governor.ts';

const RATE = 2 ** 40;

async function cpuMsPerGiB(nested: boolean, takes: number): Promise<number> {
  const clock = new ManualClock(0, 0);
  const governor = new BandwidthGovernor({
    rateBytesPerSec: RATE,
    perPrincipalBytesPerSec: nested ? RATE : 0,
    clock,
    timers: new ManualTimers(clock),
  });
  const ceilings = nested
    ? [
        { key: 'group:ci', rateBytesPerSec: RATE },
        { key: 'repository:mirror', rateBytesPerSec: RATE },
      ]
    : [];
  const meters = Array.from({ length: 16 }, (_, i) => governor.meter(`principal-${i % 4}`, 1, ceilings));
  const quantum = meters[0]!.quantumBytes;
  const before = process.cpuUsage();
  for (let i = 0; i < takes; i++) {
    clock.advance(0.001);
    await meters[i % meters.length]!.take(quantum);
  }
  const cpu = process.cpuUsage(before);
  return (cpu.user + cpu.system) / 1000 / ((takes * quantum) / 2 ** 30);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { rounds: { type: 'string', default: '9' }, takes: { type: 'string', default: '200000' } },
  });
  const rounds = Number(values.rounds);
  const takes = Number(values.takes);
  await cpuMsPerGiB(true, takes / 4); // warm-up: both shapes' code compiled before measuring
  await cpuMsPerGiB(false, takes / 4);
  const one: number[] = [];
  const four: number[] = [];
  for (let r = 0; r < rounds; r++) {
    // Alternate the order so drift on a shared machine falls on both.
    if (r % 2 === 0) {
      one.push(await cpuMsPerGiB(false, takes));
      four.push(await cpuMsPerGiB(true, takes));
    } else {
      four.push(await cpuMsPerGiB(true, takes));
      one.push(await cpuMsPerGiB(false, takes));
    }
  }
  const m1 = median(one);
  const m4 = median(four);
  // Each round's two shapes ran back to back: their ratio cancels the drift between rounds.
  const paired = median(four.map((f, r) => f / one[r]!));
  console.log(`nested buckets: ${rounds} interleaved rounds of ${takes} takes of 64 KiB`);
  console.log(`one bucket (global):                               ${m1.toFixed(2)} ms CPU per GiB (median)`);
  console.log(`four buckets (global, group, repository, principal): ${m4.toFixed(2)} ms CPU per GiB (median)`);
  console.log(
    `ratio four / one: ${(m4 / m1).toFixed(3)} of the medians, ${paired.toFixed(3)} median of the rounds' ratios (target ≤ 1.1)`,
  );
}

await main();
