import type { SliceDigests } from '../slice-digests.ts';
import type { StagedBlob } from '../store.ts';

/**
 * The bookkeeping every store's staged blob shares: commit runs once and never after discard,
 * discard may follow a commit (it only drops the temporary), and `stats` counts each outcome once.
 * `ops` is the store's own work.
 */
export function trackedStagedBlob(
  stats: { committed: number; discarded: number },
  sha256: string,
  sizeBytes: number,
  ops: { commit(): Promise<void>; discard(): Promise<void> },
  sliceDigests?: SliceDigests | undefined,
): StagedBlob {
  let committed = false;
  let discarded = false;
  return {
    sha256,
    sizeBytes,
    sliceDigests,
    async commit() {
      if (discarded) throw new Error('commit() after discard()');
      if (committed) return;
      await ops.commit();
      committed = true;
      stats.committed++;
    },
    async discard() {
      if (!committed && !discarded) stats.discarded++;
      discarded = true;
      await ops.discard();
    },
  };
}
