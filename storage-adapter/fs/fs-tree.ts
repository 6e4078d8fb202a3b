/** `StoreTree` over a directory: every name goes through the containment helper. */
import { createReadStream, type Dirent } from 'node:fs';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { resolveInsideRoot } from '../paths.ts';
import type { StoreTree, TreeEntry } from '../store.ts';

export function createFsTree(root: string): StoreTree {
  const at = (relative: string) => resolveInsideRoot(root, relative);
  return {
    location: root,
    async list(dir) {
      let dirents: Dirent[];
      try {
        dirents = await readdir(at(dir), { withFileTypes: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
        throw err;
      }
      const out: TreeEntry[] = [];
      for (const d of dirents) {
        const sizeBytes = d.isFile() ? (await stat(path.join(at(dir), d.name)).catch(() => ({ size: 0 }))).size : 0;
        out.push({ name: d.name, isDirectory: d.isDirectory(), sizeBytes });
      }
      return out;
    },
    async *read(file) {
      for await (const chunk of createReadStream(at(file), { highWaterMark: 1024 * 1024 })) yield chunk as Buffer;
    },
    async remove(target) {
      await rm(at(target), { recursive: true, force: true });
    },
    async move(from, to) {
      const target = at(to);
      await mkdir(path.dirname(target), { recursive: true });
      await rename(at(from), target);
      await fsyncDirectory(path.dirname(at(from)));
      await fsyncDirectory(path.dirname(target));
    },
  };
}
