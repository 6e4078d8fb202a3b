/**
 * Reading a TLS file (certificate chain, key, CA bundle) with a size cap and only when it is a
 * regular file: a file replaced with a huge one, or a link to /dev/zero, would otherwise be read
 * without end at start or on every reload, and a named pipe would block a thread of libuv's pool.
 * A chain or CA bundle is kilobytes; Mozilla's bundle of every public root is about 220 KiB.
 */
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { openRegularFile } from '../../lib/regular-file.ts';

/** The most a TLS file may hold (docs/tls.md). */
export const TLS_FILE_MAX_BYTES = 1024 * 1024;

/** Refused before its bytes are read, so the message names the file's size as its stat gives it. */
function tooLarge(variable: string, file: string, size: number): string {
  return `${variable} ${file} is ${size} bytes, more than the 1 MiB (${TLS_FILE_MAX_BYTES} bytes) a TLS file may be`;
}

const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

/**
 * The bytes of `file`, or why they cannot be used (`variable` names the file): missing or
 * unreadable (its errno code), no regular file, over the cap, or grown while it was read.
 */
export async function readTlsFile(file: string, variable: string): Promise<Buffer | string> {
  let opened: Awaited<ReturnType<typeof openRegularFile>>;
  try {
    // Non-blocking (lib/regular-file.ts): a named pipe is refused at once, not waited on.
    opened = await openRegularFile(file, { refuse: (reason) => new RefusedFile(`${variable} ${reason}`) });
  } catch (err) {
    return err instanceof RefusedFile ? err.message : cannotRead(variable, file, err);
  }
  const { handle, stats } = opened;
  try {
    if (stats.size > TLS_FILE_MAX_BYTES) return tooLarge(variable, file, stats.size);
    // One byte past its size: a file that grows while it is read (a writer not yet done) is no file to serve.
    const buffer = Buffer.alloc(stats.size + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) return buffer.subarray(0, length);
      length += bytesRead;
      if (length > stats.size) return `${variable} ${file} grew while it was read`;
    }
  } catch (err) {
    return cannotRead(variable, file, err);
  } finally {
    await handle.close();
  }
}

/** `readTlsFile` for a start that reads synchronously (ARKVORY_TLS_CA_FILE). */
export function readTlsFileSync(file: string, variable: string): Buffer | string {
  let fd: number;
  try {
    fd = openSync(file, OPEN_FLAGS);
  } catch (err) {
    return cannotRead(variable, file, err);
  }
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) return `${variable} ${file} is not a regular file`;
    if (stats.size > TLS_FILE_MAX_BYTES) return tooLarge(variable, file, stats.size);
    const buffer = Buffer.alloc(stats.size + 1);
    let length = 0;
    for (;;) {
      const bytesRead = readSync(fd, buffer, length, buffer.length - length, length);
      if (bytesRead === 0) return buffer.subarray(0, length);
      length += bytesRead;
      if (length > stats.size) return `${variable} ${file} grew while it was read`;
    }
  } catch (err) {
    return cannotRead(variable, file, err);
  } finally {
    closeSync(fd);
  }
}

class RefusedFile extends Error {}

function cannotRead(variable: string, file: string, err: unknown): string {
  return `cannot read ${variable} ${file} (${(err as NodeJS.ErrnoException).code ?? err})`;
}
