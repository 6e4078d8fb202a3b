/**
 * A kept slice is made durable as the directory store's blobs are (lib/fs-sync.ts): its file is
 * fsynced whole before it takes the slice's name, a new shard directory's entry in slices/ before
 * the rename into it, and the shard directory once it holds the name. Observed through the cache's
 * sync seams, each call passed on to the real fsync, on a real directory.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { makeTempDir } from '../../test/harness/index.ts';
import type { SliceDigests } from '../slice-digests.ts';
import type { BlobReader } from '../store.ts';
import { SliceCache } from './slice-cache.ts';

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

type SyncCall =
  | { readonly file: true; readonly bytes: number; readonly named: boolean }
  | { readonly dir: string; readonly entries: readonly string[] };

it('fsyncs a slice file before its rename, then the directories that name it', async () => {
  dir = await makeTempDir('arkvory-slice-durable-');
  const body = Buffer.from('a slice that must survive a power cut');
  const sha256 = createHash('sha256').update(body).digest('hex');
  const digests: SliceDigests = { sizeBytes: body.length, sliceBytes: 65536, digests: Buffer.from(sha256, 'hex') };
  const origin = async (): Promise<BlobReader> => ({
    sizeBytes: body.length,
    async read(buffer, offset, length, position) {
      return { bytesRead: body.copy(buffer, offset, position, position + length) };
    },
    async close() {},
  });
  const shard = path.join(dir, 'slices', sha256.slice(0, 2));
  const name = `${sha256}-65536-0`;
  const calls: SyncCall[] = [];
  const cache = await SliceCache.open({
    dir,
    maxBytes: 2 ** 30,
    maxFiles: 100,
    minFreeBytes: 0,
    log: { info() {}, warn() {} },
    async syncFile(handle: FileHandle) {
      calls.push({ file: true, bytes: (await handle.stat()).size, named: existsSync(path.join(shard, name)) });
      await handle.sync();
    },
    async syncDirectory(synced) {
      calls.push({ dir: path.relative(dir!, synced), entries: readdirSync(synced) });
      await fsyncDirectory(synced);
    },
  });
  try {
    const source = cache.acquire(sha256, digests, 0, origin);
    if (source.kind === 'fill') await source.fill.done;
    cache.release(source);
    for (let i = 0; i < 500 && !cache.holds(sha256, digests, 0); i++) await new Promise((r) => setTimeout(r, 10));
    expect(cache.holds(sha256, digests, 0)).toBe(true);
  } finally {
    cache.close();
  }
  expect(calls).toEqual([
    // Whole, and not yet under the slice's name.
    { file: true, bytes: body.length, named: false },
    // The new shard directory's entry, before anything is renamed into it.
    { dir: 'slices', entries: [sha256.slice(0, 2)] },
    { dir: path.relative(dir, shard), entries: [name] },
  ]);
});
