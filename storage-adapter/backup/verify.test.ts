/** A backup's manifest, rule documents and database file are taken only from regular files of bounded size. */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdtemp, open, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { fileChunks } from './blob-copy.ts';
import { checkDatabaseFile, referencedBlobs } from './database-file.ts';
import { DATABASE_FILE, MANIFEST_FILE, RULE_DOCUMENTS_FILE, type SealedManifest } from './manifest.ts';
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

describe('reading the database file and the blobs of a backup', () => {
  const ROW = '{"table":"arkvory_repositories","row":{"name":"r"}}\n';
  const sealedFor = (text: string) =>
    ({
      database: {
        bytes: Buffer.byteLength(text),
        sha256: createHash('sha256').update(text).digest('hex'),
      },
    }) as unknown as SealedManifest;

  it('refuses a database.jsonl that is a named pipe or a link to /dev/zero, without waiting on it or reading it', async () => {
    const dir = await backupDir();
    const file = path.join(dir, DATABASE_FILE);
    await promisify(execFile)('mkfifo', [file]);
    for (const reading of [
      () => checkDatabaseFile(file, sealedFor(ROW)),
      async () => void (await referencedBlobs(file, 1024)),
    ]) {
      await expect(unblocking(reading(), file)).rejects.toMatchObject({
        code: 'backup_invalid',
        message: `${file} is not a regular file`,
      });
    }
    await rm(file);
    await symlink('/dev/zero', file);
    await expect(checkDatabaseFile(file, sealedFor(ROW))).rejects.toMatchObject({
      message: `${file} is not a regular file`,
    });
    await expect(referencedBlobs(file, 1024)).rejects.toMatchObject({ message: `${file} is not a regular file` });
  }, 15_000);

  it('reads no more of it than the manifest gives: a larger one is a mismatch, one grown since is refused', async () => {
    const dir = await backupDir();
    const file = path.join(dir, DATABASE_FILE);
    await writeFile(file, ROW + ROW);
    await expect(checkDatabaseFile(file, sealedFor(ROW))).rejects.toMatchObject({
      code: 'backup_invalid',
      message: expect.stringContaining(`${file} does not match the manifest (${2 * ROW.length} bytes; expected`),
    });
    await expect(referencedBlobs(file, ROW.length)).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${file} is ${2 * ROW.length} bytes, more than the ${ROW.length} it may be`,
    });
    await writeFile(file, ROW);
    await expect(checkDatabaseFile(file, sealedFor(ROW))).resolves.toBeUndefined();
    await expect(referencedBlobs(file, ROW.length)).resolves.toEqual([]);
  });

  it('reads a blob no further than asked: a link to /dev/zero ends', async () => {
    let bytes = 0;
    for await (const chunk of fileChunks('/dev/zero', 3 * 1024 * 1024 + 1)) bytes += chunk.length;
    expect(bytes).toBe(3 * 1024 * 1024 + 1);
  }, 15_000);
});
