/**
 * One gateway instance per slice cache directory: each instance bounds and evicts only its own
 * slices and clears what its layout does not use at start (worker-layout.ts), so two sharing one
 * would undo each other. The instance (a single process, or the coordinating process of several
 * workers) holds `instance.lock` in the directory from before it touches anything there until it
 * stops; another instance finds it held and refuses to start.
 *
 * The lock is a POSIX record lock, which the kernel drops when its process dies however it dies
 * (SIGKILL, the OOM killer), so a crash never leaves a lock to judge stale: SQLite's exclusive
 * transaction (node:sqlite) on an empty database file, the only such lock Node offers (it has no
 * flock). A file created with O_EXCL naming a pid must be judged stale by its pid and start time,
 * and two starts after a crash may both find it stale, both remove it and both hold it; a lock
 * kept fresh by its mtime (proper-lockfile) blocks a restart until it goes stale and is lost when
 * the event loop stalls past that. Beside the lock, `instance.lock.holder` names the holding
 * process for the message of a refused start; it is never what decides.
 *
 * The workers of an instance (ARKVORY_WORKERS) each hold a shared lock on `workers.lock` for their
 * lives, and whoever takes `instance.lock` checks that none is left: workers whose coordinating
 * process was killed drain on their own for up to the shutdown timeout, still using their parts.
 */
import { hostname } from 'node:os';
import { chmod, open, rename, rm, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { DatabaseSync } from 'node:sqlite';

export const LOCK_FILE = 'instance.lock';
export const HOLDER_FILE = 'instance.lock.holder';
export const WORKERS_LOCK_FILE = 'workers.lock';

/** The process holding a directory, as its holder note says. */
export interface LockHolder {
  readonly pid: number;
  readonly host: string;
  /** When it took the lock (ISO 8601). */
  readonly since: string;
}

export type DirectoryLock =
  | { readonly held: true; release(): Promise<void> }
  /** Another process holds it; `holder` when its note could be read. */
  | { readonly held: false; readonly holder: LockHolder | undefined };

/** SQLITE_BUSY and SQLITE_LOCKED: another connection holds a lock that conflicts. */
const BUSY = new Set([5, 6]);

/**
 * Takes the directory's lock for this process (`dir` must exist). Errors other than a lock held
 * elsewhere (a lock file that is not an empty database, a directory this user cannot write) are
 * thrown, naming the file.
 */
export async function lockDirectory(dir: string, now: () => Date = () => new Date()): Promise<DirectoryLock> {
  const db = await openLock(dir, LOCK_FILE, 'BEGIN EXCLUSIVE');
  if (db === 'busy') return { held: false, holder: await readHolder(dir) };
  await writeHolder(dir, { pid: process.pid, host: hostname(), since: now().toISOString() }).catch(() => {});
  return {
    held: true,
    async release() {
      // The note goes first: once the lock is let go, the note may be the next holder's.
      await rm(path.join(dir, HOLDER_FILE), { force: true }).catch(() => {});
      db.close();
    },
  };
}

/**
 * Whether no worker holds its share of `dir` (joinDirectory): asked by the holder of the
 * directory's lock before its own workers start.
 */
export async function noWorkersLeft(dir: string): Promise<boolean> {
  const db = await openLock(dir, WORKERS_LOCK_FILE, 'BEGIN EXCLUSIVE');
  if (db === 'busy') return false;
  db.close();
  return true;
}

/** A worker's share of its instance's directory, held until released or the worker dies. */
export async function joinDirectory(dir: string): Promise<{ release(): void }> {
  // Busy only while a holder of the directory's lock checks for workers, before it starts its own.
  const db = await openLock(dir, WORKERS_LOCK_FILE, 'BEGIN; SELECT count(*) FROM sqlite_schema');
  if (db === 'busy') throw new Error(`cannot share ${path.join(dir, WORKERS_LOCK_FILE)}: it is being checked`);
  return { release: () => db.close() };
}

/**
 * Makes the lock file `file` this account's alone (0600), created so or its mode set: any process
 * that may open a file may hold a lock on it, and another account's shared lock on either lock
 * file would refuse every start of the gateway. Never an open and close of a file that exists: a
 * close lets go of every POSIX lock this process holds on the file.
 */
async function ownerOnly(file: string): Promise<void> {
  try {
    await (await open(file, 'wx', 0o600)).close();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    // Another account's file (EPERM) is left as it is; the lock then says what it says.
    await chmod(file, 0o600).catch(() => {});
  }
}

/** `begin` run on the lock file `name` of `dir`, its transaction left open: the lock it takes is held. */
async function openLock(dir: string, name: string, begin: string): Promise<DatabaseSync | 'busy'> {
  const file = path.join(dir, name);
  try {
    await ownerOnly(file);
  } catch (err) {
    throw new Error(`cannot lock ${file}: ${(err as Error).message}`, { cause: err });
  }
  // Loaded here, not at the module's import: Node 22 warns that node:sqlite is experimental.
  const { DatabaseSync } = await import('node:sqlite');
  let db: DatabaseSync | undefined;
  try {
    db = new DatabaseSync(file, { timeout: 0 });
    // No journal file beside the lock: nothing is ever written.
    db.exec('PRAGMA journal_mode = MEMORY');
    db.exec(begin);
    return db;
  } catch (err) {
    db?.close();
    if (BUSY.has((err as { errcode?: number }).errcode ?? -1)) return 'busy';
    throw new Error(`cannot lock ${file}: ${(err as Error).message}`, { cause: err });
  }
}

async function writeHolder(dir: string, holder: LockHolder): Promise<void> {
  const temp = path.join(dir, `${HOLDER_FILE}.${process.pid}`);
  await writeFile(temp, `${JSON.stringify(holder)}\n`);
  await rename(temp, path.join(dir, HOLDER_FILE));
}

async function readHolder(dir: string): Promise<LockHolder | undefined> {
  try {
    const parsed = JSON.parse(await readFile(path.join(dir, HOLDER_FILE), 'utf8')) as Partial<LockHolder>;
    if (typeof parsed.pid !== 'number' || typeof parsed.host !== 'string' || typeof parsed.since !== 'string')
      return undefined;
    return { pid: parsed.pid, host: parsed.host, since: parsed.since };
  } catch {
    return undefined;
  }
}
