/**
 * Offline scrub: re-hashes every blob and moves any whose bytes no longer match its name into
 * `quarantine/` (never deletes), and names the blobs the catalog references that are not there.
 * Run only under the exclusive maintenance barrier. Works on either store through its `StoreTree`
 * (the static-HTTP store needs `autoindex_format json` for listing).
 */
import { createHash } from 'node:crypto';
import { createFsTree } from '../fs/index.ts';
import type { StoreTree } from '../store.ts';
import { SliceHasher, type SliceDigests } from '../slice-digests.ts';
import { walkBlobs } from './walk-blobs.ts';

export interface ScrubReport {
  checked: number;
  bytes: number;
  corrupt: Array<{ blob: string; actualSha256: string; quarantinedAs: string }>;
  /**
   * Blobs `referenced` names that the store does not hold (lost, or quarantined by an earlier scrub):
   * their artifacts cannot be read until the blob is put back or they are deleted. A blob
   * quarantined by this run is in `corrupt` only.
   */
  missing: string[];
}

/** `root` is a filesystem store root or any store's tree. */
export async function scrubBlobs(
  root: string | StoreTree,
  options: {
    onProgress?: (checked: number, bytes: number) => void;
    nowMs?: () => number;
    /**
     * With `sliceBytes`: called per blob after its check with its slice digests (computed in the
     * same read), or undefined when it was quarantined. Scrub's caller backfills the digests of
     * blobs published before they were recorded, and forgets those of quarantined blobs.
     */
    sliceBytes?: number;
    onChecked?: (blob: string, digests: SliceDigests | undefined) => Promise<void>;
    /** The blobs the catalog references (read under the barrier, so nothing adds to them meanwhile). */
    referenced?: ReadonlySet<string>;
  } = {},
): Promise<ScrubReport> {
  const tree = typeof root === 'string' ? createFsTree(root) : root;
  const report: ScrubReport = { checked: 0, bytes: 0, corrupt: [], missing: [] };
  const seen = new Set<string>();
  for await (const blob of walkBlobs(tree)) {
    if (blob.isWellNamed) seen.add(blob.name);
    const hash = createHash('sha256');
    const slices = options.sliceBytes !== undefined ? new SliceHasher(options.sliceBytes) : undefined;
    let read = 0;
    for await (const chunk of tree.read(blob.file)) {
      hash.update(chunk);
      slices?.update(chunk);
      read += chunk.length;
    }
    report.bytes += read;
    const actual = hash.digest('hex');
    report.checked++;
    if (!blob.isWellNamed || actual !== blob.name) {
      const target = `quarantine/${blob.name}.${(options.nowMs ?? Date.now)()}`;
      // Quarantined are the bytes judged here and reported as `actualSha256`: a store that copies
      // through us checks its copy against them (not against the name, which they fail by
      // definition), so bytes that changed since this read (the file put back meanwhile, a read
      // that ended short) fail the scrub with the file left under its name, never copied aside as
      // other bytes and deleted.
      await tree.move(blob.file, target, { sha256: actual, sizeBytes: read });
      report.corrupt.push({ blob: blob.name, actualSha256: actual, quarantinedAs: target });
      await options.onChecked?.(blob.name, undefined);
    } else if (slices) await options.onChecked?.(blob.name, slices.finish());
    options.onProgress?.(report.checked, report.bytes);
  }
  for (const blob of options.referenced ?? []) if (!seen.has(blob)) report.missing.push(blob);
  report.missing.sort();
  return report;
}
