import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  availableBytes,
  burstBytes,
  createBucketSpec,
  hasTokens,
  liveBucket,
  MIB,
  msUntilHeld,
  msUntilTokens,
  quantumBytesFor,
  refillBucket,
  refilledHolds,
  rerateBucket,
  rerateBucketSpec,
  spendInPlace,
  startBucket,
  takeEachInPlace,
  takeTokens,
  toMicroBytes,
  toMicros,
} from './token-bucket.ts';

const TIB = 2 ** 40;

describe('burst and quantum at the edge rates', () => {
  it.each([
    // rate, burst = floor(min(rate / 10, 1 MiB)), quantum alone, capacity = max(burst, quantum)
    [0, 0, 65_536, 0],
    [1, 0, 1, 1],
    [9, 0, 1, 1],
    [10, 1, 1, 1],
    [11, 1, 1, 1],
    [19, 1, 1, 1],
    [20, 2, 2, 2],
    [65_536, 6553, 6553, 6553],
    [655_360, 65_536, 65_536, 65_536],
    [655_369, 65_536, 65_536, 65_536],
    [655_370, 65_537, 65_536, 65_537],
    [10 * MIB - 1, MIB - 1, 65_536, MIB - 1],
    [10 * MIB, MIB, 65_536, MIB],
    [10 * MIB + 1, MIB, 65_536, MIB],
    [TIB, MIB, 65_536, MIB],
  ])('rate %d B/s: burst %d, quantum %d, capacity %d', (rate, burst, quantum, capacity) => {
    expect(burstBytes(rate)).toBe(burst);
    expect(quantumBytesFor([rate])).toBe(quantum);
    const spec = createBucketSpec(rate, quantum);
    expect(spec).toEqual({ rateBytesPerSec: rate, burstBytes: burst, capacityBytes: capacity });
  });

  it.each([
    // global, per principal → quantum ≤ 64 KiB and ≤ every enabled burst, at least 1
    [TIB, 65_536, 6553],
    [65_536, TIB, 6553],
    [9, TIB, 1],
    [TIB, 1, 1],
    [10, 10 * MIB + 1, 1],
    [0, 0, 65_536],
    [0, 200_000, 20_000],
    [200_000, 0, 20_000],
  ])('global %d and per principal %d B/s share the quantum %d', (global, perPrincipal, quantum) => {
    expect(quantumBytesFor([global, perPrincipal])).toBe(quantum);
    // Both buckets accept it: it never exceeds either capacity.
    for (const rate of [global, perPrincipal]) expect(() => createBucketSpec(rate, quantum)).not.toThrow();
  });

  it('refuses rates outside 0..1 TiB/s and quanta above an enabled burst', () => {
    expect(() => burstBytes(-1)).toThrow(RangeError);
    expect(() => burstBytes(1.5)).toThrow(RangeError);
    expect(() => burstBytes(TIB + 1)).toThrow(/rateBytesPerSec/);
    expect(() => createBucketSpec(65_536, 6554)).toThrow(/exceeds the burst 6553/);
    expect(() => createBucketSpec(9, 2)).toThrow(RangeError);
    expect(() => createBucketSpec(TIB, 65_537)).toThrow(RangeError);
    expect(() => createBucketSpec(TIB, 0)).toThrow(RangeError);
  });
});

describe('token bucket', () => {
  it('starts holding its burst and refills at the rate, on whole microseconds', () => {
    const spec = createBucketSpec(10, 1); // 1 byte per 100 ms, burst 1
    let state = startBucket(spec, 5);
    state = takeTokens(spec, state, 1, 5)!;
    expect(takeTokens(spec, state, 1, 5)).toBeNull();
    expect(hasTokens(spec, state, 1, 104.999)).toBe(false);
    expect(msUntilTokens(spec, state, 1, 5)).toBe(100);
    expect(msUntilTokens(spec, state, 1, 55)).toBe(50);
    expect(hasTokens(spec, state, 1, 105)).toBe(true);
    // Idle for a long time: never more than the capacity.
    expect(availableBytes(spec, state, 1e9)).toBe(1);
  });

  it('rates below 10 B/s start empty, hold one byte at most, and pass one byte per 1/rate s', () => {
    const spec = createBucketSpec(1, 1);
    const state = startBucket(spec, 0);
    expect(availableBytes(spec, state, 0)).toBe(0);
    expect(takeTokens(spec, state, 1, 999.999)).toBeNull();
    const after = takeTokens(spec, state, 1, 1000)!;
    expect(after).not.toBeNull();
    expect(availableBytes(spec, after, 1000)).toBe(0);
    expect(availableBytes(spec, after, 60_000)).toBe(1);
    expect(msUntilTokens(createBucketSpec(9, 1), startBucket(createBucketSpec(9, 1), 0), 1, 0)).toBeCloseTo(111.112, 6);
  });

  it('1 TiB/s fills from empty to its 1 MiB capacity within one microsecond', () => {
    const spec = createBucketSpec(TIB, 65_536);
    let state = startBucket(spec, 0);
    for (let i = 0; i < 16; i++) state = takeTokens(spec, state, 65_536, 0)!;
    expect(availableBytes(spec, state, 0)).toBe(0);
    expect(takeTokens(spec, state, 1, 0)).toBeNull();
    expect(availableBytes(spec, state, 0.001)).toBe(MIB);
  });

  it('credits nothing when the clock goes back', () => {
    const spec = createBucketSpec(1000, 100);
    let state = startBucket(spec, 1000);
    state = takeTokens(spec, state, 100, 1000)!;
    expect(refillBucket(spec, state, 500)).toBe(state);
    expect(availableBytes(spec, state, 1100)).toBe(100);
  });

  it('a disabled bucket always passes and never holds state', () => {
    const spec = createBucketSpec(0, 65_536);
    const state = startBucket(spec, 0);
    expect(takeTokens(spec, state, 65_536, 0)).toBe(state);
    expect(msUntilTokens(spec, state, 65_536, 0)).toBe(0);
  });

  it('a disabled bucket reports unlimited bytes and tokens, and a refill gives it nothing', () => {
    const spec = createBucketSpec(0, 65_536);
    const state = startBucket(spec, 0);
    expect(availableBytes(spec, state, 1000)).toBe(Infinity);
    expect(hasTokens(spec, state, 65_536, 1000)).toBe(true);
    expect(refillBucket(spec, state, 1000)).toEqual({ microTokens: 0, atUs: 1_000_000 });
  });

  it('credits exactly rate × elapsed micro-bytes up to the capacity, to the micro-byte', () => {
    // 1000 B/s gains 1000 micro-bytes per microsecond; capacity 100 bytes = 10^8 micro-bytes.
    const spec = createBucketSpec(1000, 100);
    const state = { microTokens: 500, atUs: 0 };
    // 99_999.5 µs would fill it: at 99_999 µs it is 500 short, at 100_000 µs full.
    expect(refillBucket(spec, state, 99.999)).toEqual({ microTokens: 99_999_500, atUs: 99_999 });
    expect(refillBucket(spec, state, 100)).toEqual({ microTokens: 100_000_000, atUs: 100_000 });
    expect(refillBucket(spec, state, 1e9)).toEqual({ microTokens: 100_000_000, atUs: 1e12 });
    // A full bucket only moves its instant.
    expect(refillBucket(spec, { microTokens: 100_000_000, atUs: 5 }, 0.01)).toEqual({
      microTokens: 100_000_000,
      atUs: 10,
    });
  });

  it('msUntilTokens: 0 when the bytes are there, Infinity beyond the capacity, else the exact wait', () => {
    const spec = createBucketSpec(1000, 100); // capacity 100 bytes, 1 byte per ms
    const full = startBucket(spec, 0);
    expect(msUntilTokens(spec, full, 100, 0)).toBe(0);
    expect(msUntilTokens(spec, full, 1, 0)).toBe(0);
    expect(msUntilTokens(spec, full, 101, 0)).toBe(Infinity);
    const empty = takeTokens(spec, full, 100, 0)!;
    expect(msUntilTokens(spec, empty, 100, 0)).toBe(100);
    expect(msUntilTokens(spec, empty, 100, 40)).toBe(60);
    expect(msUntilTokens(spec, empty, 1, 0.0005)).toBe(0.999);
  });

  it('refuses a quantum outside 1..64 KiB, naming it', () => {
    expect(() => createBucketSpec(TIB, 65_537)).toThrow(/quantumBytes: expected an integer from 1 to 65536, got 65537/);
  });

  it('rounds the monotonic clock to microseconds', () => {
    expect(toMicros(0.0004)).toBe(0);
    expect(toMicros(0.001)).toBe(1);
    expect(toMicros(123.456789)).toBe(123_457);
  });

  it('matches an exact BigInt model under random refills and takes (no drift)', () => {
    const rateArb = fc.oneof(
      fc.constantFrom(1, 9, 10, 65_536, 10 * MIB + 1, TIB, TIB - 1, 3),
      fc.integer({ min: 1, max: TIB }),
    );
    fc.assert(
      fc.property(
        rateArb,
        fc.array(fc.tuple(fc.integer({ min: 0, max: 5_000_000 }), fc.integer({ min: 1, max: 65_536 })), {
          maxLength: 200,
        }),
        (rate, steps) => {
          const quantum = quantumBytesFor([rate]);
          const spec = createBucketSpec(rate, quantum);
          let state = startBucket(spec, 0);
          let model = BigInt(spec.burstBytes) * 1_000_000n;
          const capacity = BigInt(spec.capacityBytes) * 1_000_000n;
          let us = 0;
          for (const [dtUs, want] of steps) {
            us += dtUs;
            model += BigInt(dtUs) * BigInt(rate);
            if (model > capacity) model = capacity;
            const bytes = Math.min(want, quantum);
            const next = takeTokens(spec, state, bytes, us / 1000);
            const modelPasses = model >= BigInt(bytes) * 1_000_000n;
            expect(next !== null).toBe(modelPasses);
            if (modelPasses) model -= BigInt(bytes) * 1_000_000n;
            state = next ?? refillBucket(spec, state, us / 1000);
            expect(BigInt(state.microTokens)).toBe(model);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('live buckets (refilled once, checked, then spent in place)', () => {
  const fields = (b: { microTokens: number; atUs: number }) => ({ microTokens: b.microTokens, atUs: b.atUs });

  it('refilledHolds and spendInPlace, takeEachInPlace and msUntilHeld equal refillBucket, takeTokens and msUntilTokens, to the micro-byte', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: TIB }),
        fc.array(fc.tuple(fc.integer({ min: -1000, max: 5_000_000 }), fc.integer({ min: 0, max: 65_536 })), {
          maxLength: 100,
        }),
        (rate, steps) => {
          const quantum = quantumBytesFor([rate]);
          const spec = createBucketSpec(rate, quantum);
          let state = startBucket(spec, 0);
          const live = liveBucket(spec, state);
          const taken = liveBucket(spec, state);
          let us = 0;
          for (const [dtUs, want] of steps) {
            // A step back is a clock that went back: neither refills.
            us += dtUs;
            // Now and then more than the bucket can ever hold (Infinity).
            expect(msUntilHeld(liveBucket(spec, state), us, toMicroBytes(want))).toBe(
              msUntilTokens(spec, state, want, us / 1000),
            );
            const bytes = Math.min(want, quantum);
            const next = takeTokens(spec, state, bytes, us / 1000);
            expect(refilledHolds(live, us, toMicroBytes(bytes))).toBe(next !== null);
            expect(fields(live)).toEqual(refillBucket(spec, state, us / 1000));
            if (next !== null) spendInPlace(live, toMicroBytes(bytes));
            expect(takeEachInPlace([taken], us, toMicroBytes(bytes))).toBe(next !== null);
            state = next ?? refillBucket(spec, state, us / 1000);
            expect(fields(live)).toEqual(state);
            expect(fields(taken)).toEqual(state);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a live bucket carries its spec: its rate, and its capacity in micro-bytes', () => {
    const spec = createBucketSpec(1000, 100);
    expect(liveBucket(spec, { microTokens: 7, atUs: 3 })).toEqual({
      microTokens: 7,
      atUs: 3,
      rateBytesPerSec: 1000,
      capacityMicro: 100 * 1_000_000,
    });
  });

  it('refilledHolds needs every byte, to the micro-byte, and fills no further than the capacity', () => {
    const spec = createBucketSpec(1000, 100);
    const live = liveBucket(spec, { microTokens: 5_000_000, atUs: 0 });
    expect(refilledHolds(live, 0, toMicroBytes(5))).toBe(true);
    expect(refilledHolds(live, 0, toMicroBytes(5) + 1)).toBe(false);
    spendInPlace(live, toMicroBytes(3));
    expect(fields(live)).toEqual({ microTokens: 2_000_000, atUs: 0 });
    // 1 ms at 1000 bytes/s: one byte more.
    expect(refilledHolds(live, 1000, toMicroBytes(3))).toBe(true);
    expect(fields(live)).toEqual({ microTokens: 3_000_000, atUs: 1000 });
    // A long wait fills it to its capacity (100 bytes), not beyond.
    expect(refilledHolds(live, 10_000_000, toMicroBytes(100))).toBe(true);
    expect(refilledHolds(live, 10_000_000, toMicroBytes(100) + 1)).toBe(false);
    expect(fields(live)).toEqual({ microTokens: 100_000_000, atUs: 10_000_000 });
    // A clock that went back credits nothing and keeps the instant.
    spendInPlace(live, toMicroBytes(50));
    expect(refilledHolds(live, 5_000_000, 0)).toBe(true);
    expect(fields(live)).toEqual({ microTokens: 50_000_000, atUs: 10_000_000 });
  });
});

describe('takeEachInPlace (every bucket of a take, all or none)', () => {
  const fields = (b: { microTokens: number; atUs: number }) => ({ microTokens: b.microTokens, atUs: b.atUs });

  it('takes from every bucket when each holds the bytes, else leaves each as only refilled', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            rate: fc.integer({ min: 1, max: 10_000_000 }),
            tokens: fc.integer({ min: 0, max: 65_536 }),
            atUs: fc.integer({ min: 0, max: 2_000 }),
          }),
          { maxLength: 5 },
        ),
        fc.integer({ min: 0, max: 2_000 }),
        fc.integer({ min: 0, max: 65_536 }),
        (shapes, nowUs, bytes) => {
          const spec = (rate: number) => createBucketSpec(rate, quantumBytesFor([rate]));
          const make = () =>
            shapes.map(({ rate, tokens, atUs }) => liveBucket(spec(rate), { microTokens: toMicroBytes(tokens), atUs }));
          const buckets = make();
          // Refilled up to the first that falls short (those after it are left as they were: a
          // later refill credits them the same), then spent from when none did.
          const expected = make();
          const taken = takeEachInPlace(buckets, nowUs, toMicroBytes(bytes));
          expect(taken).toBe(expected.every((b) => refilledHolds(b, nowUs, toMicroBytes(bytes))));
          if (taken) for (const b of expected) spendInPlace(b, toMicroBytes(bytes));
          expect(buckets.map(fields)).toEqual(expected.map(fields));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('gives back to the buckets before the one that falls short, and never touches those after it', () => {
    const spec = createBucketSpec(1000, 100);
    const buckets = [50, 50, 10, 50].map((bytes) => liveBucket(spec, { microTokens: toMicroBytes(bytes), atUs: 0 }));
    expect(takeEachInPlace(buckets, 0, toMicroBytes(20))).toBe(false);
    expect(buckets.map((b) => b.microTokens)).toEqual([50, 50, 10, 50].map(toMicroBytes));
    expect(takeEachInPlace(buckets, 0, toMicroBytes(10))).toBe(true);
    expect(buckets.map((b) => b.microTokens)).toEqual([40, 40, 0, 40].map(toMicroBytes));
    expect(takeEachInPlace([], 0, toMicroBytes(10))).toBe(true);
  });
});

describe('re-rated buckets (a leased share changing while the quantum stays)', () => {
  it('rerateBucketSpec: the burst follows the rate, the capacity never drops below the quantum', () => {
    expect(rerateBucketSpec(200_000, 65_536)).toEqual({
      rateBytesPerSec: 200_000,
      burstBytes: 20_000,
      capacityBytes: 65_536,
    });
    expect(rerateBucketSpec(10 * 1_048_576, 65_536)).toEqual({
      rateBytesPerSec: 10 * 1_048_576,
      burstBytes: 1_048_576,
      capacityBytes: 1_048_576,
    });
    expect(() => rerateBucketSpec(0, 65_536)).toThrow('a re-rated bucket needs a rate above 0');
    expect(() => rerateBucketSpec(-5, 65_536)).toThrow('rateBytesPerSec');
  });

  it('rerateBucket credits the old rate up to now, then caps at the new capacity; a paused one earns nothing', () => {
    const from = createBucketSpec(1_000_000, 65_536); // burst 100000
    const to = rerateBucketSpec(200_000, 65_536); // capacity 65536
    const empty = { microTokens: 0, atUs: 1_000_000 };
    // 10 ms at 1 MB/s: 10000 bytes, under the new capacity.
    expect(rerateBucket(from, to, empty, 1_010)).toEqual({ microTokens: 10_000 * 1e6, atUs: 1_010_000 });
    // 100 ms: 100000 bytes earned, capped at 65536.
    expect(rerateBucket(from, to, empty, 1_100)).toEqual({ microTokens: 65_536 * 1e6, atUs: 1_100_000 });
    // Paused (from null): the 100 ms earn nothing, and the clock moves on.
    expect(rerateBucket(null, to, { microTokens: 5 * 1e6, atUs: 1_000_000 }, 1_100)).toEqual({
      microTokens: 5 * 1e6,
      atUs: 1_100_000,
    });
    expect(rerateBucket(null, to, { microTokens: 99_999 * 1e6, atUs: 1_000_000 }, 1_100)).toEqual({
      microTokens: 65_536 * 1e6,
      atUs: 1_100_000,
    });
    // A clock that went back keeps the later instant.
    expect(rerateBucket(from, to, { microTokens: 0, atUs: 2_000_000 }, 1_000)).toEqual({
      microTokens: 0,
      atUs: 2_000_000,
    });
  });
});
