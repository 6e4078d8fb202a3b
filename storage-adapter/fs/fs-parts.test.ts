import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { createFsPartStore } from './fs-parts.ts';

async function* bytes(...chunks: string[]): AsyncGenerator<Buffer> {
  for (const c of chunks) yield Buffer.from(c);
}

const SESSION = '0b6f6f1e-3c1a-4d2e-9f00-5a1b2c3d4e5f';

describe('filesystem part store', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'arkvory-parts-'));
    await mkdir(path.join(root, 'uploads'));
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  it("makes a session's directory durable in uploads/ before a part in it is acknowledged", async () => {
    const synced: string[] = [];
    const parts = createFsPartStore(root, async (dir) => {
      synced.push(path.relative(root, dir));
      await fsyncDirectory(dir);
    });
    await parts.write(SESSION, '00001-a.part', bytes('hello ', 'world'));
    // The part's own entry, and the new session directory's entry in uploads/.
    expect(synced.sort()).toEqual(['uploads', path.join('uploads', SESSION)]);
    expect(await readFile(path.join(root, 'uploads', SESSION, '00001-a.part'), 'utf8')).toBe('hello world');

    // A second part of the same session: its directory is already durable.
    synced.length = 0;
    await parts.write(SESSION, '00002-b.part', bytes('again'));
    expect(synced).toEqual([path.join('uploads', SESSION)]);
  });
});
