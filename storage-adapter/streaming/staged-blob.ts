import { StorageError } from '../errors.ts';
import type { SliceDigests } from '../slice-digests.ts';
import type { StagedBlob } from '../store.ts';

/**
 * A commit that found its temporary gone (or its blob, gone again before commit returned): only
 * what cleans up behind a process removes them (offline gc beside a fenced gateway, a writer
 * starting anew, a worker taking the lock), so it is a 503 to send again, not our 500 or a 404.
 */
function stagedBytesGone(err: unknown): StorageError | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (code !== 'not_found' && code !== 'ENOENT') return undefined;
  return new StorageError(
    'unavailable',
    'The staged bytes were removed (offline maintenance, or a writer starting) before they were published; nothing was published. Send them again.',
    { cause: err },
  );
}

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
      await ops.commit().catch((err: unknown) => {
        throw stagedBytesGone(err) ?? err;
      });
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
