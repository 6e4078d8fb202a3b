import { describe, expect, it } from 'vitest';
import type { BandwidthGovernors } from '../../policy/bandwidth/index.ts';
import type { Coordinator } from '../../policy/lease/coordinator.ts';
import type { Config } from '../config/config.ts';
import { followLeasedShare } from './transfers.ts';

/** The download governor's rates as the leased share sets them, for each share the coordinator announces. */
function ratesFor(shares: number[], localBytesPerSec = 0): number[] {
  const rates: number[] = [];
  let listener: ((share: number) => void) | undefined;
  const coordinator = {
    shareBytesPerSec: 0,
    onShare: (l: (share: number) => void) => {
      listener = l;
    },
    reportWeightSum: () => {},
  } as unknown as Coordinator;
  const governors = {
    download: {
      setRate: (rate: number) => {
        if (!(rate >= 0)) throw new RangeError(`setRate(${rate})`);
        rates.push(rate);
      },
      activeWeightSum: () => 1,
    },
  } as unknown as BandwidthGovernors;
  const config = { shared: { slots: 3 }, bandwidth: { downloadBytesPerSec: localBytesPerSec } } as unknown as Config;
  followLeasedShare(config, coordinator, governors);
  for (const share of shares) listener!(share);
  return rates;
}

describe('followLeasedShare', () => {
  it('sets the share as the download rate, lowered by the local ceiling', () => {
    expect(ratesFor([1_000_000, 0])).toEqual([0, 1_000_000, 0]);
    expect(ratesFor([1_000_000, 400], 500)).toEqual([0, 500, 400]);
  });

  it('never sets a negative or non-finite rate: such a share pauses downloads', () => {
    expect(ratesFor([-1_493_261, Number.NaN, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY, 1500.7])).toEqual([
      0, 0, 0, 0, 0, 1500,
    ]);
    expect(ratesFor([-1], 500)).toEqual([0, 0]);
  });
});
