/**
 * The slice cache directory's note of how far it applied purge requests: PostgreSQL's time of its
 * last successful sweep (`purges` beside `slices/`). A cache that opens again reads it to drop what
 * was purged while it was stopped (storage-adapter/catalog/slice-rows.ts, `purgesAtStart`). Written
 * whole or not at all (a file in the cache's `tmp/`, emptied at every open, renamed over it); a
 * missing or unreadable note counts as no sweep ever, which only drops more.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

export const PURGE_MARK_FILE = 'purges';

export async function readPurgeMark(dir: string): Promise<Date | undefined> {
  const text = await readFile(path.join(dir, PURGE_MARK_FILE), 'utf8').catch(() => undefined);
  const at = text === undefined ? Number.NaN : Date.parse(text.trim());
  return Number.isFinite(at) ? new Date(at) : undefined;
}

export async function writePurgeMark(dir: string, at: Date): Promise<void> {
  const file = path.join(dir, PURGE_MARK_FILE);
  const temp = path.join(dir, 'tmp', PURGE_MARK_FILE);
  await writeFile(temp, `${at.toISOString()}\n`, { mode: 0o600 });
  await rename(temp, file);
}
