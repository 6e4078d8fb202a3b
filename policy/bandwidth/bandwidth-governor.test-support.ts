/** Test setup shared by the governor's unit tests: a governor on a manual clock that records its grants. */
import { ManualClock } from '../clock.ts';
import { ManualTimers } from '../timers.ts';
import { BandwidthGovernor, type BandwidthGovernorOptions } from './bandwidth-governor.ts';

export interface Grant {
  principal: string;
  bytes: number;
  /** Milliseconds since the clock's start. */
  atMs: number;
}

export function setupGovernor(
  options: Partial<BandwidthGovernorOptions> &
    Pick<BandwidthGovernorOptions, 'rateBytesPerSec' | 'perPrincipalBytesPerSec'>,
) {
  const clock = new ManualClock(1_700_000_000_000, 10_000);
  const timers = new ManualTimers(clock);
  const grants: Grant[] = [];
  const governor = new BandwidthGovernor({
    clock,
    timers,
    onGrant: (principal, bytes, nowMs) => grants.push({ principal, bytes, atMs: nowMs - 10_000 }),
    ...options,
  });
  return { clock, timers, governor, grants };
}
