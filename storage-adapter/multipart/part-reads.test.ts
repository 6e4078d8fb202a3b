import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm, truncate } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createFsPartStore } from '../fs/fs-parts.ts';
import { readParts } from './assemble.ts';

const SESSION = '0b6f6f1e-3c1a-4d2e-9f00-5a1b2c3d4e5f';
const GiB = 1024 ** 3;

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'arkvory-part-reads-'));
  await mkdir(path.join(root, 'uploads'));
});
afterEach(() => rm(root, { recursive: true, force: true }));

async function* bytes(text: string): AsyncGenerator<Buffer> {
  yield Buffer.from(text);
}

/** Reads the parts as an assembly does: the bytes it was given, and how it ended. */
async function assemble(
  parts: { partNumber: number; sizeBytes: number; sha256: string }[],
  files: Map<number, string>,
) {
  const store = createFsPartStore(root);
  let given = 0;
  try {
    for await (const chunk of readParts(store, SESSION, parts, files, undefined)) given += chunk.length;
    return { given, err: undefined };
  } catch (err) {
    return { given, err };
  }
}

it('a part file grown on the store (a huge sparse file in its place) fails part_mismatch past its recorded size, not after reading it whole', async () => {
  const store = createFsPartStore(root);
  await store.write(SESSION, '00001-a.part', bytes('first'));
  await store.write(SESSION, '00002-b.part', bytes('second'));
  const sha = (text: string) => createHash('sha256').update(text).digest('hex');
  const parts = [
    { partNumber: 1, sizeBytes: 5, sha256: sha('first') },
    { partNumber: 2, sizeBytes: 6, sha256: sha('second') },
  ];
  const files = new Map([
    [1, '00001-a.part'],
    [2, '00002-b.part'],
  ]);
  expect(await assemble(parts, files)).toEqual({ given: 11, err: undefined });
  // 4 GiB of holes: read whole (as before) it takes seconds and hands the assembly 4 GiB.
  await truncate(path.join(root, 'uploads', SESSION, '00002-b.part'), 4 * GiB);
  const grown = await assemble(parts, files);
  expect(grown.err).toMatchObject({ code: 'part_mismatch', message: expect.stringContaining('part 2 is larger') });
  // Part 1 only: none of part 2's bytes reach the assembly.
  expect(grown.given).toBe(5);
});

it('a part file cut short on the store still fails part_mismatch once read', async () => {
  const store = createFsPartStore(root);
  await store.write(SESSION, '00001-a.part', bytes('first'));
  await truncate(path.join(root, 'uploads', SESSION, '00001-a.part'), 2);
  const sha256 = createHash('sha256').update('first').digest('hex');
  const cut = await assemble([{ partNumber: 1, sizeBytes: 5, sha256 }], new Map([[1, '00001-a.part']]));
  expect(cut.err).toMatchObject({ code: 'part_mismatch' });
});
