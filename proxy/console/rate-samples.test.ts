import { describe, expect, it } from 'vitest';
import { RateSamples } from './rate-samples.ts';

const reading = (s: number, download: number, upload = 0) => ({
  monotonicMs: s * 1000,
  wallMs: 1_700_000_000_000 + s * 1000,
  totals: { download, upload },
});

describe('RateSamples', () => {
  it('turns running totals into bytes per second, the first reading being the baseline', () => {
    const r = new RateSamples(10);
    r.record(reading(0, 0));
    expect(r.samples()).toEqual([]);
    r.record(reading(1, 1000, 10));
    r.record(reading(2, 3000, 10));
    expect(r.samples()).toEqual([
      { atMs: 1_700_000_001_000, download: 1000, upload: 10 },
      { atMs: 1_700_000_002_000, download: 2000, upload: 0 },
    ]);
  });

  it('divides by the real interval, so a late tick is no spike', () => {
    const r = new RateSamples(10);
    r.record(reading(0, 0));
    r.record(reading(2.5, 5000));
    expect(r.samples()[0]!.download).toBe(2000);
  });

  it('keeps only the newest `capacity` samples, oldest first', () => {
    const r = new RateSamples(3);
    for (let s = 0; s <= 5; s++) r.record(reading(s, s * 100));
    expect(r.samples().map((x) => x.atMs - 1_700_000_000_000)).toEqual([3000, 4000, 5000]);
  });

  it('takes a reset or a clock that did not move as a new baseline', () => {
    const r = new RateSamples(5);
    r.record(reading(0, 500));
    r.record(reading(1, 100)); // total went down: baseline
    r.record(reading(1, 200)); // no time passed: baseline
    r.record(reading(2, 400));
    expect(r.samples()).toEqual([{ atMs: 1_700_000_002_000, download: 200, upload: 0 }]);
  });

  it('refuses a capacity that is not a positive integer', () => {
    expect(() => new RateSamples(0)).toThrow(RangeError);
  });
});
