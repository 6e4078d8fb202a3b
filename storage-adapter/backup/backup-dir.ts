/** Names and listing of backups under a destination directory. */
import { existsSync } from 'node:fs';
import { readdir, rename, rm, stat, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { isAlive } from '../../lib/process-alive.ts';
import { blobRelativePath } from '../paths.ts';
import { BackupError } from './errors.ts';
import { DATABASE_FILE, MANIFEST_FILE, openManifest } from './manifest.ts';
import { MANIFEST_MAX_BYTES, readSmallFile } from './small-file.ts';

const BACKUP_NAME = /^arkvory-\d{8}T\d{6}\d{3}Z(-\d+)?$/;
// `<name>.<host>.<pid>.partial`; the host may hold dots (a domain name). Before hosts were named,
// `<name>.<pid>.partial`: such a partial's host is unknown.
const PARTIAL_NAME = /^(arkvory-[0-9TZ-]+)(?:\.([A-Za-z0-9._-]+))?\.(\d+)\.partial$/;

/**
 * A running backup refreshes its partial directory's mtime this often, so that a host which cannot
 * ask the maker's pid (another host sharing the destination) can tell a live partial from a dead one.
 */
export const PARTIAL_HEARTBEAT_MS = 10 * 60_000;
/**
 * A partial whose mtime has not moved for this long is removed by any host. A live backup touches it
 * every PARTIAL_HEARTBEAT_MS however long it runs (a paced backup has no upper bound; the systemd
 * unit's TimeoutStartSec is 12 h), so only a stopped or dead one gets this old.
 */
export const PARTIAL_STALE_MS = 24 * 3_600_000;

/** Who makes a partial: the host (as it names itself in file names) and the process on it. */
export interface PartialMaker {
  readonly host: string;
  readonly pid: number;
}

/**
 * Refreshes a partial's mtime every PARTIAL_HEARTBEAT_MS until the returned stop is called, so that
 * other hosts sharing the destination see it live (isPartialAbandoned); a failed touch is ignored
 * (the partial may be being removed on abort).
 */
export function startPartialHeartbeat(dir: string, nowMs: () => number): () => void {
  const timer = setInterval(() => {
    const now = new Date(nowMs());
    utimes(dir, now, now).catch(() => {});
  }, PARTIAL_HEARTBEAT_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/** `os.hostname()` reduced to the characters a partial's name allows. */
export function localHostName(hostname = os.hostname()): string {
  return hostname.replace(/[^A-Za-z0-9.-]/g, '_') || 'unknown-host';
}

/** `arkvory-20261201T120000123Z`: sorts by time as text. */
export function backupName(nowMs: number): string {
  return `arkvory-${new Date(nowMs).toISOString().replace(/[-:.]/g, '')}`;
}

/** The directory a backup `name` is written in (or an old backup is removed from) by `maker`. */
export function partialName(name: string, maker: PartialMaker): string {
  return `${name}.${maker.host}.${maker.pid}.partial`;
}

export interface ParsedPartial {
  readonly name: string;
  /** Undefined for a partial named before partials carried their host. */
  readonly host: string | undefined;
  readonly pid: number;
}

export function parsePartialName(entry: string): ParsedPartial | undefined {
  const match = PARTIAL_NAME.exec(entry);
  if (!match) return undefined;
  return { name: match[1]!, host: match[2], pid: Number(match[3]) };
}

/**
 * Pure: whether a partial is left over from a run that will never finish it. Any partial idle for
 * PARTIAL_STALE_MS is; a pid means something only on the host that made the partial, so before that
 * only this host's partials are judged, by pid: one whose process is gone, or one named with our own
 * pid (called before we make our own partial; in a container every run is the same pid).
 */
export function isPartialAbandoned(
  partial: ParsedPartial,
  idleMs: number,
  self: PartialMaker,
  isAlive: (pid: number) => boolean,
): boolean {
  if (idleMs > PARTIAL_STALE_MS) return true;
  if (partial.host !== self.host) return false;
  return partial.pid === self.pid || !isAlive(partial.pid);
}

/**
 * Complete backups, oldest first: a directory of our name holding a manifest and the database file
 * (a backup removed by an older version that was interrupted may keep its manifest and lose the rest).
 * Ordered by their manifests' `sequence` (completion order, whatever the clock said), then by name:
 * backups without one (made before it was recorded, or whose manifest does not open) come first.
 * By name alone, a backup named while the clock was ahead stayed "newest" for good: `--keep` removed
 * the real newer ones around it, and a restore from the destination took it.
 */
export async function completeBackups(destination: string): Promise<string[]> {
  const entries = await readdir(destination, { withFileTypes: true }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  const complete = entries
    .filter((e) => e.isDirectory() && BACKUP_NAME.test(e.name) && looksComplete(path.join(destination, e.name)))
    .map((e) => path.join(destination, e.name));
  const ordered = await Promise.all(complete.map(async (dir) => ({ dir, sequence: await backupSequence(dir) })));
  return ordered.sort(byCompletion).map((b) => b.dir);
}

/** Pure: completion order, then name (both sort by time as text). */
export function byCompletion(
  a: { readonly dir: string; readonly sequence: number },
  b: { readonly dir: string; readonly sequence: number },
): number {
  return a.sequence - b.sequence || (a.dir < b.dir ? -1 : a.dir > b.dir ? 1 : 0);
}

/** A backup's `sequence` from its manifest: 0 when it has none or the manifest does not open. */
async function backupSequence(dir: string): Promise<number> {
  try {
    return openManifest(await readSmallFile(path.join(dir, MANIFEST_FILE), MANIFEST_MAX_BYTES), dir).sequence ?? 0;
  } catch {
    return 0;
  }
}

/** The `sequence` of a backup sealed now under `destination`: after every complete one there. */
export async function nextSequence(destination: string): Promise<number> {
  const complete = await completeBackups(destination);
  const last = complete.at(-1);
  return (last === undefined ? 0 : await backupSequence(last)) + 1;
}

function looksComplete(dir: string): boolean {
  return existsSync(path.join(dir, MANIFEST_FILE)) && existsSync(path.join(dir, DATABASE_FILE));
}

/**
 * Removes what interrupted backups and prunes left (see isPartialAbandoned). Called before this
 * process makes its own partial. A partial's idle time is measured from its directory's mtime.
 */
export async function removeStalePartials(destination: string, self: PartialMaker, nowMs: number): Promise<string[]> {
  const removed: string[] = [];
  for (const entry of await readdir(destination)) {
    const partial = parsePartialName(entry);
    if (!partial) continue;
    const dir = path.join(destination, entry);
    const mtimeMs = await stat(dir).then(
      (s) => s.mtimeMs,
      () => undefined,
    );
    if (mtimeMs === undefined || !isPartialAbandoned(partial, nowMs - mtimeMs, self, isAlive)) continue;
    await rm(dir, { recursive: true, force: true });
    removed.push(entry);
  }
  return removed;
}

/**
 * Keeps the newest `keep` complete backups, `made` (the one just written) always among them, whatever
 * its name says (a clock stepped back names it older than earlier ones); returns the removed ones.
 * Each is first renamed to a partial of `self`, in one step with its manifest, so a prune cut short
 * never leaves a backup that looks complete with files missing; the next backup removes the rest.
 * Two backups finishing at once into one destination each count the other's among the older ones:
 * with `keep` 1 each would remove the other's and leave none. So `made` is looked for after each
 * rename, before anything is removed: gone (another prune took it), the renamed one is put back and
 * `backup_removed` thrown. Of two such prunes at most one removes anything (each removes only while
 * its own backup is still there after its rename, and so took the other's name away first).
 * `remove` removes a directory tree (fs `rm`; tests cut it short).
 */
export async function pruneBackups(
  destination: string,
  keep: number,
  made: string,
  self: PartialMaker,
  remove: (dir: string) => Promise<void> = (dir) => rm(dir, { recursive: true, force: true }),
): Promise<string[]> {
  const others = (await completeBackups(destination)).filter((dir) => dir !== made);
  const doomed = others.slice(0, Math.max(0, others.length - Math.max(0, keep - 1)));
  const removed: string[] = [];
  for (const dir of doomed) {
    const removing = path.join(destination, partialName(path.basename(dir), self));
    try {
      await rename(dir, removing);
    } catch (err) {
      // Already taken by a prune running at the same time: not ours to remove.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    if (!looksComplete(made)) {
      await rename(removing, dir);
      await fsyncDirectory(destination);
      throw new BackupError(
        'backup_removed',
        `${made} was removed before it could remove older backups: another backup into ${destination} finished at the same time and its --keep removed this one (${path.basename(dir)} is kept)`,
      );
    }
    await fsyncDirectory(destination);
    await remove(removing);
    removed.push(dir);
  }
  if (!looksComplete(made))
    throw new BackupError(
      'backup_removed',
      `${made} was removed: another backup into ${destination} finished at the same time and its --keep removed this one`,
    );
  return removed;
}

/** A backup directory itself, or the newest complete backup under a destination. */
export async function resolveBackup(source: string): Promise<string | undefined> {
  if (existsSync(path.join(source, MANIFEST_FILE))) return path.resolve(source);
  return (await completeBackups(source)).at(-1);
}

/**
 * The directories under a backup that hold its blobs' entries (`blobs/sha256/ab/cd`) and those
 * directories' own entries (`blobs/sha256/ab` … `blobs`), relative to the backup, deepest first:
 * each is fsynced once before the manifest is written, so a manifest never outlives a crash that
 * its blobs' names do not.
 */
export function blobDirectories(sha256s: Iterable<string>): string[] {
  const dirs = new Set<string>();
  for (const sha256 of sha256s)
    for (let dir = path.dirname(blobRelativePath(sha256)); dir !== '.' && !dirs.has(dir); dir = path.dirname(dir))
      dirs.add(dir);
  const depth = (dir: string) => dir.split(path.sep).length;
  return [...dirs].sort((a, b) => depth(b) - depth(a) || (a < b ? -1 : a > b ? 1 : 0));
}
