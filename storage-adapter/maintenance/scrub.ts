/**
 * Offline scrub: re-hashes every blob and moves any whose bytes no longer match its name into
 * `quarantine/` (never deletes). Run only under the exclusive maintenance barrier.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, rename } from 'node:fs/promises';
import path from 'node:path';
import { fsyncDirectory } from '../fs-sync.ts';
import { BLOBS_DIR, resolveInsideRoot } from '../paths.ts';
import { walkBlobs } from './walk-blobs.ts';

export interface ScrubReport {
  checked: number;
  bytes: number;
  corrupt: Array<{ blob: string; actualSha256: string; quarantinedAs: string }>;
}

export async function scrubBlobs(root: string, options: { onProgress?: (checked: number, bytes: number) => void; nowMs?: () => number } = {}): Promise<ScrubReport> {
  const report: ScrubReport = { checked: 0, bytes: 0, corrupt: [] };
  const quarantine = resolveInsideRoot(root, 'quarantine');
  for await (const blob of walkBlobs(resolveInsideRoot(root, BLOBS_DIR))) {
    const hash = createHash('sha256');
    for await (const chunk of createReadStream(blob.file, { highWaterMark: 1024 * 1024 })) {
      hash.update(chunk as Buffer);
      report.bytes += (chunk as Buffer).length;
    }
    const actual = hash.digest('hex');
    report.checked++;
    if (!blob.isWellNamed || actual !== blob.name) {
      await mkdir(quarantine, { recursive: true });
      const target = path.join(quarantine, `${blob.name}.${(options.nowMs ?? Date.now)()}`);
      await rename(blob.file, target);
      await fsyncDirectory(path.dirname(blob.file));
      await fsyncDirectory(quarantine);
      report.corrupt.push({ blob: blob.name, actualSha256: actual, quarantinedAs: path.relative(root, target) });
    }
    options.onProgress?.(report.checked, report.bytes);
  }
  return report;
}
