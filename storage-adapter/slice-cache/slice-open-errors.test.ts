import { createHash, randomBytes } from 'node:crypto';
import * as fsPromises from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it, vi } from 'vitest';
import type { SliceDigests } from '../slice-digests.ts';
import type { BlobReader } from '../store.ts';
import { SliceCache } from './slice-cache.ts';

/** When set, opening a slice file for reading fails with this errno code (as out of descriptors would). */
const failing: { code: string | undefined } = { code: undefined };

vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...actual,
    open: (file: string, flags: string, ...rest: unknown[]) => {
      if (failing.code && flags === 'r' && String(file).includes(`${path.sep}slices${path.sep}`))
        return Promise.reject(Object.assign(new Error(`${failing.code}: open '${file}'`), { code: failing.code }));
      return (actual.open as (...args: unknown[]) => Promise<fsPromises.FileHandle>)(file, flags, ...rest);
    },
  };
});

const SLICE = 64 * 1024;
let dir: string | undefined;
afterEach(async () => {
  failing.code = undefined;
  if (dir) await fsPromises.rm(dir, { recursive: true, force: true });
});

it('a slice file that cannot be opened for want of descriptors stays indexed and counted; the read fails', async () => {
  dir = await fsPromises.mkdtemp(path.join(os.tmpdir(), 'arkvory-slice-open-'));
  const cache = await SliceCache.open({ dir, maxBytes: 16 * SLICE, minFreeBytes: 0, log: { info() {}, warn() {} } });
  const blob = randomBytes(SLICE);
  const d: SliceDigests = { sizeBytes: SLICE, sliceBytes: SLICE, digests: createHash('sha256').update(blob).digest() };
  const origin = async (): Promise<BlobReader> => ({
    sizeBytes: SLICE,
    async read(buffer, offset, length, position) {
      const n = Math.min(length, SLICE - position);
      blob.copy(buffer, offset, position, position + n);
      return { bytesRead: n };
    },
    async close() {},
  });
  const sha = 'a'.repeat(64);
  const filled = cache.acquire(sha, d, 0, origin);
  if (filled.kind !== 'fill') throw new Error('expected a fill');
  await filled.fill.done;
  cache.release(filled);
  await vi.waitFor(() => expect(cache.holds(sha, d, 0) && cache.stats.fillsInFlight === 0).toBe(true));

  failing.code = 'EMFILE';
  const source = cache.acquire(sha, d, 0, origin);
  if (source.kind !== 'disk') throw new Error('expected a disk slice');
  await expect(cache.openDisk(source, undefined)).rejects.toThrow('EMFILE');
  cache.release(source);
  expect(cache.holds(sha, d, 0)).toBe(true);
  expect(cache.stats.heldBytes).toBe(SLICE);

  failing.code = undefined;
  const again = cache.acquire(sha, d, 0, origin);
  if (again.kind !== 'disk') throw new Error('expected a disk slice');
  const opened = await cache.openDisk(again, undefined);
  if (!opened) throw new Error('expected the slice');
  const { buffer: bytes } = await opened.read(Buffer.alloc(SLICE), 0, SLICE, 0);
  expect(bytes.equals(blob)).toBe(true);
  cache.release(again);
  cache.close();
});
