import { describe, expect, it } from 'vitest';
import { ManualClock } from '../clock.ts';
import { ManualTimers } from '../timers.ts';
import { type Grant, setupGovernor as setup } from './bandwidth-governor.test-support.ts';
import { BandwidthGovernor, type ByteMeter } from './bandwidth-governor.ts';

/** A stream that always asks for `bytes` until `running()` turns false. */
async function saturate(meter: ByteMeter, bytes: number, running: () => boolean): Promise<void> {
  while (running()) await meter.take(bytes);
}

function bytesIn(grants: readonly Grant[], principal: string, fromMs: number, toMs: number): number {
  return grants
    .filter((g) => g.principal === principal && g.atMs >= fromMs && g.atMs < toMs)
    .reduce((sum, g) => sum + g.bytes, 0);
}

const MIB = 1_048_576;
const QUANTUM = 65_536;

describe('BandwidthGovernor weights', () => {
  it('three principals weighted 1:3:1 saturating the ceiling get 20/60/20 % ± 2 % over every 10 s window', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    let running = true;
    // Two streams each: the split is per principal, not per stream.
    const loops = (
      [
        ['a', 1],
        ['b', 3],
        ['c', 1],
      ] as const
    ).flatMap(([p, w]) => [0, 1].map(() => saturate(governor.meter(p, w), QUANTUM, () => running)));
    await timers.advance(60_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    for (let fromMs = 0; fromMs + 10_000 <= 60_000; fromMs += 1_000) {
      const toMs = fromMs + 10_000;
      const of = (p: string) => bytesIn(grants, p, fromMs, toMs);
      const total = of('a') + of('b') + of('c');
      // The ceiling is reached: 10 s × rate, within one quantum of wake-up rounding (and the burst at 0).
      expect(total).toBeGreaterThan(10 * MIB - 2 * QUANTUM);
      for (const [p, share] of [
        ['a', 0.2],
        ['b', 0.6],
        ['c', 0.2],
      ] as const) {
        expect(Math.abs(of(p) / total - share), `${p} in [${fromMs}, ${toMs})`).toBeLessThanOrEqual(0.02);
      }
    }
  });

  it('equal weights keep the round-robin turns: one take per principal per turn', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 102_400, perPrincipalBytesPerSec: 0 });
    let running = true;
    const loops = ['x', 'y', 'z'].map((p) => saturate(governor.meter(p, 7), 10_240, () => running));
    await timers.advance(3_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    const order = grants.map((g) => g.principal).join('');
    expect(order.slice(3)).toMatch(/^(xyz)+x?y?$/);
  });

  it('a principal that goes idle has its share reused by the others within one refill period', async () => {
    const rate = MIB;
    const { governor, timers, grants } = setup({ rateBytesPerSec: rate, perPrincipalBytesPerSec: 0 });
    let running = true;
    let heavyRunning = true;
    const loops = [
      saturate(governor.meter('a', 1), QUANTUM, () => running),
      saturate(governor.meter('b', 3), QUANTUM, () => heavyRunning),
      saturate(governor.meter('c', 1), QUANTUM, () => running),
    ];
    await timers.advance(10_000);
    heavyRunning = false;
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    const lastHeavy = Math.max(...grants.filter((g) => g.principal === 'b').map((g) => g.atMs));
    const refillMs = (QUANTUM / rate) * 1000;
    // Every refill period after b left is granted to a or c: no gap longer than one quantum's refill
    // (plus the wake-up's rounding up to a whole millisecond).
    const after = grants.filter((g) => g.atMs > lastHeavy).map((g) => g.atMs);
    let previous = lastHeavy;
    for (const at of after) {
      expect(at - previous).toBeLessThanOrEqual(refillMs + 1);
      previous = at;
    }
    // And the whole ceiling goes to the two that remain, evenly.
    const fromMs = lastHeavy + refillMs + 1;
    const toMs = 20_000;
    const a = bytesIn(grants, 'a', fromMs, toMs);
    const c = bytesIn(grants, 'c', fromMs, toMs);
    expect(a + c).toBeGreaterThan((rate * (toMs - fromMs)) / 1000 - 2 * QUANTUM);
    expect(Math.abs(a - c)).toBeLessThanOrEqual(QUANTUM);
  });

  it('an idle principal banks no credit: on its return it gets its weighted share, not a catch-up', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    let running = true;
    let lateRunning = false;
    const early = saturate(governor.meter('early', 1), QUANTUM, () => running);
    await timers.advance(10_000);
    lateRunning = true;
    const late = saturate(governor.meter('late', 1), QUANTUM, () => lateRunning && running);
    await timers.advance(4_000);
    running = false;
    governor.close();
    await Promise.allSettled([early, late]);
    const e = bytesIn(grants, 'early', 10_000, 14_000);
    const l = bytesIn(grants, 'late', 10_000, 14_000);
    expect(Math.abs(e - l)).toBeLessThanOrEqual(2 * QUANTUM);
  });

  it("a principal's own ceiling still caps it; the rest of the ceiling goes to the others by weight", async () => {
    // Global 1 MiB/s, each principal at most 256 KiB/s: b (weight 6) would get 6/8 = 768 KiB/s but is
    // held to 256 KiB/s; a and c share the remaining 768 KiB/s, capped at 256 KiB/s each as well.
    const rate = MIB;
    const own = 262_144;
    const { governor, timers, grants } = setup({ rateBytesPerSec: rate, perPrincipalBytesPerSec: own });
    const quantum = governor.quantumBytes;
    let running = true;
    const loops = (
      [
        ['a', 1],
        ['b', 6],
        ['c', 1],
      ] as const
    ).map(([p, w]) => saturate(governor.meter(p, w), quantum, () => running));
    await timers.advance(20_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    for (const p of ['a', 'b', 'c']) {
      const got = bytesIn(grants, p, 10_000, 20_000);
      expect(got, p).toBeLessThanOrEqual(10 * own + quantum);
      expect(got, p).toBeGreaterThan(10 * own - 2 * quantum);
    }
  });

  it('with the global ceiling only partly used, weights change nothing: each gets its own ceiling', async () => {
    const own = 102_400;
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: own });
    const quantum = governor.quantumBytes;
    let running = true;
    const loops = [
      saturate(governor.meter('a', 1), quantum, () => running),
      saturate(governor.meter('b', 9), quantum, () => running),
    ];
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    expect(Math.abs(bytesIn(grants, 'a', 0, 10_000) - bytesIn(grants, 'b', 0, 10_000))).toBeLessThanOrEqual(quantum);
  });

  it("the principal's latest meter sets its weight", async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    let running = true;
    const a = governor.meter('a', 1);
    const b = governor.meter('b', 1);
    governor.meter('b', 4); // b's weight is 4 from here on, for its earlier meter too
    const loops = [saturate(a, QUANTUM, () => running), saturate(b, QUANTUM, () => running)];
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    const share =
      bytesIn(grants, 'b', 1_000, 10_000) / (bytesIn(grants, 'a', 1_000, 10_000) + bytesIn(grants, 'b', 1_000, 10_000));
    expect(Math.abs(share - 0.8)).toBeLessThanOrEqual(0.02);
  });

  it('refuses a weight that is not an integer from 1 to maxWeight, saying which', () => {
    const { governor } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0, maxWeight: 10 });
    for (const bad of [0, -1, 1.5, 11, Number.NaN]) {
      expect(() => governor.meter('p', bad)).toThrow(`weight: expected an integer from 1 to 10, got ${bad}`);
    }
    expect(governor.meter('p', 10).quantumBytes).toBe(QUANTUM);
    expect(governor.meter('p', 1).quantumBytes).toBe(QUANTUM);
    const { governor: unlimited } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    expect(() => unlimited.meter('p', 1001)).toThrow('weight: expected an integer from 1 to 1000, got 1001');
    expect(unlimited.meter('p', 1000).quantumBytes).toBe(QUANTUM);
    expect(() => setup({ rateBytesPerSec: 1, perPrincipalBytesPerSec: 0, maxWeight: 0 })).toThrow('maxWeight');
  });
});

describe('BandwidthGovernor.setRate (a leased share that follows the weights)', () => {
  it('paces at the new rate from the moment it is set, the bucket capped at max(burst, quantum)', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    let running = true;
    const loop = saturate(governor.meter('p'), QUANTUM, () => running);
    await timers.advance(5_000);
    const lowered = 200_000; // burst 20000 < quantum 65536: the bucket holds one quantum
    governor.setRate(lowered);
    expect(governor.snapshot().rateBytesPerSec).toBe(lowered);
    expect(governor.quantumBytes).toBe(QUANTUM);
    const fromMs = 5_000;
    for (const stepMs of [1, 100, 999, 2_000, 4_900]) {
      await timers.advance(stepMs);
      const elapsed = grants.filter((g) => g.atMs > fromMs).reduce((sum, g) => sum + g.bytes, 0);
      const nowMs = grants.at(-1)!.atMs;
      // From the change on: at most rate × t + capacity (a quantum; the old bucket was near empty).
      expect(elapsed).toBeLessThanOrEqual((lowered * (nowMs - fromMs)) / 1000 + QUANTUM);
    }
    const paced = grants.filter((g) => g.atMs > 6_000 && g.atMs <= 13_000).reduce((sum, g) => sum + g.bytes, 0);
    expect(paced).toBeGreaterThan(lowered * 7 - 2 * QUANTUM);
    governor.setRate(2 * MIB);
    const before = grants.length;
    await timers.advance(1_000);
    const raised = grants.slice(before).reduce((sum, g) => sum + g.bytes, 0);
    expect(raised).toBeGreaterThan(2 * MIB - 2 * QUANTUM);
    expect(raised).toBeLessThanOrEqual(2 * MIB + QUANTUM);
    running = false;
    governor.close();
    await Promise.allSettled([loop]);
  });

  it('0 pauses the direction: nothing passes and nothing is earned until a rate is set again', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    let running = true;
    const loop = saturate(governor.meter('p'), QUANTUM, () => running);
    await timers.advance(1_000);
    governor.setRate(0);
    // The waiting take's wake-up is dropped: a paused direction arms no timer.
    expect(timers.size).toBe(0);
    governor.setRate(0); // idempotent
    const count = grants.length;
    await timers.advance(5_000);
    expect(grants.length).toBe(count);
    expect(timers.size).toBe(0);
    expect(governor.meter('q').tryTake(1)).toBe(false);
    governor.setRate(MIB);
    // The pause earned nothing: the bucket holds what it held when paused (under one quantum).
    await timers.advance(0);
    expect(grants.length - count).toBeLessThanOrEqual(1);
    await timers.advance(1_000);
    const after = grants.slice(count).reduce((sum, g) => sum + g.bytes, 0);
    expect(after).toBeLessThanOrEqual(MIB + QUANTUM);
    expect(after).toBeGreaterThan(MIB - 2 * QUANTUM);
    running = false;
    governor.close();
    await Promise.allSettled([loop]);
  });

  it('a pause keeps what the bucket earned before it, and earns nothing while it lasts, paused again or not', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p');
    // Empty the bucket (it starts with the burst, 104,857 bytes).
    expect(meter.tryTake(QUANTUM)).toBe(true);
    expect(meter.tryTake(104_857 - QUANTUM)).toBe(true);
    expect(meter.tryTake(1)).toBe(false);
    // 50 ms at 1 MiB/s: 52,428.8 bytes earned, not yet credited when the pause comes.
    await timers.advance(50);
    governor.setRate(0);
    await timers.advance(5_000);
    governor.setRate(0);
    await timers.advance(5_000);
    governor.setRate(MIB);
    expect(meter.tryTake(52_428)).toBe(true);
    expect(meter.tryTake(1)).toBe(false);
  });

  it('refuses a change on a governor without a global ceiling, and a bad rate', () => {
    const { governor } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: MIB });
    expect(() => governor.setRate(MIB)).toThrow('setRate: this governor was built without a global ceiling');
    const { governor: paced } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    expect(() => paced.setRate(-1)).toThrow('rateBytesPerSec');
    expect(() => paced.setRate(1.5)).toThrow('rateBytesPerSec');
  });

  it('reports the weight sum of the principals active within the window', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    expect(governor.activeWeightSum(4_000)).toBe(0);
    await governor.meter('a', 3).take(QUANTUM);
    await governor.meter('b', 5).take(1);
    expect(governor.activeWeightSum(4_000)).toBe(8);
    await timers.advance(3_000);
    await governor.meter('b', 5).take(1);
    await timers.advance(1_000);
    // a's last grant is exactly 4 s old: still inside; b's is 1 s old.
    expect(governor.activeWeightSum(4_000)).toBe(8);
    await timers.advance(1);
    expect(governor.activeWeightSum(4_000)).toBe(5);
    // A waiting take counts however old the last grant: c drains the bucket, then waits.
    const c = governor.meter('c', 7);
    await c.take(QUANTUM);
    const waiting = c.take(QUANTUM);
    await timers.advance(0);
    expect(governor.activeWeightSum(0)).toBe(7);
    governor.close();
    await Promise.allSettled([waiting]);
  });

  it('counts a principal whose take has waited longer than the window, granted nothing in it', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    // 100 B/s: a burst and quantum of 10 bytes, then one quantum every 100 ms.
    const slow = governor.meter('slow', 2, [{ key: 'repo:slow', rateBytesPerSec: 100 }]);
    expect(slow.quantumBytes).toBe(10);
    await slow.take(10);
    const waiting = slow.take(10);
    await timers.advance(60);
    expect(governor.activeWeightSum(10)).toBe(2);
    governor.close();
    await Promise.allSettled([waiting]);
  });
});

describe('BandwidthGovernor shared ceilings (groups, repositories)', () => {
  const bytesOfAll = (grants: readonly Grant[], ps: readonly string[], fromMs: number, toMs: number) =>
    ps.reduce((sum, p) => sum + bytesIn(grants, p, fromMs, toMs), 0);

  it('a group ceiling holds its members together while a principal outside it runs at the rest of the ceiling', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    const group = { key: 'group:crawlers', rateBytesPerSec: 262_144 };
    let running = true;
    const loops = [
      saturate(governor.meter('crawler-1', 1, [group]), 26_214, () => running),
      saturate(governor.meter('crawler-2', 1, [group]), 26_214, () => running),
      saturate(governor.meter('dev', 1), QUANTUM, () => running),
    ];
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    const crawlers = bytesOfAll(grants, ['crawler-1', 'crawler-2'], 0, 10_000);
    // rate × t + burst for the group; the rest of the global ceiling to dev (not starved, not capped).
    expect(crawlers).toBeLessThanOrEqual(262_144 * 10 + 26_214);
    // Reached within 10 %: a crawler whose group bucket has refilled may still wait behind dev's
    // reservation of the global bucket (at most one 64 KiB refill, 62.5 ms, per wait).
    expect(crawlers).toBeGreaterThan(0.9 * 262_144 * 10);
    expect(bytesIn(grants, 'dev', 0, 10_000)).toBeGreaterThan(MIB * 10 - crawlers - 2 * QUANTUM);
  });

  it("a meter's quantum fits its smallest ceiling's burst, and a take beyond it is refused", async () => {
    const { governor } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p', 1, [
      { key: 'repo:a', rateBytesPerSec: 100_000 },
      { key: 'group:g', rateBytesPerSec: 5 * MIB },
    ]);
    expect(meter.quantumBytes).toBe(10_000);
    await expect(meter.take(10_001)).rejects.toThrow(
      'bytes: expected an integer from 0 to the quantum 10000, got 10001',
    );
    expect(meter.tryTake(10_001)).toBe(false);
    expect(meter.tryTake(10_000)).toBe(true);
    expect(governor.meter('q').quantumBytes).toBe(QUANTUM);
    expect(() => governor.meter('p', 1, [{ key: 'repo:a', rateBytesPerSec: 0 }])).toThrow(
      'ceiling repo:a: expected a rate of at least 1 B/s, got 0',
    );
    expect(() => governor.meter('p', 1, [{ key: '', rateBytesPerSec: 5 }])).toThrow('ceiling key');
    expect(() => governor.meter('p', 1, [{ key: 5 as unknown as string, rateBytesPerSec: 5 }])).toThrow('ceiling key');
  });

  it('paces by ceilings even with both governor ceilings off, and follows a changed ceiling rate', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    let running = true;
    const repo = (rate: number) => [{ key: 'repo:big', rateBytesPerSec: rate }];
    const meter = governor.meter('p', 1, repo(MIB));
    const loop = saturate(meter, QUANTUM, () => running);
    await timers.advance(5_000);
    expect(bytesIn(grants, 'p', 0, 5_000)).toBeLessThanOrEqual(5 * MIB + 104_857);
    expect(bytesIn(grants, 'p', 0, 5_000)).toBeGreaterThan(5 * MIB - QUANTUM);
    // A new meter naming the repository at a lower rate re-rates its one bucket for every stream.
    governor.meter('other', 1, repo(2 * QUANTUM * 10));
    await timers.advance(5_000);
    const after = bytesIn(grants, 'p', 5_100, 10_000);
    expect(after).toBeLessThanOrEqual(2 * QUANTUM * 10 * 4.9 + QUANTUM);
    expect(after).toBeGreaterThan(2 * QUANTUM * 10 * 4.9 - 2 * QUANTUM);
    running = false;
    governor.close();
    await Promise.allSettled([loop]);
  });

  it('a ceiling lowered while a stream with a larger quantum than the new burst runs still grants that stream', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    const repo = (rate: number) => ({ key: 'repo:r', rateBytesPerSec: rate });
    // The first meter through the repository has a small quantum (a slow group's burst); the second
    // a whole one, which fits the repository's capacity (its burst, 104,857) as it is.
    expect(governor.meter('a', 1, [repo(MIB), { key: 'group:slow', rateBytesPerSec: 100_000 }]).quantumBytes).toBe(
      10_000,
    );
    const big = governor.meter('b', 1, [repo(MIB)]);
    expect(big.quantumBytes).toBe(QUANTUM);
    // The repository's ceiling is lowered (burst 20,000): its capacity must stay at b's quantum.
    governor.meter('c', 1, [repo(200_000)]);
    let running = true;
    const loop = saturate(big, QUANTUM, () => running);
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled([loop]);
    const granted = bytesIn(grants, 'b', 0, 10_001);
    expect(granted).toBeGreaterThan(200_000 * 10 - 2 * QUANTUM);
    // rate × t + capacity: the lowered bucket holds at most one quantum.
    expect(granted).toBeLessThanOrEqual(200_000 * 10 + QUANTUM);
  });

  it('a take one of its buckets refuses spends nothing from the others', () => {
    const { governor } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: MIB });
    // Each order on new buckets: the principal's and the group's hold 104,857 bytes (their burst),
    // the repository's 50,000; the clock stands still, so nothing refills.
    for (const order of ['group first', 'repository first']) {
      const group = { key: `group:${order}`, rateBytesPerSec: MIB };
      const repo = { key: `repo:${order}`, rateBytesPerSec: 500_000 };
      const through = governor.meter(order, 1, order === 'group first' ? [group, repo] : [repo, group]);
      expect(through.quantumBytes).toBe(50_000);
      expect(through.tryTake(50_000)).toBe(true);
      // The repository is empty now: the take is refused whichever bucket comes first.
      expect(through.tryTake(50_000)).toBe(false);
      // The principal and the group still hold exactly what the first take left them.
      const groupOnly = governor.meter(order, 1, [group]);
      expect(groupOnly.tryTake(54_857)).toBe(true);
      expect(groupOnly.tryTake(1)).toBe(false);
      expect(governor.meter(`other ${order}`, 1, [repo]).tryTake(1)).toBe(false);
    }
  });

  // Smaller takes through one ceiling used to find their bytes first every time: a principal taking
  // 64 KiB quanta through a 1 MiB/s repository got one quantum in 10 s beside one taking 60,000 bytes
  // (a small file's last chunk, a Range read, a 16 KiB TLS read of an upload), which got the rest.
  for (const smallBytes of [60_000, 1024]) {
    it(`a repository ceiling is held for a waiting quantum: ${smallBytes}-byte takes through it do not starve 64 KiB ones`, async () => {
      const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
      const repo = [{ key: 'repo:r', rateBytesPerSec: MIB }];
      let running = true;
      const loops = [saturate(governor.meter('big', 1, repo), QUANTUM, () => running)];
      for (let i = 0; i < 4; i++) loops.push(saturate(governor.meter('small', 1, repo), smallBytes, () => running));
      await timers.advance(10_000);
      running = false;
      governor.close();
      await Promise.allSettled(loops);
      for (const p of ['big', 'small']) expect(bytesIn(grants, p, 0, 10_000)).toBeGreaterThanOrEqual(0.4 * MIB * 10);
      expect(bytesOfAll(grants, ['big', 'small'], 0, 10_000)).toBeLessThanOrEqual(MIB * 10 + 104_857);
    });
  }

  it('a group ceiling is held for a waiting quantum of one member while another takes smaller ones, under a global ceiling', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 100 * MIB, perPrincipalBytesPerSec: 0 });
    const group = { key: 'group:g', rateBytesPerSec: MIB };
    // Each also passes its own repository, far from its ceiling.
    const through = (p: string) => [group, { key: `repo:${p}`, rateBytesPerSec: 8 * MIB }];
    let running = true;
    const loops = [
      saturate(governor.meter('big', 1, through('big')), QUANTUM, () => running),
      saturate(governor.meter('small', 1, through('small')), 16_384, () => running),
    ];
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    for (const p of ['big', 'small']) expect(bytesIn(grants, p, 0, 10_000)).toBeGreaterThanOrEqual(0.4 * MIB * 10);
    expect(bytesOfAll(grants, ['big', 'small'], 0, 10_000)).toBeLessThanOrEqual(MIB * 10 + 104_857);
  });

  it('a principal through two busy ceilings is held both, not starved by small takes in either', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    const group = { key: 'group:g', rateBytesPerSec: MIB };
    const repo = { key: 'repo:r', rateBytesPerSec: MIB };
    let running = true;
    const loops = [
      saturate(governor.meter('both', 1, [group, repo]), QUANTUM, () => running),
      saturate(governor.meter('in-group', 1, [group]), 4096, () => running),
      saturate(governor.meter('in-repo', 1, [repo]), 4096, () => running),
    ];
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    for (const p of ['both', 'in-group', 'in-repo'])
      expect(bytesIn(grants, p, 0, 10_000)).toBeGreaterThanOrEqual(0.4 * MIB * 10);
  });

  // Repository of 102,400 B/s: burst and quantum 10,240 bytes, 1,024 bytes refilled each 10 ms.
  const slowRepo = [{ key: 'repo:slow', rateBytesPerSec: 102_400 }];
  /** The repository drained by another principal, whose grant leaves the fair-queueing clock at 0. */
  function drained(governor: BandwidthGovernor): void {
    expect(governor.meter('drain', 1, slowRepo).tryTake(10_240)).toBe(true);
  }

  it('takes waiting on one ceiling pass in fair order: a small one never before an earlier larger one', async () => {
    const clock = new ManualClock(1_700_000_000_000, 0);
    const timers = new ManualTimers(clock);
    let armed = 0;
    const grants: Grant[] = [];
    const governor = new BandwidthGovernor({
      rateBytesPerSec: 0,
      perPrincipalBytesPerSec: 0,
      clock,
      timers: {
        setTimeout: (callback, delayMs) => {
          armed++;
          return timers.setTimeout(callback, delayMs);
        },
        clearTimeout: (handle) => timers.clearTimeout(handle),
      },
      onGrant: (principal, bytes, nowMs) => grants.push({ principal, bytes, atMs: nowMs }),
    });
    drained(governor);
    const takes = [
      governor.meter('p', 1, slowRepo).take(1024),
      governor.meter('h', 1, slowRepo).take(10_240),
      governor.meter('q', 1, slowRepo).take(512),
    ];
    await timers.advance(200);
    await Promise.all(takes);
    // All three start at the clock's 0, so arrival decides; q's 512 bytes wait behind h's 10,240.
    expect(grants.slice(1).map((g) => [g.principal, g.atMs])).toEqual([
      ['p', 10],
      ['h', 110],
      ['q', 115],
    ]);
    // One wake-up per grant: a take waiting behind bytes held for another is woken by no refill of its own.
    expect(armed).toBe(3);
  });

  it('a new principal at the same start tag leaves a waiting quantum its bytes; one before it in fair order takes them', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    drained(governor);
    const waiting = governor.meter('h', 1, slowRepo).take(10_240);
    await timers.advance(10);
    // 1,024 bytes are back, kept for h: a newcomer at the clock's 0 arrived after it.
    const late = governor.meter('late', 1, slowRepo);
    expect(late.tryTake(1024)).toBe(false);
    const lateTake = late.take(1024);
    await timers.advance(90);
    await waiting;
    await timers.advance(10);
    await lateTake;
    expect(grants.slice(1).map((g) => [g.principal, g.atMs])).toEqual([
      ['h', 100],
      ['late', 110],
    ]);
    // Now h, having taken a quantum, waits again behind one that has had less: that one goes first.
    const again = governor.meter('h', 1, slowRepo).take(10_240);
    await timers.advance(10);
    expect(governor.meter('fresh', 1, slowRepo).tryTake(1024)).toBe(true);
    await timers.advance(100);
    await again;
    expect(grants.slice(3).map((g) => [g.principal, g.atMs])).toEqual([
      ['fresh', 120],
      ['h', 220],
    ]);
  });

  it('a principal waiting for its own bucket holds no ceiling: one after it in fair order takes the refill', async () => {
    // Per principal 10,240 B/s (quantum 1,024, refilled in 100 ms); the repository refills 1,024 bytes in 10 ms.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 10_240 });
    const a = governor.meter('a', 1000, slowRepo);
    const b = governor.meter('b', 1, slowRepo);
    expect(b.tryTake(512)).toBe(true);
    expect(a.tryTake(1024)).toBe(true);
    for (let i = 0; i < 8; i++) expect(governor.meter(`x${i}`, 1, slowRepo).tryTake(1024)).toBe(true);
    expect(governor.meter('x', 1, slowRepo).tryTake(512)).toBe(true);
    // a (weight 1000) is before b in fair order but waits for its own bucket until 100 ms.
    const takes = [a.take(1024), b.take(512)];
    await timers.advance(100);
    await Promise.all(takes);
    expect(grants.slice(-2).map((g) => [g.principal, g.atMs])).toEqual([
      ['b', 5],
      ['a', 100],
    ]);
  });

  it('a principal before the holder in arrival, at the same start tag, is woken for its own bytes only', async () => {
    // Per principal 1,024,000 B/s: 512 bytes of its own refill in 0.5 ms; the repository's in 5 ms.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 1_024_000 });
    // a (weight 1000) empties its own bucket; y's two grants move the fair-queueing clock past a's
    // finish tag, so a and a newcomer start at the same tag; x empties the repository.
    const aFree = governor.meter('a', 1000);
    expect(aFree.tryTake(QUANTUM)).toBe(true);
    expect(aFree.tryTake(102_400 - QUANTUM)).toBe(true);
    const y = governor.meter('y', 1, slowRepo);
    expect(y.tryTake(512)).toBe(true);
    expect(y.tryTake(512)).toBe(true);
    expect(governor.meter('x', 1, slowRepo).tryTake(10_240 - 1024)).toBe(true);
    const takes = [governor.meter('a', 1000, slowRepo).take(512), governor.meter('h', 1, slowRepo).take(10_240)];
    await timers.advance(200);
    await Promise.all(takes);
    // a arrived first: the 10,240 bytes kept for h are not kept from it, so it wakes when its 512 are there.
    expect(grants.slice(-2).map((g) => [g.principal, g.atMs])).toEqual([
      ['a', 5],
      ['h', 105],
    ]);
  });

  it('a ceiling keeps the bytes of the lowest start tag waiting, not of the first to arrive', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    // h has had a quantum and waits for another; l and m, fresh, wait after it at lower tags.
    const h = governor.meter('h', 1, slowRepo);
    expect(h.tryTake(10_240)).toBe(true);
    const takes = [
      h.take(10_240),
      governor.meter('l', 1, slowRepo).take(2048),
      governor.meter('m', 1, slowRepo).take(512),
    ];
    await timers.advance(200);
    await Promise.all(takes);
    // l goes first (lowest tag, earliest of its equals), so m's 512 bytes do not pass before its 2,048.
    expect(grants.slice(1).map((g) => [g.principal, g.atMs])).toEqual([
      ['l', 20],
      ['m', 25],
      ['h', 125],
    ]);
  });

  it('close() drops the holds with the takes it rejects: later takes through the ceiling pass as before', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    drained(governor);
    const held = governor.meter('h', 1, slowRepo).take(10_240);
    await timers.advance(10);
    governor.close();
    await expect(held).rejects.toMatchObject({ code: 'unavailable' });
    // Nothing waits now: a newcomer takes the 1,024 bytes the refill brought.
    await governor.meter('n', 1, slowRepo).take(1024);
    expect(grants.at(-1)).toEqual({ principal: 'n', bytes: 1024, atMs: 10 });
  });

  it('a principal held back by its group never stops one in another group (no starvation across groups)', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: MIB, perPrincipalBytesPerSec: 0 });
    let running = true;
    const slow = { key: 'group:slow', rateBytesPerSec: 65_536 };
    const fast = { key: 'group:fast', rateBytesPerSec: 4 * MIB };
    const loops = [
      saturate(governor.meter('s', 5, [slow]), 6553, () => running),
      saturate(governor.meter('f', 1, [fast]), 6553, () => running),
    ];
    await timers.advance(10_000);
    running = false;
    governor.close();
    await Promise.allSettled(loops);
    expect(bytesIn(grants, 's', 0, 10_000)).toBeLessThanOrEqual(655_360 + 6553);
    expect(bytesIn(grants, 'f', 0, 10_000)).toBeGreaterThan(10 * MIB - 655_360 - 2 * 6553 - 104_857);
  });
});
