import path from 'node:path';
import { BLOBS_DIR, isSha256Hex } from '../paths.ts';
import type { StoreTree } from '../store.ts';

const names = (entries: Array<{ name: string }>) => entries.map((e) => e.name).sort();

/** Every object under `blobs/sha256/ab/cd/` (relative path), with the name it should have (its sha256) if it looks like one. */
export async function* walkBlobs(
  tree: StoreTree,
): AsyncGenerator<{ file: string; name: string; sizeBytes: number; isWellNamed: boolean }> {
  const base = BLOBS_DIR.split(path.sep).join('/');
  for (const a of names((await tree.list(base)).filter((d) => d.isDirectory))) {
    for (const b of names((await tree.list(`${base}/${a}`)).filter((d) => d.isDirectory))) {
      const entries = (await tree.list(`${base}/${a}/${b}`))
        .filter((d) => !d.isDirectory)
        .sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
      for (const entry of entries) {
        yield {
          file: `${base}/${a}/${b}/${entry.name}`,
          name: entry.name,
          sizeBytes: entry.sizeBytes,
          isWellNamed: isSha256Hex(entry.name) && entry.name.startsWith(a + b),
        };
      }
    }
  }
}
