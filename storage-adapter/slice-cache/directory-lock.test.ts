import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HOLDER_FILE, joinDirectory, LOCK_FILE, lockDirectory, noWorkersLeft } from './directory-lock.ts';

describe('lockDirectory', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'arkvory-dir-lock-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const at = new Date('2026-03-01T10:00:00.000Z');

  it('holds the directory until released, naming its holder to a second taker meanwhile', async () => {
    const first = await lockDirectory(dir, () => at);
    expect(first.held).toBe(true);
    expect((await readdir(dir)).sort()).toEqual([LOCK_FILE, HOLDER_FILE]);

    // SQLite refuses a second connection of the same process too, as it refuses another process's.
    const second = await lockDirectory(dir);
    expect(second).toEqual({ held: false, holder: { pid: process.pid, host: hostname(), since: at.toISOString() } });

    if (first.held) await first.release();
    expect(await readdir(dir)).toEqual([LOCK_FILE]);
    const third = await lockDirectory(dir);
    expect(third.held).toBe(true);
    if (third.held) await third.release();
  });

  it('a held lock without a readable holder note names no holder', async () => {
    const first = await lockDirectory(dir);
    await writeFile(path.join(dir, HOLDER_FILE), 'not json');
    expect(await lockDirectory(dir)).toEqual({ held: false, holder: undefined });
    if (first.held) await first.release();
  });

  it('workers hold their shares until each is released; the holder of the lock sees whether any is left', async () => {
    expect(await noWorkersLeft(dir)).toBe(true);
    const one = await joinDirectory(dir);
    const two = await joinDirectory(dir);
    expect(await noWorkersLeft(dir)).toBe(false);
    one.release();
    expect(await noWorkersLeft(dir)).toBe(false);
    two.release();
    expect(await noWorkersLeft(dir)).toBe(true);
  });

  it('a lock file that is not an empty database is an error naming it, not a lock held elsewhere', async () => {
    await writeFile(path.join(dir, LOCK_FILE), 'not a database, and long enough to have a header to read'.repeat(10));
    await expect(lockDirectory(dir)).rejects.toThrow(
      `cannot lock ${path.join(dir, LOCK_FILE)}: file is not a database`,
    );
  });
});
