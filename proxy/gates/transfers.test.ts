import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import { settle } from '../../policy/timers.ts';
import { createTransfers } from './transfers.ts';
import { track, unpacedConfig } from '../../test/support/worker-fixtures.ts';

const config = unpacedConfig();

/** A standing the test fences by hand, as the lease coordinator does when its permit lapses. */
function fenceableStanding() {
  let fencedReason: string | undefined;
  const listeners: Array<(reason: string) => void> = [];
  const standing: LeaseStanding = {
    owner: 'test',
    get fencedReason() {
      return fencedReason;
    },
    isPermitted: () => fencedReason === undefined,
    onFenced: (listener) => listeners.push(listener),
    snapshot: () => null,
  };
  const fence = () => {
    fencedReason = 'the lease permit expired before a renewal was confirmed';
    for (const listener of listeners) listener(fencedReason);
  };
  return { standing, fence };
}

describe('createTransfers', () => {
  it('a lost lease refuses the requests waiting for a slot with lease_lost at once, not when a slot frees', async () => {
    const { standing, fence } = fenceableStanding();
    const transfers = createTransfers(config, new ManualClock(), standing);
    const download = transfers.tryAdmit('p', 'download');
    const upload = transfers.tryAdmit('p', 'upload');
    expect(download).toBeDefined();
    expect(upload).toBeDefined();
    const waitingDownload = track(transfers.admit('p', 'download'));
    const waitingUpload = track(transfers.admit('p', 'upload'));
    await settle();
    expect(waitingDownload.seen).toBe('waiting');
    fence();
    await settle();
    // Their holders' transfers are cut at their next quantum, but a holder not asking for one (a
    // slow client, a store read) would keep them waiting for a slot this gateway can no longer serve.
    expect(waitingDownload.seen).toBe('lease_lost');
    expect(waitingUpload.seen).toBe('lease_lost');
    expect(transfers.admission.snapshot()).toMatchObject({
      downloads: { active: 1, queued: 0 },
      uploads: { queued: 0 },
    });
    const late = track(transfers.admit('q', 'download'));
    await settle();
    expect(late.seen).toBe('lease_lost');
    download!();
    upload!();
    expect(transfers.admission.snapshot()).toMatchObject({ downloads: { active: 0 }, uploads: { active: 0 } });
    transfers.close();
  });
});
