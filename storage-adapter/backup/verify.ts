/** `arkvory restore --verify`: checks a backup end to end without touching any database or store. */
import { createHash } from 'node:crypto';
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { blobRelativePath } from '../paths.ts';
import { hashStream } from './blob-copy.ts';
import { checkDatabaseFile, referencedBlobs } from './database-file.ts';
import { BackupError } from './errors.ts';
import { DATABASE_FILE, MANIFEST_FILE, openManifest, RULE_DOCUMENTS_FILE, type SealedManifest } from './manifest.ts';
import { MANIFEST_MAX_BYTES, readSmallFile, regularFileChunks, RULE_DOCUMENTS_MAX_BYTES } from './small-file.ts';

/**
 * A limiter's name, as policy/rate-limit/rules.ts (LIMITER_NAME) allows it; here, since this folder
 * does not reach into policy/ (verify.test.ts checks the two agree).
 */
export const LIMITER_NAME = /^[a-z0-9_]{1,64}$/;

export interface VerifyReport {
  backup: string;
  snapshotTime: string;
  checked: number;
  bytes: number;
  missing: string[];
  corrupt: Array<{ blob: string; actualSha256: string }>;
  ok: boolean;
}

/** Reads and checks the manifest and the database file; throws `backup_invalid` with the reason. */
export async function openBackup(dir: string): Promise<SealedManifest> {
  const file = path.join(dir, MANIFEST_FILE);
  const text = await readSmallFile(file, MANIFEST_MAX_BYTES).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT')
      throw new BackupError(
        'backup_invalid',
        `${dir} has no ${MANIFEST_FILE}: it is not a complete backup (an interrupted backup never gets one)`,
      );
    throw err;
  });
  const manifest = openManifest(text, file);
  await checkDatabaseFile(path.join(dir, DATABASE_FILE), manifest);
  if (manifest.ruleDocuments) await readRuleDocuments(dir, manifest);
  return manifest;
}

/** The backed-up rule documents, checked against the manifest. */
export async function readRuleDocuments(dir: string, manifest: SealedManifest): Promise<Record<string, unknown>> {
  if (!manifest.ruleDocuments) return {};
  const file = path.join(dir, RULE_DOCUMENTS_FILE);
  // Missing is a damaged backup; EACCES and the like are the caller's, said as the file system said them.
  const text = await readSmallFile(file, RULE_DOCUMENTS_MAX_BYTES).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
    return '';
  });
  if (createHash('sha256').update(text).digest('hex') !== manifest.ruleDocuments.sha256)
    throw new BackupError('backup_invalid', `${file} is missing or does not match the manifest`);
  let docs: unknown;
  try {
    docs = JSON.parse(text);
  } catch {
    throw new BackupError('backup_invalid', `${file} is not JSON`);
  }
  if (docs === null || typeof docs !== 'object' || Array.isArray(docs))
    throw new BackupError('backup_invalid', `${file} is not a mapping of limiters to documents`);
  // A restore writes each under `<prefix><limiter>` in the target's Redis: a resealed file naming
  // `:index` (or any name no limiter can have) would write over the store's own keys there.
  for (const [limiter, doc] of Object.entries(docs))
    if (!LIMITER_NAME.test(limiter) || doc === null || typeof doc !== 'object' || Array.isArray(doc))
      throw new BackupError(
        'backup_invalid',
        `${file} holds ${JSON.stringify(limiter.slice(0, 80))}, which is no limiter's document (a limiter is named like ${LIMITER_NAME.source} and its document is a mapping)`,
      );
  return docs as Record<string, unknown>;
}

export async function verifyBackup(
  dir: string,
  onProgress?: (done: number, total: number, bytes: number) => void,
): Promise<VerifyReport> {
  const manifest = await openBackup(dir);
  const blobs = await referencedBlobs(path.join(dir, DATABASE_FILE), manifest.database.bytes);
  const report: VerifyReport = {
    backup: dir,
    snapshotTime: manifest.snapshotTime,
    checked: 0,
    bytes: 0,
    missing: [],
    corrupt: [],
    ok: false,
  };
  // Each blob's place, with no symbolic link below the backup's own real path.
  const realDir = await realpath(dir);
  for (const blob of blobs) {
    try {
      // One byte past its size at most: a blob replaced by a link to /dev/zero is corrupt, not read without end.
      // Only a regular file (small-file.ts): a named pipe is refused at its non-blocking open, not waited on.
      const seen = await hashStream(
        regularFileChunks(
          path.join(dir, blobRelativePath(blob.sha256)),
          blob.sizeBytes + 1,
          path.join(realDir, blobRelativePath(blob.sha256)),
        ),
      );
      report.bytes += seen.bytes;
      if (seen.sha256 !== blob.sha256) report.corrupt.push({ blob: blob.sha256, actualSha256: seen.sha256 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      report.missing.push(blob.sha256);
    }
    report.checked++;
    onProgress?.(report.checked, blobs.length, report.bytes);
  }
  if (blobs.length !== manifest.blobs.count)
    throw new BackupError(
      'backup_invalid',
      `the database file references ${blobs.length} blobs but the manifest lists ${manifest.blobs.count}`,
    );
  report.ok = report.missing.length === 0 && report.corrupt.length === 0;
  return report;
}
