import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../clock.ts';
import { ManualTimers } from '../timers.ts';
import { BandwidthGovernor } from './bandwidth-governor.ts';

const MIB = 1_048_576;

/**
 * ADR 0008's numbers, computed here rather than read from the code under test: burst =
 * floor(min(rate / 10, 1 MiB)); the quantum is at most 64 KiB and at most every enabled burst, but at
 * least 1 byte; a bucket holds at most max(burst, quantum).
 */
const burstOf = (rate: number) => Math.floor(Math.min(rate / 10, MIB));
const quantumOf = (rates: readonly number[]) =>
  Math.max(1, Math.min(65_536, ...rates.filter((rate) => rate > 0).map(burstOf)));
const capacityOf = (rate: number, quantum: number) => Math.max(burstOf(rate), quantum);

/** A monotonic clock kept in whole microseconds, so the checker and the governor agree exactly. */
class MicrosecondClock implements Clock {
  us = 0;
  wallMs(): number {
    return 1_700_000_000_000 + this.us / 1000;
  }
  monotonicMs(): number {
    return this.us / 1000;
  }
  advance(ms: number): void {
    this.us += Math.round(ms * 1000);
  }
}

interface GrantEvent {
  principal: string;
  bytes: number;
  us: number;
}

/**
 * The ADR bound, checked exactly (BigInt) over every interval between grant instants:
 * from start:          granted(0..t] × 10^6 ≤ R × t_us + burst × 10^6
 * from any instant s:  granted[s..t] × 10^6 ≤ R × (t − s)_us + capacity × 10^6
 * The second is the "from a full bucket" reading (a bucket holds at most its capacity at any s).
 * O(n): max over s ≤ t of (R × s − granted before s) is carried along.
 */
function checkBound(events: readonly GrantEvent[], rate: number, burst: number, capacity: number): void {
  const R = BigInt(rate);
  const M = 1_000_000n;
  let granted = 0n;
  let bestStart = -(1n << 200n);
  for (const event of events) {
    const t = BigInt(event.us);
    const before = granted;
    const candidate = R * t - before * M;
    if (candidate > bestStart) bestStart = candidate;
    granted += BigInt(event.bytes);
    const excessFromStart = granted * M - R * t - BigInt(burst) * M;
    expect(excessFromStart <= 0n, `from start: ${granted} bytes by ${event.us} µs at ${rate} B/s, burst ${burst}`).toBe(
      true,
    );
    const worstInterval = granted * M - R * t + bestStart;
    expect(
      worstInterval <= BigInt(capacity) * M,
      `an interval ending at ${event.us} µs exceeds rate × elapsed + ${capacity}`,
    ).toBe(true);
  }
}

const rateArb = fc.oneof(
  fc.constant(0),
  fc.constantFrom(1, 9, 10, 11, 1000, 10_240, 65_536, 655_360, 10 * MIB + 1, 2 ** 40),
  fc.integer({ min: 1, max: 50_000_000 }),
);

const opArb = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('advance' as const), us: fc.integer({ min: 0, max: 250_000 }) }),
  },
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('take' as const),
      stream: fc.nat(15),
      size: fc.double({ min: 0, max: 1, noNaN: true }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), stream: fc.nat(15) }) },
);

describe('BandwidthGovernor bound (property)', () => {
  it('granted bytes ≤ rate × elapsed + burst, globally and per principal, under random chunks, principals, weights, cancellations and state evictions', async () => {
    await fc.assert(
      fc.asyncProperty(
        rateArb,
        rateArb,
        fc.array(fc.record({ p: fc.nat(4), weight: fc.integer({ min: 1, max: 1000 }) }), {
          minLength: 1,
          maxLength: 16,
        }),
        fc.integer({ min: 1, max: 12 }),
        fc.array(opArb, { maxLength: 120 }),
        fc.integer({ min: 1, max: 6 }),
        async (globalRate, principalRate, streamPrincipals, maxWaiting, ops, maxPrincipals) => {
          const clock = new MicrosecondClock();
          clock.us = 3_000_000; // not starting at 0
          const startUs = clock.us;
          const timers = new ManualTimers(clock);
          const events: GrantEvent[] = [];
          const governor = new BandwidthGovernor({
            rateBytesPerSec: globalRate,
            perPrincipalBytesPerSec: principalRate,
            clock,
            timers,
            maxWaiting,
            // Smaller than the principals in play: idle full states are evicted and recreated (or a take is busy).
            maxPrincipals,
            onGrant: (principal, bytes) => events.push({ principal, bytes, us: clock.us - startUs }),
          });
          const quantum = quantumOf([globalRate, principalRate]);
          expect(governor.quantumBytes).toBe(quantum);
          const streams = streamPrincipals.map((p) => ({
            meter: governor.meter(`p${p.p}`, p.weight),
            pending: null as null | { controller: AbortController; settled: boolean },
          }));
          const outcomes: Promise<unknown>[] = [];
          for (const op of ops) {
            if (op.kind === 'advance') {
              await timers.advance(op.us / 1000);
            } else {
              const stream = streams[op.stream % streams.length]!;
              if (op.kind === 'cancel') {
                stream.pending?.controller.abort(new Error('cancelled'));
              } else if (stream.pending === null || stream.pending.settled) {
                const controller = new AbortController();
                const pending = { controller, settled: false };
                stream.pending = pending;
                const bytes = Math.max(1, Math.ceil(op.size * quantum));
                outcomes.push(
                  stream.meter.take(bytes, controller.signal).then(
                    () => (pending.settled = true),
                    () => (pending.settled = true),
                  ),
                );
              }
            }
            // One timer per direction; never more waiting than the bound.
            expect(timers.size).toBeLessThanOrEqual(1);
            expect(governor.snapshot().waitingQuanta).toBeLessThanOrEqual(maxWaiting);
          }
          // Liveness: with time, every take still waiting is granted (no lost wake-ups).
          for (let i = 0; i < 200 && streams.some((s) => s.pending !== null && !s.pending.settled); i++)
            await timers.advance(1000);
          expect(streams.every((s) => s.pending === null || s.pending.settled)).toBe(true);
          expect(governor.snapshot().waitingQuanta).toBe(0);
          expect(timers.size).toBe(0);
          await Promise.all(outcomes);

          if (globalRate > 0) checkBound(events, globalRate, burstOf(globalRate), capacityOf(globalRate, quantum));
          if (principalRate > 0) {
            for (const principal of new Set(events.map((e) => e.principal))) {
              checkBound(
                events.filter((e) => e.principal === principal),
                principalRate,
                burstOf(principalRate),
                capacityOf(principalRate, quantum),
              );
            }
          }
          expect(governor.snapshot().grantedBytes).toBe(events.reduce((sum, e) => sum + e.bytes, 0));
        },
      ),
      { numRuns: 250 },
    );
  });

  it('nested buckets (global, groups, repository, principal) are each held to rate × elapsed + burst under random trees and arrivals', async () => {
    const ceilingRateArb = fc.oneof(fc.constant(0), rateArb);
    await fc.assert(
      fc.asyncProperty(
        rateArb,
        rateArb,
        fc.array(ceilingRateArb, { minLength: 3, maxLength: 3 }),
        fc.array(ceilingRateArb, { minLength: 3, maxLength: 3 }),
        // Per principal: its groups (a bit set over 3), its repository, its weight.
        fc.array(fc.record({ groups: fc.nat(7), repo: fc.nat(2), weight: fc.integer({ min: 1, max: 5 }) }), {
          minLength: 1,
          maxLength: 5,
        }),
        fc.array(fc.nat(4), { minLength: 1, maxLength: 12 }),
        fc.array(opArb, { maxLength: 120 }),
        async (globalRate, principalRate, groupRates, repoRates, principals, streamPrincipals, ops) => {
          const clock = new MicrosecondClock();
          clock.us = 3_000_000;
          const startUs = clock.us;
          const timers = new ManualTimers(clock);
          const events: GrantEvent[] = [];
          const governor = new BandwidthGovernor({
            rateBytesPerSec: globalRate,
            perPrincipalBytesPerSec: principalRate,
            clock,
            timers,
            onGrant: (principal, bytes) => events.push({ principal, bytes, us: clock.us - startUs }),
          });
          const ceilingsOf = (i: number) => {
            const p = principals[i % principals.length]!;
            const out: Array<{ key: string; rateBytesPerSec: number }> = [];
            groupRates.forEach((rate, g) => {
              if (rate > 0 && (p.groups & (1 << g)) !== 0) out.push({ key: `g${g}`, rateBytesPerSec: rate });
            });
            if (repoRates[p.repo]! > 0) out.push({ key: `r${p.repo}`, rateBytesPerSec: repoRates[p.repo]! });
            return out;
          };
          const streams = streamPrincipals.map((i) => {
            const ceilings = ceilingsOf(i);
            const meter = governor.meter(
              `p${i % principals.length}`,
              principals[i % principals.length]!.weight,
              ceilings,
            );
            // The meter's quantum fits every bucket it passes: at most each enabled burst, at least 1.
            expect(meter.quantumBytes).toBe(
              quantumOf([globalRate, principalRate, ...ceilings.map((c) => c.rateBytesPerSec)]),
            );
            return { meter, pending: null as null | { settled: boolean } };
          });
          const outcomes: Promise<unknown>[] = [];
          for (const op of ops) {
            if (op.kind === 'advance') await timers.advance(op.us / 1000);
            else if (op.kind === 'take') {
              const stream = streams[op.stream % streams.length]!;
              if (stream.pending !== null && !stream.pending.settled) continue;
              const pending = { settled: false };
              stream.pending = pending;
              const bytes = Math.max(1, Math.ceil(op.size * stream.meter.quantumBytes));
              outcomes.push(
                stream.meter.take(bytes).then(
                  () => (pending.settled = true),
                  () => (pending.settled = true),
                ),
              );
            }
            expect(timers.size).toBeLessThanOrEqual(1);
          }
          // Liveness: nobody starves, whatever group or repository holds it back.
          for (let i = 0; i < 400 && streams.some((s) => s.pending !== null && !s.pending.settled); i++)
            await timers.advance(1000);
          expect(streams.every((s) => s.pending === null || s.pending.settled)).toBe(true);
          await Promise.all(outcomes);
          const check = (rate: number, members: (principalIndex: number) => boolean) => {
            const names = new Set(principals.map((_, i) => `p${i}`).filter((_, i) => members(i)));
            checkBound(
              events.filter((e) => names.has(e.principal)),
              rate,
              burstOf(rate),
              capacityOf(rate, 1),
            );
          };
          if (globalRate > 0) check(globalRate, () => true);
          groupRates.forEach((rate, g) => {
            if (rate > 0) check(rate, (i) => (principals[i]!.groups & (1 << g)) !== 0);
          });
          repoRates.forEach((rate, r) => {
            if (rate > 0) check(rate, (i) => principals[i]!.repo === r);
          });
          if (principalRate > 0) for (let i = 0; i < principals.length; i++) check(principalRate, (j) => j === i);
        },
      ),
      { numRuns: 250 },
    );
  });
});
