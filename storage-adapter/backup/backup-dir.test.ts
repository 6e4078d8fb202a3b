import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { pruneBackups, removeStalePartials } from './backup-dir.ts';
import { dumpDatabase } from './database-dump.ts';
import { MANIFEST_FILE } from './manifest.ts';

let dir: string;
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function destination(): Promise<string> {
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-backup-dir-'));
  return dir;
}

async function completeBackup(at: string, name: string): Promise<string> {
  const backup = path.join(at, name);
  await mkdir(backup);
  await writeFile(path.join(backup, MANIFEST_FILE), '{}');
  return backup;
}

describe('partials of interrupted backups', () => {
  it("are removed when their process is gone, or named with this process's pid (a dead run in a container)", async () => {
    const at = await destination();
    const own = `arkvory-20261205T010000000Z.${process.pid}.partial`;
    const running = `arkvory-20261205T010000000Z.1.partial`;
    const dead = `arkvory-20261205T010000000Z.999999999.partial`;
    for (const name of [own, running, dead]) await mkdir(path.join(at, name));
    expect((await removeStalePartials(at)).sort()).toEqual([dead, own].sort());
    expect(await readdir(at)).toEqual([running]);
  });
});

describe('pruning', () => {
  it('keeps the backup just made even when a clock stepped back names it the oldest', async () => {
    const at = await destination();
    const later = await completeBackup(at, 'arkvory-20261205T020000000Z');
    const made = await completeBackup(at, 'arkvory-20261205T010000000Z');
    expect(await pruneBackups(at, 1, made)).toEqual([later]);
    expect(await readdir(at)).toEqual([path.basename(made)]);
  });

  it('keeps `keep` backups: the one made and the newest of the others', async () => {
    const at = await destination();
    const names = ['arkvory-20261205T010000000Z', 'arkvory-20261205T020000000Z', 'arkvory-20261205T030000000Z'];
    const [oldest, middle, newest] = await Promise.all(names.map((n) => completeBackup(at, n)));
    expect(await pruneBackups(at, 2, newest!)).toEqual([oldest]);
    expect((await readdir(at)).sort()).toEqual([path.basename(middle!), path.basename(newest!)]);
  });
});

describe('the database dump', () => {
  it('takes no connection when its file cannot be made, so the pool can end', async () => {
    const at = await destination();
    let checkedOut = 0;
    const pool = {
      async connect() {
        checkedOut++;
        return { release: () => checkedOut--, query: async () => ({ rows: [] }) };
      },
    } as unknown as pg.Pool;
    await expect(dumpDatabase(pool, path.join(at, 'missing', 'database.json'))).rejects.toMatchObject({
      code: 'ENOENT',
    });
    expect(checkedOut).toBe(0);
  });
});
