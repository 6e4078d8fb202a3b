/**
 * What the unit tests of admission and of a worker's calls to its coordinating process share: a
 * lease standing that is always permitted, governors that are never asked to pace, a configuration
 * without bandwidth ceilings, and ways to watch a call's promise while hand-moved timers run.
 */
import type { BandwidthGovernors } from '../../policy/bandwidth/index.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import { settle } from '../../policy/timers.ts';
import type { Config } from '../../proxy/config/config.ts';

export const PERMITTED_LEASE = {
  owner: 'test',
  fencedReason: undefined,
  isPermitted: () => true,
  onFenced: () => {},
  snapshot: () => null,
} as unknown as LeaseStanding;

export const IDLE_GOVERNORS = {
  download: { close() {}, snapshot: () => ({}) },
  upload: { close() {}, snapshot: () => ({}) },
} as unknown as BandwidthGovernors;

/** No bandwidth ceiling; admission as given (one transfer per principal unless told). */
export function unpacedConfig(admission: Partial<Config['admission']> = {}): Config {
  return {
    bandwidth: {
      downloadBytesPerSec: 0,
      downloadBytesPerSecPerPrincipal: 0,
      uploadBytesPerSec: 0,
      uploadBytesPerSecPerPrincipal: 0,
    },
    admission: {
      maxDownloads: 256,
      maxDownloadsPerPrincipal: 1,
      maxUploadsPerPrincipal: 1,
      queueLength: 64,
      waitMs: 30_000,
      ...admission,
    },
  } as unknown as Config;
}

export interface Tracked {
  /** 'waiting', then `settledAs` or the rejection's code. */
  seen: string;
  error?: unknown;
  value?: unknown;
}

/** What became of a call so far, its rejection handled from the start (none goes unhandled). */
export function track(promise: Promise<unknown>, settledAs = 'granted'): Tracked {
  const state: Tracked = { seen: 'waiting' };
  promise.then(
    (value) => Object.assign(state, { seen: settledAs, value }),
    (error: unknown) => Object.assign(state, { seen: (error as { code?: string }).code ?? String(error), error }),
  );
  return state;
}

/** Lets a round trip over a link run: each side's write and its delivery are turns of their own. */
export async function roundTrip(): Promise<void> {
  for (let i = 0; i < 6; i++) await settle();
}
