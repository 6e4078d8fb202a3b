import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, mkdtemp, open, readdir, readFile, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { createFsPartStore } from './fs-parts.ts';
import { readParts } from '../multipart/assemble.ts';

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

  it('reads a part only from a regular file: a named pipe or a link to /dev/zero in its place fails at once as a changed part', async () => {
    const parts = createFsPartStore(root);
    await parts.write(SESSION, '00001-a.part', bytes('kept'));
    const pipe = path.join(root, 'uploads', SESSION, '00002-b.part');
    await promisify(execFile)('mkfifo', [pipe]);
    // A read the old code left waiting on the pipe is let go (an open for writing ends its wait).
    onTestFinished(async () => {
      const writer = await open(pipe, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined);
      await writer?.close();
    });
    await symlink('/dev/zero', path.join(root, 'uploads', SESSION, '00003-c.part'));
    const firstChunk = async (file: string) => {
      for await (const chunk of parts.read(SESSION, file)) return chunk.length;
      return 0;
    };
    const timedOut = () => new Promise((resolve) => setTimeout(() => resolve('timed out'), 2000).unref());
    for (const file of ['00002-b.part', '00003-c.part']) {
      const outcome = await Promise.race([
        firstChunk(file).then(
          (n) => `read ${n} bytes`,
          (err: unknown) => err,
        ),
        timedOut(),
      ]);
      expect(outcome, file).toMatchObject({
        code: 'part_mismatch',
        message: expect.stringContaining('not a regular file'),
      });
    }
    expect(await firstChunk('00001-a.part')).toBe(4);
  });

  it('refuses a part file name that is not one name in its session directory: nothing outside it is read, written, seen or removed', async () => {
    const parts = createFsPartStore(root);
    await parts.write(SESSION, '00001-a.part', bytes('kept'));
    const victim = path.join(root, 'victim');
    await writeFile(victim, 'not a part');
    const outside = ['../../victim', '../x.part', '..', '.', '', path.join(root, 'victim'), 'a\0b'];
    for (const name of outside) {
      const reading = (async () => {
        for await (const chunk of parts.read(SESSION, name)) return chunk.toString();
        return '';
      })();
      await expect(reading, name).rejects.toMatchObject({ code: 'invalid_request' });
      await expect(parts.has(SESSION, name), name).rejects.toMatchObject({ code: 'invalid_request' });
      await expect(parts.remove(SESSION, name), name).rejects.toMatchObject({ code: 'invalid_request' });
      await expect(parts.write(SESSION, name, bytes('x')), name).rejects.toMatchObject({ code: 'invalid_request' });
    }
    expect(await readFile(victim, 'utf8')).toBe('not a part');
    expect((await readdir(path.join(root, 'uploads'))).sort()).toEqual([SESSION]);
    expect(await readdir(root)).not.toContain('x.part');
    expect(await readFile(path.join(root, 'uploads', SESSION, '00001-a.part'), 'utf8')).toBe('kept');
  });

  /** Reads the parts as an assembly does: the bytes it was given, and how it ended. */
  async function assemble(
    parts: { partNumber: number; sizeBytes: number; sha256: string }[],
    files: Map<number, string>,
  ) {
    let given = 0;
    try {
      for await (const chunk of readParts(createFsPartStore(root), SESSION, parts, files, undefined))
        given += chunk.length;
      return { given, err: undefined };
    } catch (err) {
      return { given, err };
    }
  }
  const sha = (text: string) => createHash('sha256').update(text).digest('hex');

  it('an assembly reads a part no further than its recorded size: one grown into a huge sparse file fails part_mismatch at once', async () => {
    const parts = createFsPartStore(root);
    await parts.write(SESSION, '00001-a.part', bytes('first'));
    await parts.write(SESSION, '00002-b.part', bytes('second'));
    const listed = [
      { partNumber: 1, sizeBytes: 5, sha256: sha('first') },
      { partNumber: 2, sizeBytes: 6, sha256: sha('second') },
    ];
    const files = new Map([
      [1, '00001-a.part'],
      [2, '00002-b.part'],
    ]);
    expect(await assemble(listed, files)).toEqual({ given: 11, err: undefined });
    // 4 GiB of holes: read whole (as before) it took half a minute and handed the assembly 4 GiB.
    await truncate(path.join(root, 'uploads', SESSION, '00002-b.part'), 4 * 1024 ** 3);
    const grown = await assemble(listed, files);
    expect(grown.err).toMatchObject({ code: 'part_mismatch', message: expect.stringContaining('part 2 is larger') });
    // Part 1 only: none of part 2's bytes reach the assembly.
    expect(grown.given).toBe(5);
    // Cut short, it still fails once read.
    await truncate(path.join(root, 'uploads', SESSION, '00002-b.part'), 2);
    expect((await assemble(listed, files)).err).toMatchObject({ code: 'part_mismatch' });
  });

  it('reads at most maxBytes of a part when asked', async () => {
    const parts = createFsPartStore(root);
    await parts.write(SESSION, '00001-a.part', bytes('0123456789'));
    const read = async (maxBytes?: number) => {
      const chunks: Buffer[] = [];
      for await (const chunk of parts.read(SESSION, '00001-a.part', undefined, maxBytes)) chunks.push(chunk);
      return Buffer.concat(chunks).toString();
    };
    expect(await read()).toBe('0123456789');
    expect(await read(4)).toBe('0123');
    expect(await read(0)).toBe('');
  });
});
