/**
 * What `download` carries over from a file it replaces. The final name is taken by a rename, so the
 * new file would otherwise get the umask's mode and this process's owner, where `curl -o` and
 * `wget -O`, which write into the existing file, keep both: a key file kept 0600 would come back
 * readable by every local user. A name that holds no regular file (none, a symlink, a directory)
 * keeps nothing: the new file gets the umask's mode.
 */
import { chmod, chown, lstat } from 'node:fs/promises';

export interface ReplacedFile {
  /** Permission bits only: set-user-ID and set-group-ID are not carried over onto other bytes. */
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
}

/** The permission bits and owner of the regular file named `file`, or undefined when there is none. */
export async function replacedFileOf(file: string): Promise<ReplacedFile | undefined> {
  const stats = await lstat(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (!stats?.isFile()) return undefined;
  return { mode: stats.mode & 0o777, uid: stats.uid, gid: stats.gid };
}

/**
 * Gives `file` the owner of `replaced` as far as this process may (root: user and group; anyone
 * else: a group of theirs, since only root gives a file away), then its permission bits (after the
 * owner: a chown clears set-ID bits).
 */
export async function takeOver(file: string, replaced: ReplacedFile): Promise<void> {
  const refused = (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPERM') throw err;
  };
  await chown(file, replaced.uid, replaced.gid).catch(async (err: NodeJS.ErrnoException) => {
    refused(err);
    await chown(file, -1, replaced.gid).catch(refused);
  });
  await chmod(file, replaced.mode);
}
