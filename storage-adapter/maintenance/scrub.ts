/**
 * Offline scrub: re-hashes every blob and moves any whose bytes no longer match its name into
 * `quarantine/` (never deletes). Run only under the exclusive maintenance barrier. Works on either
 * store through its `StoreTree` (the static-HTTP store needs `autoindex_format json` for listing).
 */
import { createHash } from 'node:crypto';
import { createFsTree } from '../fs/index.ts';
import type { StoreTree } from '../store.ts';
import { walkBlobs } from './walk-blobs.ts';

export interface ScrubReport {
  checked: number;
  bytes: number;
  corrupt: Array<{ blob: string; actualSha256: string; quarantinedAs: string }>;
}

/** `root` is a filesystem store root or any store's tree. */
export async function scrubBlobs(
  root: string | StoreTree,
  options: { onProgress?: (checked: number, bytes: number) => void; nowMs?: () => number } = {},
): Promise<ScrubReport> {
  const tree = typeof root === 'string' ? createFsTree(root) : root;
  const report: ScrubReport = { checked: 0, bytes: 0, corrupt: [] };
  for await (const blob of walkBlobs(tree)) {
    const hash = createHash('sha256');
    for await (const chunk of tree.read(blob.file)) {
      hash.update(chunk);
      report.bytes += chunk.length;
    }
    const actual = hash.digest('hex');
    report.checked++;
    if (!blob.isWellNamed || actual !== blob.name) {
      const target = `quarantine/${blob.name}.${(options.nowMs ?? Date.now)()}`;
      await tree.move(blob.file, target);
      report.corrupt.push({ blob: blob.name, actualSha256: actual, quarantinedAs: target });
    }
    options.onProgress?.(report.checked, report.bytes);
  }
  return report;
}
