import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdtemp, open, readdir, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isLargeBody, LARGE_BODY_BYTES } from '../streaming/large-body.ts';
import { openUploadFile, paddedLength, writeOverlapped } from './overlapped-writer.ts';

const MiB = 1024 * 1024;
const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function tempFile(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-writer-'));
  dirs.push(dir);
  return path.join(dir, 'file');
}

/** Copies of `bytes` in chunks of the given sizes, cycling (the last one cut to fit); each its own ArrayBuffer. */
function chunksOf(bytes: Buffer, sizes: number[]): Buffer[] {
  const chunks: Buffer[] = [];
  for (let at = 0, i = 0; at < bytes.length; i++) {
    const size = sizes[i % sizes.length]!;
    chunks.push(Buffer.from(bytes.subarray(at, at + size)));
    at += size;
  }
  return chunks;
}

async function* yielding(chunks: Buffer[]): AsyncGenerator<Buffer> {
  yield* chunks;
}

async function written(bytes: Buffer, sizes: number[], options: Parameters<typeof writeOverlapped>[2]) {
  const file = await tempFile();
  const handle = await open(file, 'wx');
  try {
    await writeOverlapped(handle, yielding(chunksOf(bytes, sizes)), options);
    return await readFile(file);
  } finally {
    await handle.close();
  }
}

describe('writeOverlapped', () => {
  // Sizes around the ring's 1 MiB slots and its 4 slots.
  it.each([
    ['empty', 0],
    ['one byte', 1],
    ['a slot less one', MiB - 1],
    ['a slot', MiB],
    ['a slot and one', MiB + 1],
    ['several times round the ring', 9 * MiB + 12_345],
  ])('%s: the file holds exactly the body, its length declared or not', async (_name, size) => {
    const bytes = randomBytes(size);
    for (const expectedBytes of [size, undefined]) {
      for (const sizes of [[65_536], [1, 100_000, 3 * MiB, 7]]) {
        for (const releaseChunks of [false, true]) {
          expect((await written(bytes, sizes, { expectedBytes, releaseChunks })).equals(bytes)).toBe(true);
        }
      }
    }
  });

  it('with releaseChunks, a chunk that is its whole ArrayBuffer is freed once copied; views of shared memory are not', async () => {
    const file = await tempFile();
    const handle = await open(file, 'wx');
    const own = Buffer.from(randomBytes(70_000));
    const pool = Buffer.alloc(8192, 7);
    const slice = pool.subarray(100, 200);
    try {
      await writeOverlapped(handle, yielding([own, slice]), { releaseChunks: true });
      expect(own.buffer.detached).toBe(true);
      expect(own.length).toBe(0);
      expect(slice.length).toBe(100);
      expect(pool.buffer.detached).toBe(false);
      expect((await readFile(file)).length).toBe(70_100);
    } finally {
      await handle.close();
    }
    // Without the option, nothing is touched.
    const kept = Buffer.from(randomBytes(10));
    const other = await tempFile();
    const h2 = await open(other, 'wx');
    await writeOverlapped(h2, yielding([kept]));
    await h2.close();
    expect(kept.length).toBe(10);
  });

  it('a body that fails midway fails the write after every write in flight settled', async () => {
    const file = await tempFile();
    const handle = await open(file, 'wx');
    async function* broken(): AsyncGenerator<Buffer> {
      yield* chunksOf(randomBytes(5 * MiB), [65_536]);
      throw new Error('client went away');
    }
    await expect(writeOverlapped(handle, broken())).rejects.toThrow('client went away');
    await handle.close();
  });

  it('a failing disk write fails the body', async () => {
    const file = await tempFile();
    await (await open(file, 'w')).close();
    const handle = await open(file, 'r');
    try {
      await expect(writeOverlapped(handle, yielding(chunksOf(randomBytes(3 * MiB), [65_536])))).rejects.toMatchObject({
        code: 'EBADF',
      });
    } finally {
      await handle.close();
    }
  });
});

describe('direct I/O', () => {
  it('pads to the block and chooses it for large or undeclared bodies only', () => {
    expect([0, 1, 4095, 4096, 4097, 1_048_577].map((n) => paddedLength(n))).toEqual([
      0, 4096, 4096, 4096, 8192, 1_052_672,
    ]);
    expect(paddedLength(10, 512)).toBe(512);
    expect(isLargeBody(undefined)).toBe(true);
    expect(isLargeBody(LARGE_BODY_BYTES)).toBe(true);
    expect(isLargeBody(LARGE_BODY_BYTES - 1)).toBe(false);
    expect(isLargeBody(0)).toBe(false);
  });

  // This machine's temporary directory takes O_DIRECT (ext4, and tmpfs since Linux 6.6); if it
  // stopped doing so these tests would fail rather than quietly test buffered writes.
  async function directFile(): Promise<{ file: string; handle: Awaited<ReturnType<typeof open>> }> {
    const file = await tempFile();
    const { handle, direct } = await openUploadFile(file, true);
    expect(direct).toBe(true);
    return { file, handle };
  }

  it.each([
    ['empty', 0],
    ['one byte', 1],
    ['a block', 4096],
    ['a block and one', 4097],
    ['a slot', MiB],
    ['a slot and a bit', MiB + 4095],
    ['several times round the ring, ending mid-block', 9 * MiB + 12_345],
  ])('%s: the file holds exactly the body, cut back from the padded last block', async (_name, size) => {
    const bytes = randomBytes(size);
    for (const expectedBytes of [size, undefined]) {
      for (const sizes of [[65_536], [1, 100_000, 3 * MiB, 7]]) {
        const { file, handle } = await directFile();
        try {
          await writeOverlapped(handle, yielding(chunksOf(bytes, sizes)), {
            expectedBytes,
            direct: true,
            releaseChunks: true,
          });
        } finally {
          await handle.close();
        }
        expect((await stat(file)).size).toBe(size);
        expect((await readFile(file)).equals(bytes)).toBe(true);
      }
    }
  });

  it('a body that fails midway fails the write after every direct write in flight settled', async () => {
    const { file, handle } = await directFile();
    async function* broken(): AsyncGenerator<Buffer> {
      yield* chunksOf(randomBytes(5 * MiB + 10), [65_536]);
      throw new Error('client went away');
    }
    await expect(writeOverlapped(handle, broken(), { direct: true })).rejects.toThrow('client went away');
    await handle.close();
    // The caller removes the file; nothing is still writing to it.
    await rm(file);
    expect(await readdir(path.dirname(file))).toEqual([]);
  });

  it('falls back to buffered writes where the filesystem refuses O_DIRECT, and passes other failures on', async () => {
    const refusing = (code: string) => async (file: string, flags: number, mode: number) => {
      if (flags & constants.O_DIRECT) throw Object.assign(new Error(code), { code });
      return open(file, flags, mode);
    };
    const file = await tempFile();
    const fallback = await openUploadFile(file, true, refusing('EINVAL'));
    try {
      expect(fallback.direct).toBe(false);
      const bytes = randomBytes(MiB + 7);
      await writeOverlapped(fallback.handle, yielding(chunksOf(bytes, [65_536])), { direct: fallback.direct });
      expect((await readFile(file)).equals(bytes)).toBe(true);
    } finally {
      await fallback.handle.close();
    }
    await expect(openUploadFile(`${file}.2`, true, refusing('EACCES'))).rejects.toMatchObject({ code: 'EACCES' });
    // Not asked for: never tried.
    const plain = await openUploadFile(`${file}.3`, false, refusing('EINVAL'));
    expect(plain.direct).toBe(false);
    await plain.handle.close();
    // Created exclusively, as before.
    await expect(openUploadFile(file, true)).rejects.toMatchObject({ code: 'EEXIST' });
  });
});
