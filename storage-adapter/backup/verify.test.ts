/** A backup's manifest, rule documents and database file are taken only from regular files of bounded size. */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, mkdtemp, open, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { checkDatabaseFile, DATABASE_LINE_MAX_BYTES, dumpLines, referencedBlobs } from './database-file.ts';
import { blobRelativePath } from '../paths.ts';
import {
  BACKUP_FORMAT,
  DATABASE_FILE,
  MANIFEST_FILE,
  RULE_DOCUMENTS_FILE,
  sealManifest,
  type SealedManifest,
} from './manifest.ts';
import { MANIFEST_MAX_BYTES, regularFileChunks, RULE_DOCUMENTS_MAX_BYTES } from './small-file.ts';
import { NAME_PATTERN } from '../../policy/rate-limit/rules.ts';
import { LIMITER_NAME, openBackup, readRuleDocuments, verifyBackup } from './verify.ts';

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

  it("refuses a resealed rule-documents.json naming a key no limiter has (the rule store's own `:index`), or holding no mapping", async () => {
    const dir = await backupDir();
    const file = path.join(dir, RULE_DOCUMENTS_FILE);
    const sealed = async (docs: unknown) => {
      const text = `${JSON.stringify(docs)}\n`;
      await writeFile(file, text);
      const sha256 = createHash('sha256').update(text).digest('hex');
      return {
        ruleDocuments: { file: RULE_DOCUMENTS_FILE, count: 1, bytes: text.length, sha256 },
      } as unknown as SealedManifest;
    };
    const good = { transfer_bytes: { published_rules: { rules: [] } } };
    expect(LIMITER_NAME.source).toBe(NAME_PATTERN.source);
    await expect(readRuleDocuments(dir, await sealed(good))).resolves.toEqual(good);
    for (const [docs, named] of [
      [{ ':index': ['x'] }, '":index"'],
      [{ '../x': {} }, '"../x"'],
      [{ transfer_bytes: 'text' }, '"transfer_bytes"'],
    ] as const)
      await expect(readRuleDocuments(dir, await sealed(docs))).rejects.toMatchObject({
        code: 'backup_invalid',
        message: expect.stringContaining(`${file} holds ${named}, which is no limiter's document`),
      });
    await expect(readRuleDocuments(dir, await sealed([1]))).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${file} is not a mapping of limiters to documents`,
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
    // A backup writes no link: one is refused before what it leads to is even looked at.
    await expect(checkDatabaseFile(file, sealedFor(ROW))).rejects.toMatchObject({
      message: `${file} is not a regular file (a symbolic link)`,
    });
    await expect(referencedBlobs(file, 1024)).rejects.toMatchObject({
      message: `${file} is not a regular file (a symbolic link)`,
    });
  }, 15_000);

  it('refuses a database.jsonl line longer than a row can be, and reads rows split across its chunks whole', async () => {
    const dir = await backupDir();
    const file = path.join(dir, DATABASE_FILE);
    // A resealed file whose one line is a row past the cap (a file of gigabytes without a newline
    // was gathered into memory whole to be parsed).
    const huge = `${JSON.stringify({ table: 'arkvory_rule_documents', row: { document: 'x'.repeat(DATABASE_LINE_MAX_BYTES) } })}\n`;
    await writeFile(file, ROW + huge);
    await expect(referencedBlobs(file, Buffer.byteLength(ROW + huge))).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${file} line 2 is longer than ${DATABASE_LINE_MAX_BYTES} bytes, which no row is`,
    });
    // Rows of every length around the read's chunks (64 KiB) come back as written, multi-byte text too.
    const rows = [10, 65_530, 70_000, 3, 200_000].map((n, i) => ({
      table: 'arkvory_repositories',
      row: { name: `r${i}`, description: 'é€'.repeat(n) },
    }));
    const text = rows.map((r) => `${JSON.stringify(r)}\n`).join('');
    await writeFile(file, text);
    const seen = [];
    for await (const { table, row } of dumpLines(file, Buffer.byteLength(text))) seen.push({ table, row });
    expect(seen).toEqual(rows);
  });

  it("refuses a part row whose file name is a path (`../../x`), not a file's name", async () => {
    const dir = await backupDir();
    const file = path.join(dir, DATABASE_FILE);
    const part = (name: unknown) =>
      `${JSON.stringify({ table: 'arkvory_upload_parts', row: { session_id: 'x', part_number: 1, file_name: name } })}\n`;
    await writeFile(file, part('00001-0f0e.part'));
    await expect(referencedBlobs(file, 1024)).resolves.toEqual([]);
    for (const name of ['../../blobs/sha256/ab/cd/x', '/etc/passwd', '..', 'a\\b', '']) {
      await writeFile(file, ROW + part(name));
      await expect(referencedBlobs(file, 1024)).rejects.toMatchObject({
        code: 'backup_invalid',
        message: `${file} line 2 names part file ${JSON.stringify(name)}, which is not a file name`,
      });
    }
  });

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
});

describe('reading the blobs of a backup', () => {
  const BODY = Buffer.from('a blob');
  const SHA = createHash('sha256').update(BODY).digest('hex');

  /** A sealed backup of one artifact whose blob file is left to the test. */
  async function backupOfOneBlob(): Promise<{ dir: string; blob: string }> {
    const dir = await backupDir();
    const rows = `${JSON.stringify({ table: 'arkvory_artifacts', row: { sha256: SHA, size_bytes: BODY.length } })}\n`;
    await writeFile(path.join(dir, DATABASE_FILE), rows);
    await writeFile(
      path.join(dir, MANIFEST_FILE),
      sealManifest({
        format: BACKUP_FORMAT,
        snapshotTime: '2026-01-01T00:00:00.000Z',
        completedAt: '2026-01-01T00:00:01.000Z',
        storageId: '00000000-0000-4000-8000-000000000000',
        store: { kind: 'directory', location: '/nowhere' },
        schemaVersion: 1,
        tables: [{ name: 'arkvory_artifacts', rows: 1, restored: true }],
        database: {
          file: DATABASE_FILE,
          bytes: rows.length,
          sha256: createHash('sha256').update(rows).digest('hex'),
        },
        blobs: { count: 1, bytes: BODY.length },
        ruleDocuments: null,
      } as Parameters<typeof sealManifest>[0]),
    );
    const blob = path.join(dir, blobRelativePath(SHA));
    await mkdir(path.dirname(blob), { recursive: true });
    return { dir, blob };
  }

  it('--verify refuses a blob that is a named pipe, naming it, without waiting for a writer', async () => {
    const { dir, blob } = await backupOfOneBlob();
    await promisify(execFile)('mkfifo', [blob]);
    await expect(unblocking(verifyBackup(dir), blob)).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${blob} is not a regular file`,
    });
    await rm(blob);
    await writeFile(blob, BODY);
    await expect(verifyBackup(dir)).resolves.toMatchObject({ ok: true, checked: 1, bytes: BODY.length });
  }, 15_000);

  it('reads a blob only from a regular file, and no further than asked', async () => {
    const { blob } = await backupOfOneBlob();
    await promisify(execFile)('mkfifo', [blob]);
    const read = async (file: string, maxBytes: number) => {
      const chunks: Buffer[] = [];
      for await (const chunk of regularFileChunks(file, maxBytes)) chunks.push(chunk);
      return Buffer.concat(chunks);
    };
    await expect(unblocking(read(blob, 10), blob)).rejects.toMatchObject({
      code: 'backup_invalid',
      message: `${blob} is not a regular file`,
    });
    await rm(blob);
    await symlink('/dev/zero', blob);
    await expect(read(blob, 10)).rejects.toMatchObject({ message: `${blob} is not a regular file (a symbolic link)` });
    await rm(blob);
    await writeFile(blob, BODY);
    expect((await read(blob, 3)).toString()).toBe('a b');
    expect((await read(blob, BODY.length + 1)).equals(BODY)).toBe(true);
    await expect(read(path.join(path.dirname(blob), 'gone'), 1)).rejects.toMatchObject({ code: 'ENOENT' });
  }, 15_000);
});
