/** A backup's manifest and rule documents are taken only from regular files of bounded size. */
import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { mkdtemp, open, rm, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { MANIFEST_FILE, RULE_DOCUMENTS_FILE, type SealedManifest } from './manifest.ts';
import { MANIFEST_MAX_BYTES, RULE_DOCUMENTS_MAX_BYTES } from './small-file.ts';
import { openBackup, readRuleDocuments } from './verify.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});
async function backupDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-verify-'));
  dirs.push(dir);
  return dir;
}
const withRuleDocuments = {
  ruleDocuments: { file: RULE_DOCUMENTS_FILE, count: 1, bytes: 2, sha256: 'a'.repeat(64) },
} as unknown as SealedManifest;

/**
 * Settles `reading`; should it wait on the named pipe `fifo` (a blocking open), a writer that opens
 * and closes it after a while lets it go on, so a missing check fails the test instead of hanging it.
 */
async function unblocking<T>(reading: Promise<T>, fifo: string): Promise<T> {
  const timer = setTimeout(() => {
    open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).then(
      (h) => h.close(),
      () => {},
    );
  }, 5000);
  try {
    return await reading;
  } finally {
    clearTimeout(timer);
  }
}

describe('reading a backup', () => {
  it('refuses a manifest.json that is a named pipe, without waiting on it', async () => {
    const dir = await backupDir();
    const fifo = path.join(dir, MANIFEST_FILE);
    await promisify(execFile)('mkfifo', [fifo]);
    await expect(unblocking(openBackup(dir), fifo)).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${fifo} is not a regular file`,
    });
  });

  it('refuses a manifest.json larger than a manifest can be, before reading it', async () => {
    const dir = await backupDir();
    const file = path.join(dir, MANIFEST_FILE);
    await writeFile(file, '');
    await truncate(file, MANIFEST_MAX_BYTES + 1);
    await expect(openBackup(dir)).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${file} is ${MANIFEST_MAX_BYTES + 1} bytes, more than the ${MANIFEST_MAX_BYTES} it may be`,
    });
  });

  it('refuses a rule-documents.json that is a named pipe or too large', async () => {
    const dir = await backupDir();
    const file = path.join(dir, RULE_DOCUMENTS_FILE);
    await promisify(execFile)('mkfifo', [file]);
    await expect(unblocking(readRuleDocuments(dir, withRuleDocuments), file)).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${file} is not a regular file`,
    });
    await rm(file);
    await writeFile(file, '');
    await truncate(file, RULE_DOCUMENTS_MAX_BYTES + 1);
    await expect(readRuleDocuments(dir, withRuleDocuments)).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${file} is ${RULE_DOCUMENTS_MAX_BYTES + 1} bytes, more than the ${RULE_DOCUMENTS_MAX_BYTES} it may be`,
    });
  });
});
