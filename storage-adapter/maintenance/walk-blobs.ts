import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { isSha256Hex } from '../paths.ts';

/** Every file under `blobs/sha256/ab/cd/`, with the name it should have (its sha256) if it looks like one. */
export async function* walkBlobs(blobsDir: string): AsyncGenerator<{ file: string; name: string; isWellNamed: boolean }> {
  for (const a of (await readdir(blobsDir, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name).sort()) {
    const dirA = path.join(blobsDir, a);
    for (const b of (await readdir(dirA, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name).sort()) {
      const dirB = path.join(dirA, b);
      for (const entry of (await readdir(dirB, { withFileTypes: true })).filter((d) => d.isFile()).map((d) => d.name).sort()) {
        yield { file: path.join(dirB, entry), name: entry, isWellNamed: isSha256Hex(entry) && entry.startsWith(a + b) };
      }
    }
  }
}
