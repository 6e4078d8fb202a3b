/**
 * Reading a backup's files (the manifest, the rule documents, the database file, the blobs): only a
 * regular file, and only up to a cap, so a named pipe does not hang `--verify` or a restore and a huge file
 * (or a link to /dev/zero) is not read without end. Missing is ENOENT, as `readFile` says it; the
 * rest is `backup_invalid`.
 */
import type { FileHandle } from 'node:fs/promises';
import { openRegularFile } from '../../lib/regular-file.ts';
import { BackupError } from './errors.ts';

/** A manifest holds a few counts per table: kilobytes. */
export const MANIFEST_MAX_BYTES = 1024 * 1024;
/** The rule documents of every limiter, as published: far below this. */
export const RULE_DOCUMENTS_MAX_BYTES = 64 * 1024 * 1024;

const CHUNK = 1024 * 1024;

/**
 * `file` opened for reading when it is a regular file of at most `maxBytes`; else `backup_invalid`.
 * A symbolic link is refused, not read through: a backup writes none, and one holding links (into the
 * live store, say, as `cp -s` makes) holds no bytes of its own while it would verify clean. `realPath`
 * (a blob's place under the backup's real path) refuses a link on a directory of its path as well.
 */
export async function openBackupFile(
  file: string,
  maxBytes: number,
  realPath?: string,
): Promise<{ handle: FileHandle; size: number }> {
  // Non-blocking (lib/regular-file.ts): a named pipe is refused at once, not waited on.
  const { handle, stats: stat } = await openRegularFile(file, {
    refuse: (reason) => new BackupError('backup_invalid', reason),
    followLinks: false,
    realPath,
  });
  try {
    if (stat.size > maxBytes)
      throw new BackupError('backup_invalid', `${file} is ${stat.size} bytes, more than the ${maxBytes} it may be`);
    return { handle, size: stat.size };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** The bytes of an open backup file from its start, at most `maxBytes`: one past them (it grew) is `backup_invalid`. */
export async function* handleChunks(handle: FileHandle, file: string, maxBytes: number): AsyncGenerator<Buffer> {
  let position = 0;
  for (;;) {
    // At most one byte past the cap, should the file grow after its stat.
    const buffer = Buffer.alloc(Math.min(CHUNK, maxBytes + 1 - position));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, position);
    if (bytesRead === 0) return;
    position += bytesRead;
    if (position > maxBytes)
      throw new BackupError('backup_invalid', `${file} is more than the ${maxBytes} bytes it may be`);
    yield buffer.subarray(0, bytesRead);
  }
}

/** Every chunk of a backup file that is a regular file of at most `maxBytes` (see openBackupFile). */
export async function* backupFileChunks(file: string, maxBytes: number): AsyncGenerator<Buffer> {
  const { handle } = await openBackupFile(file, maxBytes);
  try {
    yield* handleChunks(handle, file, maxBytes);
  } finally {
    await handle.close();
  }
}

/**
 * The first `maxBytes` bytes of a backup's file that must be a regular file (a blob): a named pipe,
 * a device, a directory or a symbolic link (on its path too, given `realPath`) there is `backup_invalid` naming the file, found at its non-blocking open
 * before a byte is read; any size is read, up to `maxBytes`, for the caller to judge.
 */
export async function* regularFileChunks(file: string, maxBytes: number, realPath?: string): AsyncGenerator<Buffer> {
  const { handle } = await openBackupFile(file, Number.MAX_SAFE_INTEGER, realPath);
  try {
    for (let position = 0; position < maxBytes; ) {
      const buffer = Buffer.alloc(Math.min(CHUNK, maxBytes - position));
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, position);
      if (bytesRead === 0) return;
      position += bytesRead;
      yield buffer.subarray(0, bytesRead);
    }
  } finally {
    await handle.close();
  }
}

export async function readSmallFile(file: string, maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of backupFileChunks(file, maxBytes)) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}
