/**
 * Opening a file that must be a regular file, without ever waiting on it. A plain open of a named pipe
 * for reading blocks until a writer comes, and it blocks a thread of libuv's pool (4 by default), so
 * a few such opens stall every file operation of the process. Opened non-blocking, a pipe returns at
 * once (it has no writer) and fstat says what the file is before a byte is read; on a regular file
 * the flag changes nothing.
 */
import { constants, type Stats } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';

export interface RegularFileOptions {
  /**
   * The error for a file that is there but is no regular file (a named pipe, a device, a directory,
   * or a symbolic link when `followLinks` is false); `reason` is `<file> is not a regular file`.
   */
  readonly refuse: (reason: string) => Error;
  /** False: a symbolic link as the last component is refused too, instead of read through. Default true. */
  readonly followLinks?: boolean | undefined;
}

/** `file` opened for reading when it is a regular file; the caller closes the handle. Missing is ENOENT. */
export async function openRegularFile(
  file: string,
  options: RegularFileOptions,
): Promise<{ handle: FileHandle; stats: Stats }> {
  const flags = constants.O_RDONLY | constants.O_NONBLOCK | (options.followLinks === false ? constants.O_NOFOLLOW : 0);
  let handle: FileHandle;
  try {
    handle = await open(file, flags);
  } catch (err) {
    // O_NOFOLLOW on a symbolic link: ELOOP.
    if (options.followLinks === false && (err as NodeJS.ErrnoException).code === 'ELOOP')
      throw options.refuse(`${file} is not a regular file (a symbolic link)`);
    throw err;
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) throw options.refuse(`${file} is not a regular file`);
    return { handle, stats };
  } catch (err) {
    await handle.close();
    throw err;
  }
}
