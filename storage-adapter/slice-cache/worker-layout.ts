/**
 * Where the slice cache lives when an instance has several workers (ARKVORY_WORKERS above 1): each
 * worker owns `w<index>/` under the cache directory (its own index, tmp/, slices/ and purge note),
 * with floor(bound / N) bytes and files, so the instance stays within the configured bounds whichever
 * worker fills. A single process keeps `slices/`, `tmp/` and `purges` directly under the directory.
 * At the instance's start, what belongs to the other layout (or to workers beyond N) is removed:
 * nobody would index it, so it would take disk the bounds never count.
 */
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';

export interface SliceCacheBounds {
  readonly dir: string;
  readonly maxBytes: number;
  readonly maxFiles: number;
}

/** A worker's own part of the instance's cache: its directory and its share of each bound. */
export function workerSliceCache(bounds: SliceCacheBounds, index: number, workers: number): SliceCacheBounds {
  return {
    dir: path.join(bounds.dir, workerDirName(index)),
    maxBytes: workerShare(bounds.maxBytes, workers),
    maxFiles: workerShare(bounds.maxFiles, workers),
  };
}

/**
 * A floor share, so the workers' parts never sum past the bound; 0 files when there are fewer files
 * than workers: that worker relays every fill rather than overrun the bound.
 */
export function workerShare(bound: number, workers: number): number {
  return Math.floor(bound / workers);
}

function workerDirName(index: number): string {
  return `w${index}`;
}

const WORKER_DIR = /^w(0|[1-9]\d*)$/;
const SINGLE_PROCESS_ENTRIES = new Set(['slices', 'tmp', 'purges']);

/**
 * The entries of the cache directory that the layout of `workers` (1: a single process) does not
 * use: the other layout's, and the directories of workers the instance no longer has. Anything else
 * is not the cache's and is left alone.
 */
export function strayLayoutEntries(names: readonly string[], workers: number): string[] {
  return names.filter((name) => {
    const worker = WORKER_DIR.exec(name);
    if (worker) return workers === 1 || Number(worker[1]) >= workers;
    return workers > 1 && SINGLE_PROCESS_ENTRIES.has(name);
  });
}

/** What a filesystem made for the cache alone may hold already (ext4's mkfs). */
const FILESYSTEM_ENTRIES = new Set(['lost+found']);
/** Entries only a slice cache makes: its lock (every start since it exists) and either layout's slices. */
const CACHE_MARKS = new Set(['instance.lock', 'slices']);

/**
 * The entries that make a directory someone else's (a mistaken ARKVORY_CACHE_DIR: a home, `/`,
 * another gateway's data directory): none when it is empty or already a slice cache's. A cache
 * empties its `tmp/` at start and removes whole entries its layout does not use, so it must never
 * be given a directory it did not make.
 */
export function foreignEntries(names: readonly string[]): string[] {
  if (names.some((name) => CACHE_MARKS.has(name) || WORKER_DIR.test(name))) return [];
  return names.filter((name) => !FILESYSTEM_ENTRIES.has(name));
}

/**
 * Removes the stray entries (strayLayoutEntries) under `dir`, logging them; returns their names. Run
 * before any cache opens on `dir`: in the coordinating process of several workers, before it starts
 * them. A missing directory is a cold start: nothing to remove.
 */
export async function removeStrayLayout(
  dir: string,
  workers: number,
  log: { info(obj: object, msg: string): void },
): Promise<string[]> {
  const names = await readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  const stray = strayLayoutEntries(names, workers);
  for (const name of stray) await rm(path.join(dir, name), { recursive: true, force: true });
  if (stray.length > 0)
    log.info(
      { dir, removed: stray, workers },
      'slice cache: removed the parts of its directory this layout does not use',
    );
  return stray;
}
