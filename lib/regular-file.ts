/**
 * Opening a file that must be a regular file, without ever waiting on it. A plain open of a named pipe
 * for reading blocks until a writer comes, and it blocks a thread of libuv's pool (4 by default), so
 * a few such opens stall every file operation of the process. Opened non-blocking, a pipe returns at
 * once (it has no writer) and fstat says what the file is before a byte is read; on a regular file
 * the flag changes nothing.
 */
import { constants, type Stats } from 'node:fs';
import { type FileHandle, open, readlink, realpath, stat } from 'node:fs/promises';

export interface RegularFileOptions {
  /**
   * The error for a file that is there but is no regular file (a named pipe, a device, a directory,
   * or a symbolic link when `followLinks` is false); `reason` is `<file> is not a regular file`.
   */
  readonly refuse: (reason: string) => Error;
  /** False: a symbolic link as the last component is refused too, instead of read through. Default true. */
  readonly followLinks?: boolean | undefined;
  /**
   * The real path (no symbolic link in it) the opened file must have: a link on a directory of the
   * path (O_NOFOLLOW guards the last component only) that leads elsewhere is refused. Checked on the
   * descriptor, so a link swapped in between the open and the check is caught too.
   */
  readonly realPath?: string | undefined;
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
    if (options.realPath !== undefined) {
      const actual = await openedPath(handle, file, stats);
      if (actual !== options.realPath)
        throw options.refuse(
          `${file} is not a regular file in its place: a symbolic link on its path leads out of its place in the store, to ${actual ?? 'another file'}`,
        );
    }
    return { handle, stats };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** What Linux appends to a descriptor's path once its name is gone (replaced or removed after the open). */
const DELETED = ' (deleted)';

/**
 * The real path of the file open on `handle`: on Linux the kernel's own (one readlink of
 * /proc/self/fd, so no race with a link swapped after the open); elsewhere `file` resolved, kept
 * only when the name still leads to the very file open (else `undefined`, which matches nothing).
 */
async function openedPath(handle: FileHandle, file: string, opened: Stats): Promise<string | undefined> {
  try {
    const target = await readlink(`/proc/self/fd/${handle.fd}`);
    // A name replaced after the open (a blob renamed over, which its readers may finish) still says where it was.
    return target.endsWith(DELETED) ? target.slice(0, -DELETED.length) : target;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const resolved = await realpath(file).catch(() => undefined);
  if (resolved === undefined) return undefined;
  const now = await stat(resolved).catch(() => undefined);
  return now !== undefined && now.ino === opened.ino && now.dev === opened.dev ? resolved : undefined;
}
