import { describe, expect, it } from 'vitest';
import { effectiveRate, localDownloadCeilings, shareOf } from './shares.ts';

describe('shares', () => {
  it.each([
    [67108864, 2, 33554432],
    [131072, 2, 65536],
    [131073, 2, 65536], // the remainder is never spent
    [100_000_000, 3, 33_333_333],
    [2 ** 40, 16, 2 ** 36],
    [2 ** 40 - 1, 16, 68719476735],
    [16 * 65536 + 15, 16, 65536],
    [0, 4, 0],
  ])('floor(%d / %d) = %d', (rate, slots, share) => {
    expect(shareOf(rate, slots)).toBe(share);
    expect(share * slots).toBeLessThanOrEqual(rate);
  });

  it('refuses slot counts outside 2..16', () => {
    expect(() => shareOf(1 << 20, 1)).toThrow(RangeError);
    expect(() => shareOf(1 << 20, 17)).toThrow(RangeError);
  });

  it('lets a local limit lower a share but never raise it', () => {
    expect(effectiveRate(1000, 0)).toBe(1000);
    expect(effectiveRate(1000, 500)).toBe(500);
    expect(effectiveRate(1000, 5000)).toBe(1000);
    expect(effectiveRate(0, 700)).toBe(700); // per-principal shared ceiling disabled: the local one applies
  });

  it('computes both ceilings of a participant', () => {
    expect(
      localDownloadCeilings(
        { slots: 3, downloadBytesPerSec: 3 * 65536 + 2, downloadBytesPerSecPerPrincipal: 0 },
        { downloadBytesPerSec: 0, downloadBytesPerSecPerPrincipal: 1000 },
      ),
    ).toEqual({
      downloadBytesPerSec: 65536,
      downloadBytesPerSecPerPrincipal: 1000,
    });
  });
});
