/**
 * Where `upload` remembers an unfinished multipart session: one small JSON file (`{ url }`) per
 * file, target and part size in a directory of the user's own. The directory may be set
 * (`ARKVORY_UPLOAD_STATE_DIR`) to a place others can write, such as /tmp: a symlink or a directory
 * of another user planted at its name would have this run write where they chose, and a FIFO or a
 * huge file planted at a state file's name hung the run or was read whole into memory. So the
 * directory is created 0700 and must be a directory of this user (never a symlink, its group and
 * other bits removed), a state file is read only as a regular file of at most 4 KiB, and it is
 * written 0600 through a new file renamed over the name (never through what the name holds).
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { lstat, mkdir, open, rename, rm } from 'node:fs/promises';
import { readSmallFile } from './download-lock.ts';
import { ArkvoryClientError } from './errors.ts';

const { O_CREAT, O_DIRECTORY, O_EXCL, O_NOFOLLOW, O_RDONLY, O_WRONLY } = constants;

/** A full disk or quota as `no_space`; any other error as it is. */
function noSpace(err: unknown, what: string): unknown {
  const { code } = err as NodeJS.ErrnoException;
  if (code !== 'ENOSPC' && code !== 'EDQUOT') return err;
  return new ArkvoryClientError(
    'no_space',
    `No space left to write ${what} (${code === 'EDQUOT' ? 'disk quota exceeded' : 'the disk is full'}): free some space and run the upload again; the parts the gateway holds are kept for it.`,
    { cause: err },
  );
}

function notOwnDirectory(dir: string, why: string, cause?: unknown): ArkvoryClientError {
  return new ArkvoryClientError(
    'invalid_argument',
    `The upload state directory ${dir} ${why}: set ARKVORY_UPLOAD_STATE_DIR (stateDir) to a directory of your own.`,
    cause === undefined ? undefined : { cause },
  );
}

/** Creates `dir` (0700) or checks the one there: a directory of this user, not a symlink; made private. */
export async function privateStateDir(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw noSpace(err, `the upload state directory ${dir}`);
  }
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  } catch (err) {
    // O_DIRECTORY with O_NOFOLLOW fails on a symlink with ENOTDIR (Linux) or ELOOP.
    const { code } = err as NodeJS.ErrnoException;
    if (code !== 'ELOOP' && code !== 'ENOTDIR') throw err;
    const link = (await lstat(dir).catch(() => undefined))?.isSymbolicLink();
    throw notOwnDirectory(dir, link ? 'is a symbolic link' : 'is not a directory', err);
  }
  try {
    const stats = await handle.stat();
    const uid = process.getuid?.();
    if (uid !== undefined && stats.uid !== uid)
      throw notOwnDirectory(dir, `belongs to another user (uid ${stats.uid})`);
    // One made by an earlier version (0755), or by hand: the files in it name sessions of this user.
    if ((stats.mode & 0o077) !== 0) await handle.chmod(stats.mode & 0o700);
  } finally {
    await handle.close();
  }
}

/**
 * The session URL `file` remembers, or undefined (a fresh start) when there is none or the file is
 * not one this client wrote: not a regular file, over 4 KiB, not JSON, no URL. The gateway keeps
 * the parts of a session whose state is lost until it expires; a new session sends them again,
 * which an operator would rather have than a command that fails until a cache file is removed.
 */
export async function rememberedUrl(file: string): Promise<string | undefined> {
  try {
    const remembered = JSON.parse((await readSmallFile(file)) ?? '') as { url?: unknown } | null;
    return typeof remembered?.url === 'string' ? remembered.url : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes `{ url }` to `file`, 0600, through a new file renamed over it: whatever stands at the name
 * (a symlink, a FIFO, a corrupt file) is replaced, never written through, and a full disk leaves the
 * old state whole (`no_space`).
 */
export async function remember(file: string, url: string): Promise<void> {
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    const handle = await open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
    try {
      await handle.writeFile(JSON.stringify({ url }));
    } finally {
      await handle.close();
    }
    await rename(temporary, file);
  } catch (err) {
    await rm(temporary, { force: true }).catch(() => {});
    throw noSpace(err, `the upload state ${file}`);
  }
}
