import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../clock.ts';
import { PolicyError } from '../errors.ts';
import { ManualTimers, settle } from '../timers.ts';
import { setupGovernor as setup } from './bandwidth-governor.test-support.ts';
import { BandwidthGovernor, type ByteMeter } from './bandwidth-governor.ts';

/** Watches a promise without awaiting it. */
function track<T>(promise: Promise<T>) {
  const seen: { done: boolean; error: unknown } = { done: false, error: undefined };
  promise.then(
    () => (seen.done = true),
    (err: unknown) => {
      seen.done = true;
      seen.error = err;
    },
  );
  return seen;
}

async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
  return 'passed';
}

describe('BandwidthGovernor', () => {
  it('with both ceilings off, takes pass at once: no timer, no principal state, only the byte count', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p1');
    expect(meter.quantumBytes).toBe(65_536);
    const taken = track(meter.take(65_536));
    await Promise.resolve();
    expect(taken).toEqual({ done: true, error: undefined });
    for (let i = 0; i < 1000; i++) await meter.take(65_536);
    expect(timers.size).toBe(0);
    expect(governor.snapshot()).toMatchObject({ grantedBytes: 1001 * 65_536, waitingQuanta: 0, principals: 0 });
  });

  it('paces one stream at the global rate after the burst, with one timer', async () => {
    // 65536 B/s: burst and quantum 6553 bytes; a quantum refills in 99.991 ms.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 65_536, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p1');
    expect(meter.quantumBytes).toBe(6553);
    await meter.take(6553);
    const second = track(meter.take(6553));
    await settle();
    expect(second.done).toBe(false);
    expect(timers.size).toBe(1);
    expect(governor.snapshot().waitingQuanta).toBe(1);
    await timers.advance(99);
    expect(second.done).toBe(false);
    await timers.advance(1);
    expect(second.done).toBe(true);
    expect(grants.map((g) => g.atMs)).toEqual([0, 100]);
    expect(timers.size).toBe(0);
  });

  it('delivers its rate to a stream that always asks: rate × t + burst − granted stays within one quantum and 1 ms of rate', async () => {
    // What the governor guarantees on a clock that fires wake-ups on time: while a take waits, its
    // bucket holds less than that take plus the refill of the wake-up's rounding up to a whole ms
    // (nothing overflows: the bucket holds at least a quantum). So at every instant t
    //   rate × t + burst − quantum − rate × 1 ms < granted ≤ rate × t + burst.
    for (const rate of [10_240, 65_536, 1_048_576, 10 * 1_048_576 + 1]) {
      for (const ceiling of ['global', 'per principal'] as const) {
        const { governor, timers, grants } = setup(
          ceiling === 'global'
            ? { rateBytesPerSec: rate, perPrincipalBytesPerSec: 0 }
            : { rateBytesPerSec: 0, perPrincipalBytesPerSec: rate },
        );
        const burst = Math.floor(Math.min(rate / 10, 1_048_576));
        const quantum = Math.min(65_536, burst);
        const meter = governor.meter('p');
        let stop = false;
        const loop = (async () => {
          while (!stop) await meter.take(quantum);
        })();
        let elapsedMs = 0;
        for (const stepMs of [0, 1, 7, 13, 50, 99, 250, 333, 1000, 1234, 3001]) {
          await timers.advance(stepMs);
          elapsedMs += stepMs;
          const granted = grants.reduce((sum, g) => sum + g.bytes, 0);
          const budget = (rate * elapsedMs) / 1000 + burst;
          const at = `${ceiling} ${rate} B/s at ${elapsedMs} ms`;
          expect(granted, at).toBeLessThanOrEqual(budget);
          expect(granted, at).toBeGreaterThan(budget - quantum - rate / 1000);
        }
        stop = true;
        governor.close();
        await Promise.allSettled([loop]);
      }
    }
  });

  it('counts the ceiling lost to late wake-ups: what the full bucket could not hold after the due time', async () => {
    // 1 MiB/s: burst and capacity 104857 bytes, quantum 65536. After one quantum 39321 bytes are
    // left; the next quantum is due in 26 ms (25.0004, rounded up to whole ms).
    const run = async (lateMs: number) => {
      const clock = new ManualClock(1_700_000_000_000, 10_000);
      const manual = new ManualTimers(clock);
      // Every wake-up fires `lateMs` after its due time, like a process the OS runs late.
      const timers = {
        setTimeout: (cb: () => void, ms: number) => manual.setTimeout(cb, ms + lateMs),
        clearTimeout: (h: unknown) => manual.clearTimeout(h),
      };
      const governor = new BandwidthGovernor({ clock, timers, rateBytesPerSec: 1_048_576, perPrincipalBytesPerSec: 0 });
      const meter = governor.meter('p');
      await meter.take(65_536);
      const next = track(meter.take(65_536));
      await manual.advance(26 + lateMs);
      expect(next.done).toBe(true);
      return governor.snapshot().lateDroppedBytes;
    };
    expect(await run(0)).toBe(0);
    // 10 ms late: the bucket holds 39321 + 37.7 KB < its capacity; nothing lost.
    expect(await run(10)).toBe(0);
    // 100 ms late: fired at 126 ms the bucket would hold 39321 + 132120.576 bytes; it holds 104857.
    expect(await run(100)).toBe(Math.floor(39_321 + 132_120.576 - 104_857));
  });

  it('two keys (meters) of one principal share one bucket; another principal has its own', async () => {
    const { governor } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 10_240 }); // burst 1024
    const viaKeyA = governor.meter('svc-1');
    const viaKeyB = governor.meter('svc-1');
    await viaKeyA.take(1024);
    const blocked = track(viaKeyB.take(1));
    await governor.meter('svc-2').take(1024);
    await settle();
    expect(blocked.done).toBe(false);
    expect(governor.snapshot().principals).toBe(2);
  });

  it('serves waiting principals round-robin, not streams first-come', async () => {
    // Global 10240 B/s: burst and quantum 1024, one quantum per 100 ms; per principal off.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1024);
    grants.length = 0;
    const streams = ['a', 'a', 'a', 'b', 'c', 'c'].map((principal) => ({
      principal,
      meter: governor.meter(principal),
    }));
    // Every stream keeps one take waiting and asks again as soon as it is granted.
    let stop = false;
    const loops = streams.map(async ({ meter }) => {
      while (!stop) await meter.take(1024);
    });
    await timers.advance(1200);
    stop = true;
    governor.close();
    await Promise.allSettled(loops);
    expect(grants.map((g) => g.principal)).toEqual(['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c']);
    expect(grants.map((g) => g.atMs)).toEqual([100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200]);
  });

  it('one greedy principal with many streams gets no more of the global rate than a principal with one', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 102_400, perPrincipalBytesPerSec: 0 }); // quantum 10240
    let stop = false;
    const loops = [...Array.from({ length: 8 }, () => governor.meter('greedy')), governor.meter('modest')].map(
      async (meter) => {
        while (!stop) await meter.take(10_240);
      },
    );
    await timers.advance(10_000);
    stop = true;
    governor.close();
    await Promise.allSettled(loops);
    const bytesOf = (p: string) => grants.filter((g) => g.principal === p).reduce((sum, g) => sum + g.bytes, 0);
    // 10 s × 100 KiB/s + the 10 KiB burst, split evenly.
    expect(bytesOf('greedy') + bytesOf('modest')).toBe(1_024_000 + 10_240);
    expect(Math.abs(bytesOf('greedy') - bytesOf('modest'))).toBeLessThanOrEqual(10_240);
  });

  it('parallel streams of one principal together stay under its ceiling', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 10_240 });
    let stop = false;
    const loops = Array.from({ length: 4 }, () => governor.meter('p')).map(async (meter) => {
      while (!stop) await meter.take(1024);
    });
    await timers.advance(5000);
    stop = true;
    governor.close();
    await Promise.allSettled(loops);
    expect(grants.reduce((sum, g) => sum + g.bytes, 0)).toBe(5 * 10_240 + 1024);
  });

  it('a principal waiting for its own bucket does not hold back free global quota of others', async () => {
    // Global 102400 B/s (burst 10240), per principal 10240 B/s (burst 1024): quantum 1024.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 102_400, perPrincipalBytesPerSec: 10_240 });
    const slow = governor.meter('a');
    await slow.take(1024);
    const waitingOwn = track(slow.take(1024));
    await settle();
    expect(waitingOwn.done).toBe(false);
    for (let i = 0; i < 5; i++) await governor.meter(`other-${i}`).take(1024);
    expect(waitingOwn.done).toBe(false);
    await timers.advance(100);
    expect(waitingOwn.done).toBe(true);
    expect(grants.filter((g) => g.principal.startsWith('other')).every((g) => g.atMs === 0)).toBe(true);
  });

  it('a ready principal whose quantum waits for the global bucket is not starved by smaller quanta', async () => {
    // Global 10240 B/s: 1024 bytes refill in 100 ms. A wants a full quantum; B keeps asking for 1 byte.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    const big = governor.meter('big');
    const small = governor.meter('small');
    await small.take(1024);
    const bigTake = track(big.take(1024)); // the bucket is empty: waits, and reserves the refill
    let stop = false;
    const smallLoop = (async () => {
      while (!stop) await small.take(1);
    })();
    await timers.advance(99);
    expect(bigTake.done).toBe(false);
    expect(grants.filter((g) => g.principal === 'small' && g.atMs > 0)).toEqual([]);
    await timers.advance(1); // 1024 bytes at 100 ms
    expect(bigTake.done).toBe(true);
    expect(grants.find((g) => g.principal === 'big')?.atMs).toBe(100);
    stop = true;
    await timers.advance(10);
    await smallLoop;
  });

  it('bounds waiting to 256 quanta over all streams; the next waiting take is busy', async () => {
    const { governor } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1024);
    const waiting = Array.from({ length: 256 }, (_, i) => track(governor.meter(`p${i % 7}`).take(1)));
    await settle();
    expect(governor.snapshot().waitingQuanta).toBe(256);
    // p0 holds 37 of them, as many as any: its next is refused.
    const refused = governor.meter('p0').take(1);
    expect(await code(refused)).toBe('busy');
    await refused.catch((err: PolicyError) => expect(err.headers['retry-after']).toBe('1'));
    expect(governor.snapshot()).toMatchObject({ waitingQuanta: 256, rejectedBusy: 1 });
    expect(waiting.some((w) => w.done)).toBe(false);
    // A principal holding none waits in place of the last take of one holding the most.
    const late = track(governor.meter('late').take(1));
    await settle();
    expect(late.done).toBe(false);
    expect(governor.snapshot()).toMatchObject({ waitingQuanta: 256, rejectedBusy: 2 });
    expect(waiting.filter((w) => w.done).map((w) => (w.error as PolicyError).code)).toEqual(['busy']);
  });

  it('allows one pending take per stream', async () => {
    const { governor } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p');
    await meter.take(1024);
    const first = track(meter.take(1024));
    await expect(meter.take(1)).rejects.toThrow(/has not settled/);
    await expect(meter.take(1025)).rejects.toThrow(RangeError);
    await settle();
    expect(first.done).toBe(false);
  });

  it('serves 1,100 principals with a 1,000-state table: idle states with full buckets are evicted, oldest first', async () => {
    const { governor, clock } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 1_000_000 });
    // Each principal takes its whole burst (100,000 B), so its bucket needs 100 ms to be full again.
    for (let i = 0; i < 1100; i++) {
      const meter = governor.meter(`svc-${i}`);
      await meter.take(65_536);
      await meter.take(34_464);
      clock.advance(1);
    }
    // Never refused: by the time the table filled, the first principals had refilled.
    expect(governor.snapshot()).toMatchObject({ principals: 1000, rejectedBusy: 0 });
  });

  it('refuses a new principal with busy only while no state is evictable, then takes the oldest idle one', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 1_000_000, maxPrincipals: 3 });
    const meters = ['a', 'b', 'c'].map((p) => governor.meter(p));
    for (const m of meters) await m.take(65_536); // every bucket below full
    const waiting = track(meters[2]!.take(65_536)); // c waits for its own bucket
    expect(() => governor.meter('d')).toThrow(expect.objectContaining({ code: 'busy' }) as Error);
    expect(governor.snapshot()).toMatchObject({ principals: 3, rejectedBusy: 1 });
    await timers.advance(70); // a and b are full again (65,536 B refill in 66 ms); c's take passed at 31 ms, so c is not
    expect(waiting.done).toBe(true);
    await governor.meter('d').take(65_536); // evicts a: idle, full, active longest ago (a and b tie: a was first)
    expect(governor.snapshot().principals).toBe(3);
    // An evicted principal comes back with a new (full) bucket, evicting b, the other idle full one.
    await meters[0]!.take(65_536);
    expect(governor.snapshot()).toMatchObject({ principals: 3, rejectedBusy: 1 });
    // Now a, c and d are all refilling: nothing is evictable.
    expect(() => governor.meter('e')).toThrow(expect.objectContaining({ code: 'busy' }) as Error);
    expect(governor.snapshot()).toMatchObject({ principals: 3, rejectedBusy: 2 });
  });

  it('fenced: waiting and new takes reject lease_lost, never fall back to unlimited', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p');
    await meter.take(1024);
    const waiting = meter.take(1024);
    governor.fence();
    expect(await code(waiting)).toBe('lease_lost');
    expect(await code(meter.take(1))).toBe('lease_lost');
    expect(() => governor.meter('q')).toThrow(/lost its share/);
    await timers.advance(10_000);
    expect(await code(meter.take(1))).toBe('lease_lost');
    expect(timers.size).toBe(0);
    expect(governor.snapshot()).toMatchObject({ fenced: true, waitingQuanta: 0 });
  });

  it('fences itself the moment the permit lapses, for waiting and new takes alike', async () => {
    let permitted = true;
    const { governor, timers, grants } = setup({
      rateBytesPerSec: 10_240,
      perPrincipalBytesPerSec: 0,
      isPermitted: () => permitted,
    });
    const meter = governor.meter('p');
    await meter.take(1024);
    // Observe the rejection from the start: it happens inside advance(), before the expect below.
    const waiting = code(meter.take(1024));
    await timers.advance(50);
    permitted = false;
    await timers.advance(50); // the refill timer finds the permit gone: no grant
    expect(await waiting).toBe('lease_lost');
    permitted = true; // an expired permission is not resumed
    expect(await code(meter.take(1))).toBe('lease_lost');
    expect(() => governor.meter('q')).toThrow(PolicyError);
    expect(grants).toHaveLength(1);
    expect(governor.snapshot().fenced).toBe(true);
  });

  // The permit is read again when a take first serves those waiting before it: a lapse between the
  // take's own check and that one must neither grant it nor leave it waiting on a fenced governor.
  for (const rateBytesPerSec of [10 * 1_048_576, 1_048_576])
    it(`a permit that lapses during a take fences that take too (global ${rateBytesPerSec} B/s)`, async () => {
      let checks = 0;
      let lapseAfter = Infinity;
      const { governor, timers, grants } = setup({
        rateBytesPerSec,
        perPrincipalBytesPerSec: 655_360,
        isPermitted: () => ++checks <= lapseAfter,
      });
      const a = governor.meter('a');
      while (a.tryTake(a.quantumBytes)) await settle();
      const waiting = code(a.take(a.quantumBytes)); // waits for a's own bucket
      const b = governor.meter('b');
      const grantedBefore = grants.length;
      lapseAfter = checks + 1; // b's first check passes; the next one finds the permit gone
      const taken = track(b.take(b.quantumBytes));
      await timers.advance(5_000);
      expect(await waiting).toBe('lease_lost');
      expect(taken).toEqual({ done: true, error: expect.objectContaining({ code: 'lease_lost' }) });
      expect(grants).toHaveLength(grantedBefore);
      expect(governor.snapshot()).toMatchObject({ fenced: true, waitingQuanta: 0 });
      expect(timers.size).toBe(0);
    });

  it('a permit that lapses during a tryTake grants nothing', async () => {
    let checks = 0;
    let lapseAfter = Infinity;
    const { governor, grants } = setup({
      rateBytesPerSec: 10 * 1_048_576,
      perPrincipalBytesPerSec: 655_360,
      isPermitted: () => ++checks <= lapseAfter,
    });
    const a = governor.meter('a');
    while (a.tryTake(a.quantumBytes)) await settle();
    const waiting = code(a.take(a.quantumBytes));
    const b = governor.meter('b');
    const grantedBefore = grants.length;
    lapseAfter = checks + 1;
    expect(b.tryTake(b.quantumBytes)).toBe(false);
    expect(await waiting).toBe('lease_lost');
    expect(grants).toHaveLength(grantedBefore);
    expect(governor.snapshot().fenced).toBe(true);
  });

  it('fences an unlimited governor too', async () => {
    const { governor } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p');
    governor.fence();
    expect(await code(meter.take(1))).toBe('lease_lost');
  });

  it('close() cancels the takes waiting at that moment (unavailable) and nothing else (ADR 0008 preClose)', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 10_240 });
    const meter = governor.meter('p');
    await meter.take(1024);
    const waiting = meter.take(1024);
    governor.close();
    expect(await code(waiting)).toBe('unavailable');
    expect(timers.size).toBe(0);
    expect(governor.snapshot()).toMatchObject({ closed: true, waitingQuanta: 0, grantedBytes: 1024 });
    // A stream that was not waiting goes on, paced as before: its next take waits for tokens.
    let granted = false;
    const later = meter.take(1024).then(() => (granted = true));
    await timers.advance(99);
    expect(granted).toBe(false);
    await timers.advance(1);
    await later;
    expect(granted).toBe(true);
    expect(() => governor.meter('q')).not.toThrow();
    expect(governor.snapshot()).toMatchObject({ closed: true, grantedBytes: 2048 });
  });

  it('cancel does not refund: granted bytes stay spent, a cancelled waiting quantum is dropped', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    const meter = governor.meter('p');
    const controller = new AbortController();
    await meter.take(1024, controller.signal);
    controller.abort(new Error('client went away'));
    // The 1024 granted bytes are not returned: the next take still waits a full refill.
    const next = track(governor.meter('q').take(1024));
    await timers.advance(99);
    expect(next.done).toBe(false);
    await timers.advance(1);
    expect(next.done).toBe(true);

    const second = new AbortController();
    const cancelled = meter.take(1024, second.signal);
    await timers.advance(50);
    second.abort(new Error('client went away'));
    await expect(cancelled).rejects.toThrow('client went away');
    expect(governor.snapshot()).toMatchObject({ waitingQuanta: 0, grantedBytes: 2048 });
    expect(timers.size).toBe(0);
    // What the cancelled take did not get is simply still in the bucket for the next one.
    await timers.advance(50);
    await governor.meter('r').take(1024);
    expect(grants.map((g) => [g.principal, g.atMs])).toEqual([
      ['p', 0],
      ['q', 100],
      ['r', 200],
    ]);
  });

  it('a cancelled reservation frees the global refill for the others', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1000);
    const controller = new AbortController();
    const big = governor.meter('big').take(1024, controller.signal);
    const small = track(governor.meter('small').take(10));
    await settle();
    expect(small.done).toBe(false); // held behind the reservation
    controller.abort();
    await expect(big).rejects.toThrow();
    await settle();
    expect(small.done).toBe(true);
    expect(grants.at(-1)).toEqual({ principal: 'small', bytes: 10, atMs: 0 });
    expect(timers.size).toBe(0);
  });

  it('rejects a take whose signal already fired without spending anything', async () => {
    const { governor } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await expect(governor.meter('p').take(1024, AbortSignal.abort(new Error('gone')))).rejects.toThrow('gone');
    expect(governor.snapshot().grantedBytes).toBe(0);
  });

  it('refuses nonsense options', () => {
    const clock = new ManualClock();
    expect(() => new BandwidthGovernor({ clock, rateBytesPerSec: -1, perPrincipalBytesPerSec: 0 })).toThrow(RangeError);
    expect(
      () => new BandwidthGovernor({ clock, rateBytesPerSec: 0, perPrincipalBytesPerSec: 0, maxWaiting: 0 }),
    ).toThrow(/maxWaiting/);
    expect(() => new BandwidthGovernor({ clock, rateBytesPerSec: 1, perPrincipalBytesPerSec: 0 }).meter('')).toThrow(
      TypeError,
    );
  });

  it('tryTake grants at once exactly what take would grant at once, and a refusal changes nothing', async () => {
    // 640 KiB/s: a burst (a tenth of a second) of 64 KiB, one quantum.
    const { governor, clock, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 655_360 });
    const meter = governor.meter('p1');
    expect(meter.tryTake(65_536)).toBe(true); // the full bucket
    expect(meter.tryTake(1)).toBe(false); // empty: it would wait
    expect(meter.tryTake(65_537)).toBe(false); // above the quantum: take would refuse it
    expect(grants.map((g) => g.bytes)).toEqual([65_536]);
    clock.advance(50); // 50 ms refill half of it
    expect(meter.tryTake(32_769)).toBe(false);
    expect(meter.tryTake(32_768)).toBe(true);
    // A take that waits holds the meter: tryTake must not pass it.
    const waiting = track(meter.take(1024));
    expect(meter.tryTake(1)).toBe(false);
    governor.close();
    await settle();
    expect(waiting.done).toBe(true);
    // The unlimited governor counts what it passes, like take.
    const open = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 });
    expect(open.governor.meter('p2').tryTake(4096)).toBe(true);
    expect(open.governor.snapshot().grantedBytes).toBe(4096);
  });

  it('refuses a bad take or principal, saying what was wrong; tryTake refuses the same takes', async () => {
    const limited = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 }).governor; // quantum 1024
    const open = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 0 }).governor;
    for (const governor of [limited, open]) {
      const meter = governor.meter('p');
      const quantum = governor.quantumBytes;
      for (const bytes of [-1, 0.5, quantum + 1]) {
        await expect(meter.take(bytes)).rejects.toThrow(
          new RangeError(`bytes: expected an integer from 0 to the quantum ${quantum}, got ${bytes}`),
        );
        expect(meter.tryTake(bytes)).toBe(false);
      }
      await expect(meter.take(0)).resolves.toBeUndefined();
      expect(governor.snapshot()).toMatchObject({ grantedBytes: 0, rejectedBusy: 0 });
      expect(() => governor.meter('')).toThrow(new TypeError('principalId: expected a non-empty string'));
      expect(() => governor.meter(7 as unknown as string)).toThrow(TypeError);
    }
    expect(
      () =>
        new BandwidthGovernor({
          clock: new ManualClock(),
          rateBytesPerSec: 1,
          perPrincipalBytesPerSec: 0,
          maxPrincipals: 0,
        }),
    ).toThrow('maxPrincipals: expected a positive integer, got 0');
  });

  it('counts grants and waits: a take that passes at once is not a waited one', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 }); // burst 1024
    const meter = governor.meter('p');
    await meter.take(512);
    await meter.take(512);
    expect(governor.snapshot()).toMatchObject({ grantedBytes: 1024, grantedQuanta: 2, waitedTakes: 0 });
    const waiting = track(meter.take(1024));
    await timers.advance(100);
    expect(waiting.done).toBe(true);
    expect(governor.snapshot()).toMatchObject({ grantedBytes: 2048, grantedQuanta: 3, waitedTakes: 1 });
  });

  it('a zero-byte take passes even behind a reservation, and counts a grant of nothing', async () => {
    const { governor } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1024);
    const reserved = track(governor.meter('big').take(1024));
    await settle();
    expect(reserved.done).toBe(false);
    const other = governor.meter('other');
    expect(other.tryTake(0)).toBe(true);
    await expect(other.take(0)).resolves.toBeUndefined();
    expect(governor.snapshot()).toMatchObject({ grantedBytes: 1024, waitingQuanta: 1 });
  });

  it('a stream that has taken less goes before the next quantum of a busier stream of its principal', async () => {
    // Per principal 10240 B/s (burst 1024, a byte per 0.1 ms): the first stream waits for 1024 bytes.
    const { governor, clock, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 10_240 });
    const first = governor.meter('p');
    const second = governor.meter('p');
    await first.take(1024);
    const waiting = track(first.take(1024));
    clock.advance(50); // 512 bytes in the bucket: enough for the second stream's 100, not for the first
    // tryTake does not jump the principal's queue; take puts the small stream first in it.
    expect(second.tryTake(100)).toBe(false);
    const small = track(second.take(100));
    await settle();
    expect([waiting.done, small.done]).toEqual([false, true]);
    expect(grants.at(-1)).toMatchObject({ principal: 'p', bytes: 100, atMs: 50 });
  });

  it('streams of one principal that all keep asking alternate by bytes, oldest first on a tie', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 10_240 });
    const big = governor.meter('p');
    const small = governor.meter('p');
    await big.take(1024); // the bucket is empty
    const order: string[] = [];
    const loop = async (meter: ByteMeter, name: string, bytes: number, times: number) => {
      for (let i = 0; i < times; i++) {
        await meter.take(bytes);
        order.push(name);
      }
    };
    const done = Promise.all([loop(big, 'big', 1024, 2), loop(small, 'small', 256, 5)]);
    await timers.advance(1000);
    await done;
    // small has taken nothing when both wait: it goes first until it has taken as much as big (1024
    // bytes); on that tie big's older take goes, then small again, which has taken less.
    expect(order).toEqual(['small', 'small', 'small', 'small', 'big', 'small', 'big']);
    expect(grants.reduce((sum, g) => sum + g.bytes, 0)).toBe(1024 * 3 + 256 * 5);
  });

  it('a new take first serves the waiting takes whose time has come (their wake-up not yet run)', async () => {
    // Global 10240 B/s, capacity 1024: big waits for 512 bytes (due at 50 ms).
    const { governor, clock, grants } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1024);
    const reserved = track(governor.meter('big').take(512));
    await settle();
    expect(reserved.done).toBe(false);
    clock.advance(100); // the bucket is full again; the wake-up has not run
    const small = track(governor.meter('small').take(100));
    await settle();
    expect([reserved.done, small.done]).toEqual([true, true]);
    expect(grants.slice(1).map((g) => [g.principal, g.atMs])).toEqual([
      ['big', 100],
      ['small', 100],
    ]);
    // small passed at once, without waiting: only big's take waited.
    expect(governor.snapshot().waitedTakes).toBe(1);
  });

  it('a principal whose only waiting take was cancelled waits and is served normally next time', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1024);
    const meter = governor.meter('p');
    const controller = new AbortController();
    const cancelled = meter.take(1024, controller.signal).catch(() => 'cancelled');
    await settle();
    controller.abort(new Error('gone'));
    expect(await cancelled).toBe('cancelled');
    const next = track(meter.take(1024));
    await timers.advance(100);
    expect(next).toEqual({ done: true, error: undefined });
  });

  it('a principal waiting for its own bucket at the head of the turns does not stop those behind it', async () => {
    // Global 102400 B/s (burst 10240), per principal 10240 B/s (burst 1024): quantum 1024.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 102_400, perPrincipalBytesPerSec: 10_240 });
    await governor.meter('drain').take(1024);
    for (let i = 0; i < 8; i++) await governor.meter(`d${i}`).take(1024);
    const own = governor.meter('own');
    await own.take(1024); // the global bucket is empty now
    const ownWaits = track(own.take(1024)); // first in the turns: waits 100 ms for its own bucket
    const b = track(governor.meter('b').take(1024)); // behind it: waits 10 ms for the global refill
    await settle();
    expect([ownWaits.done, b.done]).toEqual([false, false]);
    await timers.advance(10);
    expect([ownWaits.done, b.done]).toEqual([false, true]);
    expect(grants.at(-1)).toMatchObject({ principal: 'b', atMs: 10 });
    await timers.advance(90);
    expect(ownWaits.done).toBe(true);
  });

  it('arms the wake-up for the earliest take that can pass, replacing a later one', async () => {
    // Per principal 10240 B/s: A waits 100 ms for 1024 bytes; B, asking later for 103, only 10 ms.
    const { governor, timers, grants, clock } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 10_240 });
    const a = governor.meter('a');
    const b = governor.meter('b');
    await a.take(1024);
    await b.take(1024);
    const aWaits = track(a.take(1024));
    clock.advance(90); // B's bucket: 921.6 bytes
    const bWaits = track(b.take(1024)); // needs 102.4 more: 10 ms
    await timers.advance(10);
    expect(bWaits.done).toBe(true);
    expect(aWaits.done).toBe(true);
    expect(grants.slice(2).map((g) => [g.principal, g.atMs])).toEqual([
      ['a', 100],
      ['b', 100],
    ]);
    expect(timers.size).toBe(0);
  });

  it('cancelling one of two waiting takes of a principal keeps the other in its turn', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1024);
    const controller = new AbortController();
    const cancelled = governor
      .meter('p')
      .take(512, controller.signal)
      .catch(() => 'cancelled');
    const kept = track(governor.meter('p').take(512));
    await settle();
    controller.abort(new Error('gone'));
    expect(await cancelled).toBe('cancelled');
    await timers.advance(50);
    expect(kept.done).toBe(true);
    expect(kept.error).toBeUndefined();
  });

  it('a granted take leaves no listener on its signal', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    await governor.meter('drain').take(1024);
    const controller = new AbortController();
    const waiting = track(governor.meter('p').take(1024, controller.signal));
    await settle();
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    await timers.advance(100);
    expect(waiting.done).toBe(true);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
  });

  it('close() acts once: takes that wait after it are paced as before, a second close leaves them', async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0 });
    governor.close();
    const meter = governor.meter('p');
    await meter.take(1024);
    const waiting = track(meter.take(1024));
    governor.close();
    await timers.advance(100);
    expect(waiting).toEqual({ done: true, error: undefined });
  });

  it('refusals when full say why and when to retry', async () => {
    const { governor } = setup({
      rateBytesPerSec: 0,
      perPrincipalBytesPerSec: 10_240,
      maxPrincipals: 1,
      maxWaiting: 1,
    });
    const meter = governor.meter('a');
    await meter.take(1024);
    const waiting = track(meter.take(1024));
    await settle();
    expect(waiting.done).toBe(false);
    const refused = await governor
      .meter('a')
      .take(1)
      .catch((err: PolicyError) => err);
    expect(refused).toMatchObject({ code: 'busy', headers: { 'retry-after': '1' } });
    expect((refused as Error).message).toBe('More than 1 quanta are waiting for bandwidth.');
    let full: unknown;
    try {
      governor.meter('b');
    } catch (err) {
      full = err;
    }
    expect(full).toMatchObject({ code: 'busy', headers: { 'retry-after': '1' } });
    expect((full as Error).message).toBe('1 principals are transferring or refilling their budgets; retry shortly.');
  });

  it("one principal's streams filling the waiting bound do not keep another principal's take out: the heaviest gives up its last", async () => {
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0, maxWaiting: 5 });
    const codes = (takes: { error: unknown }[]) => takes.map((t) => (t.error as PolicyError | undefined)?.code);
    await governor.meter('a').take(1024); // the burst
    const a = [0, 1, 2, 3, 4].map(() => track(governor.meter('a').take(1024)));
    await settle();
    expect(governor.snapshot().waitingQuanta).toBe(5);
    // Before, b was refused busy as long as a's streams waited (an upload cut mid-body).
    const b = [track(governor.meter('b').take(1024))];
    await settle();
    expect(b[0]!.done).toBe(false);
    expect(codes(a)).toEqual([undefined, undefined, undefined, undefined, 'busy']);
    // a holds the most: its own next take is refused, not one of b's.
    expect(await code(governor.meter('a').take(1024))).toBe('busy');
    b.push(track(governor.meter('b').take(1024)));
    await settle();
    expect(codes(a)).toEqual([undefined, undefined, undefined, 'busy', 'busy']);
    // a 3, b 2: a holds only one more, so b's next is refused and nothing of a's.
    expect(await code(governor.meter('b').take(1024))).toBe('busy');
    expect(codes(a)).toEqual([undefined, undefined, undefined, 'busy', 'busy']);
    expect(governor.snapshot()).toMatchObject({ waitingQuanta: 5, rejectedBusy: 4 });
    await timers.advance(1000);
    expect([...a.slice(0, 3), ...b].map((t) => [t.done, t.error])).toEqual(Array(5).fill([true, undefined]));
  });

  it('never evicts a principal whose take waits, even one not holding the reservation', async () => {
    // Global only: idle states have no bucket and are always evictable; waiting ones never.
    const { governor, timers } = setup({ rateBytesPerSec: 10_240, perPrincipalBytesPerSec: 0, maxPrincipals: 2 });
    await governor.meter('a').take(1024);
    const a = track(governor.meter('a').take(1024)); // holds the reservation
    const c = track(governor.meter('c').take(1024)); // waits behind it
    await settle();
    expect(() => governor.meter('b')).toThrow(expect.objectContaining({ code: 'busy' }) as Error);
    await timers.advance(200);
    expect([a.done, c.done]).toEqual([true, true]);
    expect(() => governor.meter('b')).not.toThrow();
  });

  it('counts late wake-ups only for the global bucket, exactly, when it overflows after the due time', async () => {
    // 65536 B/s: burst = quantum = capacity 6553 bytes; 6553 bytes refill in 99.99 ms, the wake-up is
    // due at 100 ms (whole ms), when the bucket already holds 6553.6 bytes: 0.6 overflowing.
    const run = async (lateMs: number, perPrincipal: boolean) => {
      const clock = new ManualClock(1_700_000_000_000, 10_000);
      const manual = new ManualTimers(clock);
      const timers = {
        setTimeout: (cb: () => void, ms: number) => manual.setTimeout(cb, ms + lateMs),
        clearTimeout: (h: unknown) => manual.clearTimeout(h),
      };
      const governor = new BandwidthGovernor(
        perPrincipal
          ? { clock, timers, rateBytesPerSec: 10_000_000, perPrincipalBytesPerSec: 65_536 }
          : { clock, timers, rateBytesPerSec: 65_536, perPrincipalBytesPerSec: 0 },
      );
      const meter = governor.meter('p');
      await meter.take(governor.quantumBytes);
      const next = track(meter.take(governor.quantumBytes));
      await manual.advance(100 + lateMs);
      expect(next.done).toBe(true);
      return governor.snapshot().lateDroppedBytes;
    };
    // 50 ms late: 0.6 + 3276.8 bytes overflowed by then, 0.6 of it before the due time.
    expect(await run(50, false)).toBe(3276);
    // A wake-up for a principal's own bucket is not the global ceiling's loss.
    expect(await run(50, true)).toBe(0);
  });
});

describe('small requests beside a big throttled transfer (issue 40, item 4)', () => {
  const RATE = 10 * 1_048_576; // burst 1 MiB, quantum 64 KiB, headroom min(64 KiB, (1 MiB − 64 KiB) / 2)
  const QUANTUM = 65_536;
  const HEADROOM = 65_536;

  /** A big transfer that always asks for a quantum until stopped. */
  function saturate(meter: ByteMeter) {
    const state = { stop: false };
    const loop = (async () => {
      while (!state.stop) await meter.take(QUANTUM);
    })().catch(() => {});
    return { stop: () => (state.stop = true), loop };
  }

  it("another principal's 4 KiB responses pass at once while a big transfer saturates the ceiling, and the big one keeps the rate", async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: RATE, perPrincipalBytesPerSec: 0 });
    const big = saturate(governor.meter('big'));
    await timers.advance(1000); // past the burst: the big transfer waits on the global bucket
    const small = governor.meter('small');
    // The first small response after a second without one may wait for its bytes' refill: 4096 / RATE
    // = 0.39 ms, rounded up to the 1 ms timer.
    const first = track(small.take(4096));
    await timers.advance(1);
    expect(first.done).toBe(true);
    const waitedBefore = governor.snapshot().waitedTakes;
    // From then on the big transfer's waiting quantum leaves the headroom: every small response, one
    // each 20 ms for 5 s, passes without waiting, on the instant it asks.
    for (let i = 0; i < 250; i++) {
      await timers.advance(20);
      const t = track(small.take(4096));
      await settle();
      expect(t.done, `small response ${i}`).toBe(true);
    }
    // Only the big transfer's takes waited in those 5 s: at most one per quantum granted to it.
    const bigInWindow = grants.filter((g) => g.principal === 'big' && g.atMs > 1001).length;
    expect(governor.snapshot().waitedTakes - waitedBefore).toBeLessThanOrEqual(bigInWindow + 1);
    // The ceiling is used: over the 5 s everything granted is within a quantum, the headroom and
    // 1 ms of rate of rate × t (the bucket only stays fuller by the headroom), and never above the bound.
    const windowBytes = grants.filter((g) => g.atMs > 1001).reduce((sum, g) => sum + g.bytes, 0);
    expect(windowBytes).toBeLessThanOrEqual(RATE * 5 + 1_048_576);
    expect(windowBytes).toBeGreaterThan(RATE * 5 - QUANTUM - HEADROOM - RATE / 1000);
    big.stop();
    governor.close();
    await big.loop;
  });

  it('without another principal active within a second, the waiting transfer leaves no headroom', async () => {
    const { governor, timers, grants } = setup({ rateBytesPerSec: RATE, perPrincipalBytesPerSec: 0 });
    await governor.meter('other').take(4096);
    await timers.advance(1001); // that grant is now more than a second old
    const big = saturate(governor.meter('big'));
    await timers.advance(3000);
    // Burst, then exactly the rate: nothing held back for the idle other principal.
    const bigBytes = grants.filter((g) => g.principal === 'big').reduce((sum, g) => sum + g.bytes, 0);
    expect(bigBytes).toBeGreaterThan(1_048_576 - 4096 + RATE * 3 - QUANTUM - RATE / 1000);
    big.stop();
    governor.close();
    await big.loop;
  });

  it('a global ceiling whose capacity is one quantum has no headroom: a waiting quantum needs only itself', async () => {
    // 655360 B/s: burst = quantum = capacity = 65536.
    const { governor, timers, grants } = setup({ rateBytesPerSec: 655_360, perPrincipalBytesPerSec: 0 });
    await governor.meter('other').take(65_536);
    const waits = track(governor.meter('big').take(65_536));
    await timers.advance(99);
    expect(waits.done).toBe(false);
    await timers.advance(1);
    expect(waits.done).toBe(true);
    expect(grants.at(-1)).toMatchObject({ principal: 'big', atMs: 100 });
  });

  it('the headroom is min(quantum, (capacity − quantum) / 2), kept while the small principal was granted within the last second, that second included', async () => {
    // 1 MiB/s: burst = capacity = 104857, quantum 65536, headroom min(65536, floor(39321 / 2)) = 19660.
    const rate = 1_048_576;
    const waitMs = (need: number, held: number) => Math.ceil(((need - held) / rate) * 1000);
    for (const [gapMs, headroom] of [
      [0, 19_660],
      [1000, 19_660],
      [1001, 0],
    ] as const) {
      const { governor, timers, clock } = setup({ rateBytesPerSec: rate, perPrincipalBytesPerSec: 0 });
      await governor.meter('small').take(4096); // a short grant: small sends small requests
      clock.advance(gapMs);
      const big = governor.meter('big');
      await big.take(QUANTUM); // its first: it has had no turn yet, so it leaves nothing
      const held = gapMs === 0 ? 104_857 - 4096 - QUANTUM : 104_857 - QUANTUM;
      // Its next one is ahead of the fair-queueing clock: it waits for a quantum plus the headroom.
      const next = track(big.take(QUANTUM));
      const dueMs = waitMs(QUANTUM + headroom, held);
      await timers.advance(dueMs - 1);
      expect(next.done, `${gapMs} ms after the small grant`).toBe(false);
      await timers.advance(1);
      expect(next.done, `${gapMs} ms after the small grant`).toBe(true);
      governor.close();
    }
  });

  it('who leaves the headroom: a busy principal, whether or not it was granted last; never a principal on its first turn', async () => {
    // 1 MiB/s as above: capacity 104857, headroom 19660.
    const rate = 1_048_576;
    const dueMs = (need: number, held: number) => Math.ceil(((need - held) / rate) * 1000);
    const expectWait = async (timers: ManualTimers, take: Promise<void>, ms: number, what: string) => {
      const t = track(take);
      await timers.advance(ms - 1);
      expect(t.done, what).toBe(false);
      await timers.advance(1);
      expect(t.done, what).toBe(true);
    };
    {
      // A newcomer after a short grant of another principal: it has had no turn, so no headroom.
      const { governor, timers } = setup({ rateBytesPerSec: rate, perPrincipalBytesPerSec: 0 });
      await governor.meter('drain').take(QUANTUM);
      await governor.meter('small').take(4096);
      const held = 104_857 - QUANTUM - 4096;
      await expectWait(timers, governor.meter('new').take(QUANTUM), dueMs(QUANTUM, held), 'newcomer');
      governor.close();
    }
    {
      // big, then small (granted last), then big again: big is busy and small the last other one.
      const { governor, timers } = setup({ rateBytesPerSec: rate, perPrincipalBytesPerSec: 0 });
      const big = governor.meter('big');
      await big.take(QUANTUM);
      await governor.meter('small').take(4096);
      const held = 104_857 - QUANTUM - 4096;
      await expectWait(timers, big.take(QUANTUM), dueMs(QUANTUM + 19_660, held), 'busy, small granted last');
      governor.close();
    }
    {
      // The small principal now has a take waiting (for its repository's 64 KiB/s ceiling, 62 ms):
      // it is backlogged, so big leaves no headroom for it.
      const { governor, timers } = setup({ rateBytesPerSec: rate, perPrincipalBytesPerSec: 0 });
      const big = governor.meter('big');
      await big.take(QUANTUM);
      const small = governor.meter('small', 1, [{ key: 'repository:slow', rateBytesPerSec: 65_536 }]);
      await small.take(4096); // short of its quantum, 6553
      const waiting = track(small.take(6553));
      const held = 104_857 - QUANTUM - 4096;
      await expectWait(timers, big.take(QUANTUM), dueMs(QUANTUM, held), 'busy, the small principal waiting');
      expect(waiting.done).toBe(false);
      governor.close();
    }
  });

  it("a small response of the big transfer's own principal waits only for its own bytes", async () => {
    // Per principal 1 MiB/s (burst 104857, quantum 64 KiB): the big stream drains the principal's bucket.
    const { governor, timers, clock } = setup({ rateBytesPerSec: 0, perPrincipalBytesPerSec: 1_048_576 });
    const big = saturate(governor.meter('p'));
    await timers.advance(2000);
    const small = governor.meter('p');
    const startMs = clock.monotonicMs();
    const t = track(small.take(4096));
    // At most 4096 bytes of refill at 1 MiB/s (3.9 ms, 4 ms on the timer), not the big stream's
    // waiting quantum first (62.5 ms).
    await timers.advance(4);
    expect(t.done).toBe(true);
    expect(clock.monotonicMs() - startMs).toBeLessThanOrEqual(Math.ceil((4096 / 1_048_576) * 1000));
    big.stop();
    governor.close();
    await big.loop;
  });
});
