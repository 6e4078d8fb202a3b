/**
 * Offline scrub: re-hashes every blob and moves any whose bytes no longer match its name into
 * `quarantine/` (never deletes), and names the blobs the catalog references that are not there.
 * Run only under the exclusive maintenance barrier. Works on either store through its `StoreTree`
 * (the static-HTTP store needs `autoindex_format json` for listing).
 */
import { createHash } from 'node:crypto';
import { createFsTree } from '../fs/index.ts';
import { StorageError, type StorageErrorCode } from '../errors.ts';
import type { ReadHead, StoreTree } from '../store.ts';
import { SliceHasher, type SliceDigests } from '../slice-digests.ts';
import { walkBlobs } from './walk-blobs.ts';

/** Why a blob was left unjudged this run (`ScrubReport.unjudged`). */
export type UnjudgedCode = Extract<StorageErrorCode, 'read_incomplete' | 'stored_bytes_mismatch'>;

export interface ScrubReport {
  /** Blobs read whole and judged (those in `unjudged` for a read that never came whole are not). */
  checked: number;
  bytes: number;
  corrupt: Array<{ blob: string; actualSha256: string; quarantinedAs: string }>;
  /**
   * Blobs referenced (`referenced`) that the store does not hold (lost, or quarantined by an earlier
   * scrub): their artifacts cannot be read until the blob is put back or they are deleted. A blob
   * quarantined by this run is in `corrupt` only.
   */
  missing: string[];
  /**
   * Blobs this run left under their names without a verdict, nothing moved: `read_incomplete`, its
   * read (twice) ended with another number of bytes than the listing gives (an answer cut short with
   * a clean end is no damage of the blob); `stored_bytes_mismatch`, it was judged damaged but the
   * object was replaced between the read and the move (a blob put back from a backup meanwhile), so
   * the move was called off. A rerun judges them again.
   */
  unjudged: Array<{ blob: string; code: UnjudgedCode; message: string }>;
}

/** Reads of one blob whose byte count differs from its listed size before it is left unjudged. */
const READ_ATTEMPTS = 2;

/** One whole read of `file`: its sha256, slice digests, byte count, and the version its answer named. */
async function readBlob(tree: StoreTree, file: string, sliceBytes: number | undefined) {
  const hash = createHash('sha256');
  const slices = sliceBytes !== undefined ? new SliceHasher(sliceBytes) : undefined;
  const head: ReadHead = {};
  let bytes = 0;
  for await (const chunk of tree.read(file, head)) {
    hash.update(chunk);
    slices?.update(chunk);
    bytes += chunk.length;
  }
  return { sha256: hash.digest('hex'), slices, bytes, version: head.version };
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
     * blobs published before they were recorded, and forgets those of quarantined blobs. Not
     * called for a blob left unjudged.
     */
    sliceBytes?: number;
    onChecked?: (blob: string, digests: SliceDigests | undefined) => Promise<void>;
    /** The blobs the catalog references (read under the barrier, so nothing adds to them meanwhile). */
    referenced?: ReadonlySet<string>;
  } = {},
): Promise<ScrubReport> {
  const tree = typeof root === 'string' ? createFsTree(root) : root;
  const report: ScrubReport = { checked: 0, bytes: 0, corrupt: [], missing: [], unjudged: [] };
  const seen = new Set<string>();
  for await (const blob of walkBlobs(tree)) {
    if (blob.isWellNamed) seen.add(blob.name);
    // A read is judged only when it brought as many bytes as the listing gives: one cut short with a
    // clean end (a proxy, a flaky link) or running long hashes to another digest without the blob
    // being damaged. Such a read is tried once more, then left unjudged, never quarantined.
    let read = await readBlob(tree, blob.file, options.sliceBytes);
    report.bytes += read.bytes;
    for (let attempt = 1; read.bytes !== blob.sizeBytes && attempt < READ_ATTEMPTS; attempt++) {
      read = await readBlob(tree, blob.file, options.sliceBytes);
      report.bytes += read.bytes;
    }
    if (read.bytes !== blob.sizeBytes) {
      report.unjudged.push({
        blob: blob.name,
        code: 'read_incomplete',
        message: `${blob.file}: ${READ_ATTEMPTS} reads ended at ${read.bytes} bytes, the store lists ${blob.sizeBytes}; not judged, nothing moved.`,
      });
      options.onProgress?.(report.checked, report.bytes);
      continue;
    }
    report.checked++;
    if (!blob.isWellNamed || read.sha256 !== blob.name) {
      const target = `quarantine/${blob.name}.${(options.nowMs ?? Date.now)()}`;
      // Quarantined are the bytes judged here and reported as `actualSha256`: the move is tied to
      // them (a store that copies through us checks its copy against their size and sha256; S3
      // copies and deletes only the object version read), so bytes that changed since this read
      // (the blob put back meanwhile) are left under their name, never moved aside and deleted.
      try {
        await tree.move(blob.file, target, { sha256: read.sha256, sizeBytes: read.bytes, version: read.version });
      } catch (err) {
        if (!(err instanceof StorageError) || err.code !== 'stored_bytes_mismatch') throw err;
        report.unjudged.push({ blob: blob.name, code: err.code, message: err.message });
        options.onProgress?.(report.checked, report.bytes);
        continue;
      }
      report.corrupt.push({ blob: blob.name, actualSha256: read.sha256, quarantinedAs: target });
      await options.onChecked?.(blob.name, undefined);
    } else if (read.slices) await options.onChecked?.(blob.name, read.slices.finish());
    options.onProgress?.(report.checked, report.bytes);
  }
  for (const blob of options.referenced ?? []) if (!seen.has(blob)) report.missing.push(blob);
  report.missing.sort();
  return report;
}
