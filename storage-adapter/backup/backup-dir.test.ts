import { mkdir, mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  blobDirectories,
  completeBackups,
  isPartialAbandoned,
  localHostName,
  PARTIAL_HEARTBEAT_MS,
  PARTIAL_STALE_MS,
  type ParsedPartial,
  parsePartialName,
  pruneBackups,
  removeStalePartials,
  resolveBackup,
  startPartialHeartbeat,
} from './backup-dir.ts';
import { dumpDatabase } from './database-dump.ts';
import { DATABASE_FILE, MANIFEST_FILE } from './manifest.ts';

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

async function destination(): Promise<string> {
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-backup-dir-'));
  return dir;
}

async function completeBackup(at: string, name: string): Promise<string> {
  const backup = path.join(at, name);
  await mkdir(path.join(backup, 'blobs'), { recursive: true });
  await writeFile(path.join(backup, DATABASE_FILE), '');
  await writeFile(path.join(backup, 'blobs', 'b1'), 'x');
  await writeFile(path.join(backup, MANIFEST_FILE), '{}');
  return backup;
}

const HOUR_MS = 3_600_000;
const self = { host: 'this-host', pid: 4242 };

describe('partial names', () => {
  it.each([
    ['arkvory-20261205T010000000Z.this-host.17.partial', { host: 'this-host', pid: 17 }],
    ['arkvory-20261205T010000000Z.db1.example.org.17.partial', { host: 'db1.example.org', pid: 17 }],
    ['arkvory-20261205T010000000Z-99.a.17.partial', { name: 'arkvory-20261205T010000000Z-99', host: 'a', pid: 17 }],
    ['arkvory-20261205T010000000Z.17.partial', { host: undefined, pid: 17 }],
  ])('%s', (entry, expected) => {
    expect(parsePartialName(entry)).toMatchObject({ name: 'arkvory-20261205T010000000Z', ...expected });
  });

  it.each(['arkvory-20261205T010000000Z', 'arkvory-20261205T010000000Z.host.partial', 'other.1.partial'])(
    '%s is no partial',
    (entry) => expect(parsePartialName(entry)).toBeUndefined(),
  );

  it('carry a host name reduced to what a file name allows', () => {
    expect(localHostName('db1.example.org')).toBe('db1.example.org');
    expect(localHostName('a/b c')).toBe('a_b_c');
    expect(localHostName('')).toBe('unknown-host');
  });
});

describe('whether a partial is abandoned', () => {
  const alive = new Set([1, 17]);
  const partial = (host: string | undefined, pid: number): ParsedPartial => ({ name: 'arkvory-x', host, pid });
  it.each([
    ['this host, its process gone', partial('this-host', 99), HOUR_MS, true],
    ['this host, its process running', partial('this-host', 17), HOUR_MS, false],
    ['this host, our own pid (a dead run in a container)', partial('this-host', 4242), HOUR_MS, true],
    [
      'this host, process running but idle past the bound (a reused pid)',
      partial('this-host', 17),
      PARTIAL_STALE_MS + 1,
      true,
    ],
    ['another host, a pid dead here', partial('other-host', 99), HOUR_MS, false],
    ['another host, our own pid', partial('other-host', 4242), HOUR_MS, false],
    ['another host, idle just up to the bound', partial('other-host', 99), PARTIAL_STALE_MS, false],
    ['another host, idle past the bound', partial('other-host', 17), PARTIAL_STALE_MS + 1, true],
    ['no host (named before hosts were), pid dead here', partial(undefined, 99), HOUR_MS, false],
    ['no host, idle past the bound', partial(undefined, 17), PARTIAL_STALE_MS + 1, true],
  ])('%s', (_, p, idleMs, expected) => {
    expect(isPartialAbandoned(p, idleMs, self, (pid) => alive.has(pid))).toBe(expected);
  });
});

describe('partials of interrupted backups', () => {
  it("of this host are removed when their process is gone or bears this process's pid; another host's only once idle past the bound", async () => {
    const at = await destination();
    const here = { host: 'this-host', pid: process.pid };
    const nowMs = Date.now();
    const own = `arkvory-20261205T010000000Z.this-host.${process.pid}.partial`;
    const running = 'arkvory-20261205T010000000Z.this-host.1.partial';
    const dead = 'arkvory-20261205T010000000Z.this-host.999999999.partial';
    const otherLive = 'arkvory-20261205T010000000Z.other-host.999999999.partial';
    const otherStale = 'arkvory-20261205T010000000Z.other-host.1.partial';
    for (const name of [own, running, dead, otherLive, otherStale]) await mkdir(path.join(at, name));
    const idle = new Date(nowMs - PARTIAL_STALE_MS - HOUR_MS);
    await utimes(path.join(at, otherStale), idle, idle);
    expect((await removeStalePartials(at, here, nowMs)).sort()).toEqual([dead, otherStale, own].sort());
    expect((await readdir(at)).sort()).toEqual([otherLive, running].sort());
  });
});

describe("a running backup's heartbeat", () => {
  it("moves its partial's mtime every PARTIAL_HEARTBEAT_MS, and no more once stopped", async () => {
    const at = await destination();
    const partial = path.join(at, 'arkvory-20261205T010000000Z.this-host.1.partial');
    await mkdir(partial);
    const longAgo = new Date(Date.now() - 2 * PARTIAL_STALE_MS);
    await utimes(partial, longAgo, longAgo);
    const nowMs = Math.floor(Date.now() / 1000) * 1000;
    const mtimeMs = async () => (await stat(partial)).mtimeMs;
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const stop = startPartialHeartbeat(partial, () => nowMs);
      vi.advanceTimersByTime(PARTIAL_HEARTBEAT_MS - 1);
      await new Promise((r) => setTimeout(r, 50));
      expect(await mtimeMs()).toBe(longAgo.getTime());
      vi.advanceTimersByTime(1);
      for (let i = 0; i < 100 && (await mtimeMs()) !== nowMs; i++) await new Promise((r) => setTimeout(r, 10));
      expect(await mtimeMs()).toBe(nowMs);
      stop();
      await utimes(partial, longAgo, longAgo);
      vi.advanceTimersByTime(2 * PARTIAL_HEARTBEAT_MS);
      await new Promise((r) => setTimeout(r, 50));
      expect(await mtimeMs()).toBe(longAgo.getTime());
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('pruning', () => {
  it('keeps the backup just made even when a clock stepped back names it the oldest', async () => {
    const at = await destination();
    const later = await completeBackup(at, 'arkvory-20261205T020000000Z');
    const made = await completeBackup(at, 'arkvory-20261205T010000000Z');
    expect(await pruneBackups(at, 1, made, self)).toEqual([later]);
    expect(await readdir(at)).toEqual([path.basename(made)]);
  });

  it('keeps `keep` backups: the one made and the newest of the others', async () => {
    const at = await destination();
    const names = ['arkvory-20261205T010000000Z', 'arkvory-20261205T020000000Z', 'arkvory-20261205T030000000Z'];
    const [oldest, middle, newest] = await Promise.all(names.map((n) => completeBackup(at, n)));
    expect(await pruneBackups(at, 2, newest!, self)).toEqual([oldest]);
    expect((await readdir(at)).sort()).toEqual([path.basename(middle!), path.basename(newest!)]);
  });

  it('cut short, leaves no backup that looks complete with files missing, and the next backup removes the rest', async () => {
    const at = await destination();
    const old = await completeBackup(at, 'arkvory-20261205T010000000Z');
    const made = await completeBackup(at, 'arkvory-20261205T020000000Z');
    // Removal stops after one file, as when the process is killed; that run's pid is above Linux's
    // pid_max, so no live process bears it when the next backup looks.
    const killed = { host: 'this-host', pid: 999_999_999 };
    const interrupted = async (dir: string) => {
      await rm(path.join(dir, 'blobs', 'b1'));
      throw new Error('killed');
    };
    await expect(pruneBackups(at, 1, made, killed, interrupted)).rejects.toThrow('killed');
    expect(await completeBackups(at)).toEqual([made]);
    expect(await resolveBackup(at)).toBe(made);
    const [left] = (await readdir(at)).filter((n) => n !== path.basename(made));
    expect(left).toBe(`${path.basename(old)}.this-host.999999999.partial`);
    expect(await removeStalePartials(at, { host: 'this-host', pid: process.pid }, Date.now())).toEqual([left]);
    expect(await readdir(at)).toEqual([path.basename(made)]);
  });
});

describe('two backups finishing at once into one destination, each with --keep 1', () => {
  it('never remove each other’s: the second prune finds its own backup gone and puts back what it renamed', async () => {
    const at = await destination();
    // Both renamed into place before either prunes: each counts the other's among the older ones.
    const first = await completeBackup(at, 'arkvory-20261205T010000000Z');
    const second = await completeBackup(at, 'arkvory-20261205T010000001Z');
    expect(await pruneBackups(at, 1, first, { host: 'this-host', pid: 1001 })).toEqual([second]);
    await expect(pruneBackups(at, 1, second, { host: 'this-host', pid: 1002 })).rejects.toMatchObject({
      code: 'backup_removed',
    });
    expect(await completeBackups(at)).toEqual([first]);
    expect(await readdir(at)).toEqual([path.basename(first)]);
  });

  it('interleaved (one renames the other’s while that one is removing): one complete backup stays', async () => {
    const at = await destination();
    const first = await completeBackup(at, 'arkvory-20261205T010000000Z');
    const second = await completeBackup(at, 'arkvory-20261205T010000001Z');
    let secondPrune: Promise<string[]> | undefined;
    // The first prune has renamed the second backup away and checked its own is there; while it
    // removes, the second backup's prune runs.
    const removing = async (dir: string) => {
      secondPrune = pruneBackups(at, 1, second, { host: 'this-host', pid: 1002 });
      await secondPrune.catch(() => {});
      await rm(dir, { recursive: true, force: true });
    };
    expect(await pruneBackups(at, 1, first, { host: 'this-host', pid: 1001 }, removing)).toEqual([second]);
    await expect(secondPrune).rejects.toMatchObject({ code: 'backup_removed' });
    expect(await completeBackups(at)).toEqual([first]);
  });
});

describe('complete backups', () => {
  it('are those holding a manifest and the database file: one half removed by an older version is not', async () => {
    const at = await destination();
    const whole = await completeBackup(at, 'arkvory-20261205T010000000Z');
    const halfRemoved = await completeBackup(at, 'arkvory-20261205T020000000Z');
    await rm(path.join(halfRemoved, DATABASE_FILE));
    expect(await completeBackups(at)).toEqual([whole]);
    expect(await resolveBackup(at)).toBe(whole);
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

describe('blobDirectories', () => {
  it('names each directory holding a blob or one of those directories once, deepest first', () => {
    const a = `abcd${'0'.repeat(60)}`;
    const b = `abef${'1'.repeat(60)}`;
    const c = `abcd${'2'.repeat(60)}`;
    expect(blobDirectories([a, b, c])).toEqual([
      path.join('blobs', 'sha256', 'ab', 'cd'),
      path.join('blobs', 'sha256', 'ab', 'ef'),
      path.join('blobs', 'sha256', 'ab'),
      path.join('blobs', 'sha256'),
      'blobs',
    ]);
    expect(blobDirectories([])).toEqual([]);
  });
});
