import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CacheDirClaim } from './cache-dir-claim.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-cache-claim-'));
  dirs.push(dir);
  return dir;
}

const remote = (dir: string) => ({
  sliceCache: { dir } as never,
  storage: { url: 'http://127.0.0.1:1/store' } as never,
});

describe('claiming the slice cache directory', () => {
  it('refuses a directory that holds something other than a slice cache, touching nothing there', async () => {
    // A mistaken ARKVORY_CACHE_DIR (a home, /, another gateway's data directory): the cache would
    // empty its tmp/ at start, and with workers remove its slices/ and tmp/.
    const dir = await tempDir();
    await mkdir(path.join(dir, 'tmp'));
    await writeFile(path.join(dir, 'tmp', 'work-in-progress'), 'x');
    await writeFile(path.join(dir, 'notes.txt'), 'y');
    const claim = new CacheDirClaim();
    const taking = claim.take(remote(dir));
    await expect(taking).rejects.toMatchObject({ code: 'cache_dir_not_a_cache' });
    await claim.release();
    expect((await readdir(dir)).sort()).toEqual(['notes.txt', 'tmp']);
    expect(await readdir(path.join(dir, 'tmp'))).toEqual(['work-in-progress']);
  });

  it('takes a missing or empty directory (a fresh filesystem’s lost+found aside), and its own again', async () => {
    const parent = await tempDir();
    const missing = path.join(parent, 'cache');
    const fresh = path.join(parent, 'mount');
    await mkdir(path.join(fresh, 'lost+found'), { recursive: true });
    for (const dir of [missing, fresh, missing]) {
      const claim = new CacheDirClaim();
      await claim.take(remote(dir));
      await claim.release();
    }
    // A cache made before the lock existed: its slices/ (one process) or w<index>/ (workers).
    for (const own of ['slices', 'w0']) {
      const dir = path.join(parent, `old-${own}`);
      await mkdir(path.join(dir, own), { recursive: true });
      const claim = new CacheDirClaim();
      await claim.take(remote(dir));
      await claim.release();
    }
  });
});
