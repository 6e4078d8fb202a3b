/**
 * Reading a backup's small files whole (the manifest, the rule documents): only a regular file, and
 * only up to a cap, so a named pipe does not hang `--verify` or a restore and a huge file is not
 * taken into memory. Missing is ENOENT, as `readFile` says it; the rest is `backup_invalid`.
 */
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { BackupError } from './errors.ts';

/** A manifest holds a few counts per table: kilobytes. */
export const MANIFEST_MAX_BYTES = 1024 * 1024;
/** The rule documents of every limiter, as published: far below this. */
export const RULE_DOCUMENTS_MAX_BYTES = 64 * 1024 * 1024;

export async function readSmallFile(file: string, maxBytes: number): Promise<string> {
  // Non-blocking, so that opening a named pipe returns at once (it has no writer) and fstat says what it is.
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new BackupError('backup_invalid', `${file} is not a regular file`);
    if (stat.size > maxBytes)
      throw new BackupError('backup_invalid', `${file} is ${stat.size} bytes, more than the ${maxBytes} it may be`);
    // At most one byte past the cap, should the file grow after the stat.
    const buffer = Buffer.alloc(Math.min(stat.size, maxBytes) + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length === buffer.length) break;
    }
    if (length > maxBytes)
      throw new BackupError('backup_invalid', `${file} is more than the ${maxBytes} bytes it may be`);
    return buffer.subarray(0, length).toString('utf8');
  } finally {
    await handle.close();
  }
}
