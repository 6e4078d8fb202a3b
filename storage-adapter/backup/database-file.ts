/**
 * Reading a backup's `database.jsonl`: its digest, and its rows table by table. Each read opens it
 * as a regular file and reads at most the bytes the manifest gives it (small-file.ts): a named pipe
 * or a link to /dev/zero in its place is `backup_invalid`, found before anything is written.
 */
import { BackupError } from './errors.ts';
import { hashStream } from './blob-copy.ts';
import type { SealedManifest } from './manifest.ts';
import { backupFileChunks, handleChunks, openBackupFile } from './small-file.ts';
import { isSha256Hex } from '../paths.ts';

export interface DumpLine {
  table: string;
  row: Record<string, unknown>;
  /** 1-based, for messages. */
  line: number;
}

/**
 * The longest line of a database file: one row (a backup writes none longer; the longest, a rule
 * document, is bounded like rule-documents.json). A line is held whole to be parsed, so without a
 * bound a resealed file of gigabytes without a newline was gathered into memory, by `--verify` too.
 */
export const DATABASE_LINE_MAX_BYTES = 64 * 1024 * 1024;

/** The lines of `chunks` (without their `\n`), each refused once longer than `maxLine` bytes, before it is whole. */
async function* boundedLines(
  chunks: AsyncIterable<Buffer>,
  maxLine: number,
  tooLong: (line: number) => Error,
): AsyncGenerator<string> {
  let held: Buffer[] = [];
  let heldBytes = 0;
  let n = 0;
  for await (const chunk of chunks) {
    let start = 0;
    for (let nl = chunk.indexOf(10, start); nl !== -1; nl = chunk.indexOf(10, start)) {
      if (heldBytes + nl - start > maxLine) throw tooLong(n + 1);
      held.push(chunk.subarray(start, nl));
      n++;
      yield Buffer.concat(held).toString('utf8').replace(/\r$/, '');
      held = [];
      heldBytes = 0;
      start = nl + 1;
    }
    heldBytes += chunk.length - start;
    if (heldBytes > maxLine) throw tooLong(n + 1);
    if (start < chunk.length) held.push(chunk.subarray(start));
  }
  if (heldBytes) yield Buffer.concat(held).toString('utf8').replace(/\r$/, '');
}

/**
 * The rows of a database file. The file's sha256 was checked against the manifest, but a manifest
 * can be resealed by whoever edits a backup: a line that is not a row, or longer than a row can be
 * (`DATABASE_LINE_MAX_BYTES`), is `backup_invalid`. At most `maxBytes` (the manifest's size of the file) are read.
 */
export async function* dumpLines(
  file: string,
  maxBytes: number,
  maxLine: number = DATABASE_LINE_MAX_BYTES,
): AsyncGenerator<DumpLine & { bytes: number }> {
  const lines = boundedLines(
    backupFileChunks(file, maxBytes),
    maxLine,
    (line) =>
      new BackupError('backup_invalid', `${file} line ${line} is longer than ${maxLine} bytes, which no row is`),
  );
  let n = 0;
  for await (const line of lines) {
    n++;
    if (line === '') continue;
    let parsed: Partial<DumpLine>;
    try {
      parsed = JSON.parse(line) as Partial<DumpLine>;
    } catch {
      throw new BackupError('backup_invalid', `${file} line ${n} is not JSON`);
    }
    if (
      parsed === null ||
      typeof parsed !== 'object' ||
      typeof parsed.table !== 'string' ||
      parsed.row === null ||
      typeof parsed.row !== 'object'
    )
      throw new BackupError('backup_invalid', `${file} line ${n} is not a table row`);
    yield { table: parsed.table, row: parsed.row, line: n, bytes: line.length };
  }
}

/** Throws `backup_invalid` unless the file has the size and sha256 the manifest records. */
export async function checkDatabaseFile(file: string, manifest: SealedManifest): Promise<void> {
  const expected = manifest.database;
  const mismatch = (seen: string) =>
    new BackupError(
      'backup_invalid',
      `${file} does not match the manifest (${seen}; expected ${expected.sha256}, ${expected.bytes} bytes)`,
    );
  // Any size: one other than the manifest's is said as a mismatch, without reading it.
  const opened = await openBackupFile(file, Number.MAX_SAFE_INTEGER).catch((err: unknown) => {
    // Missing is a damaged backup; anything else (EACCES: the backup is sound, the caller may not
    // read it; EIO) is said as the file system said it, not as a reason to give up on the backup.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    throw new BackupError('backup_invalid', `${file} is missing: ${(err as Error).message}`);
  });
  try {
    if (opened.size !== expected.bytes) throw mismatch(`${opened.size} bytes`);
    const seen = await hashStream(handleChunks(opened.handle, file, expected.bytes));
    if (seen.sha256 !== expected.sha256 || seen.bytes !== expected.bytes)
      throw mismatch(`sha256 ${seen.sha256}, ${seen.bytes} bytes`);
  } finally {
    await opened.handle.close();
  }
}

/**
 * A part row's file name is joined onto its session's directory when the part is read or removed
 * (fs-parts.ts): one component, never a path. A restore drops the part rows of the sessions it
 * aborts and no other session takes parts again, but an edited backup is refused here all the same.
 */
function checkPartFileName(name: unknown, file: string, line: number): void {
  if (typeof name === 'string' && name !== '' && name !== '.' && name !== '..' && !/[/\\\0]/.test(name)) return;
  throw new BackupError(
    'backup_invalid',
    `${file} line ${line} names part file ${JSON.stringify(String(name).slice(0, 80))}, which is not a file name`,
  );
}

/**
 * The blobs the backed-up catalog references, sorted. A name that is not a sha256 (a path such as
 * `../../etc/x` in an edited backup) or a size that is not a byte count is `backup_invalid`, found
 * before a restore writes anything.
 */
export async function referencedBlobs(
  file: string,
  maxBytes: number,
): Promise<Array<{ sha256: string; sizeBytes: number }>> {
  const blobs = new Map<string, number>();
  for await (const { table, row, line } of dumpLines(file, maxBytes)) {
    if (table === 'arkvory_upload_parts') checkPartFileName(row.file_name, file, line);
    if (table !== 'arkvory_artifacts') continue;
    const sha256 = row.sha256;
    const size = Number(row.size_bytes);
    if (typeof sha256 !== 'string' || !isSha256Hex(sha256))
      throw new BackupError(
        'backup_invalid',
        `${file} line ${line} names blob ${JSON.stringify(String(sha256).slice(0, 80))}, which is not a sha256`,
      );
    if (!Number.isSafeInteger(size) || size < 0)
      throw new BackupError(
        'backup_invalid',
        `${file} line ${line} gives blob ${sha256} the size ${JSON.stringify(row.size_bytes)}`,
      );
    blobs.set(sha256, size);
  }
  return [...blobs]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([sha256, sizeBytes]) => ({ sha256, sizeBytes }));
}
