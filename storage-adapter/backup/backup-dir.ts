/** Names and listing of backups under a destination directory. */
import { existsSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { MANIFEST_FILE } from './manifest.ts';

const BACKUP_NAME = /^arkvory-\d{8}T\d{6}\d{3}Z(-\d+)?$/;
const PARTIAL_NAME = /^(arkvory-[0-9TZ-]+)\.(\d+)\.partial$/;

/** `arkvory-20261201T120000123Z`: sorts by time as text. */
export function backupName(nowMs: number): string {
  return `arkvory-${new Date(nowMs).toISOString().replace(/[-:.]/g, '')}`;
}

/** Complete backups (a directory of our name holding a manifest), oldest first. */
export async function completeBackups(destination: string): Promise<string[]> {
  const entries = await readdir(destination, { withFileTypes: true }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  return entries
    .filter(
      (e) => e.isDirectory() && BACKUP_NAME.test(e.name) && existsSync(path.join(destination, e.name, MANIFEST_FILE)),
    )
    .map((e) => e.name)
    .sort()
    .map((name) => path.join(destination, name));
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes what interrupted backups left (`<name>.<pid>.partial` of a process no longer running).
 * Called before this process makes its own partial, so one named with this process's pid is not
 * ours but a dead run's: in a container every run is the same pid (node under tini), and the
 * partial of a run killed there would otherwise be kept for ever.
 */
export async function removeStalePartials(destination: string): Promise<string[]> {
  const removed: string[] = [];
  for (const entry of await readdir(destination)) {
    const match = PARTIAL_NAME.exec(entry);
    if (!match) continue;
    const pid = Number(match[2]);
    if (pid !== process.pid && isAlive(pid)) continue;
    await rm(path.join(destination, entry), { recursive: true, force: true });
    removed.push(entry);
  }
  return removed;
}

/**
 * Keeps the newest `keep` complete backups, `made` (the one just written) always among them, whatever
 * its name says (a clock stepped back names it older than earlier ones); returns the removed ones.
 */
export async function pruneBackups(destination: string, keep: number, made: string): Promise<string[]> {
  const others = (await completeBackups(destination)).filter((dir) => dir !== made);
  const doomed = others.slice(0, Math.max(0, others.length - Math.max(0, keep - 1)));
  for (const dir of doomed) await rm(dir, { recursive: true, force: true });
  return doomed;
}

/** A backup directory itself, or the newest complete backup under a destination. */
export async function resolveBackup(source: string): Promise<string | undefined> {
  if (existsSync(path.join(source, MANIFEST_FILE))) return path.resolve(source);
  return (await completeBackups(source)).at(-1);
}
