import type { Clock } from '../clock.ts';
import type { Timers } from '../timers.ts';
import { BandwidthGovernor } from './bandwidth-governor.ts';

export { BandwidthGovernor, DEFAULT_MAX_PRINCIPALS, DEFAULT_MAX_WAITING } from './bandwidth-governor.ts';
export type { BandwidthGovernorOptions, BandwidthSnapshot, ByteMeter, Ceiling } from './bandwidth-governor.ts';
export { burstBytes, MAX_QUANTUM_BYTES, quantumBytesFor } from './token-bucket.ts';

/** The `bandwidth` slice of the config (`ARKVORY_{DOWNLOAD,UPLOAD}_BYTES_PER_SECOND[_PER_PRINCIPAL]`). */
export interface BandwidthConfig {
  downloadBytesPerSec: number;
  downloadBytesPerSecPerPrincipal: number;
  uploadBytesPerSec: number;
  uploadBytesPerSecPerPrincipal: number;
}

export interface BandwidthGovernors {
  readonly download: BandwidthGovernor;
  readonly upload: BandwidthGovernor;
}

/**
 * The two governors of a process, one per direction; their budgets are independent. Pass the lease
 * coordinator's `isPermitted` so both fence themselves (uploads too) the moment the permit lapses.
 */
export function createBandwidthGovernors(
  deps: { clock: Clock; timers?: Timers; isPermitted?: () => boolean },
  config: BandwidthConfig,
): BandwidthGovernors {
  return {
    download: new BandwidthGovernor({
      ...deps,
      rateBytesPerSec: config.downloadBytesPerSec,
      perPrincipalBytesPerSec: config.downloadBytesPerSecPerPrincipal,
    }),
    upload: new BandwidthGovernor({
      ...deps,
      rateBytesPerSec: config.uploadBytesPerSec,
      perPrincipalBytesPerSec: config.uploadBytesPerSecPerPrincipal,
    }),
  };
}
