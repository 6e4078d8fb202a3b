/** `StoreTree` over a directory: every name goes through the containment helper. */
import type { Dirent } from 'node:fs';
import { type FileHandle, mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { openRegularFile } from '../../lib/regular-file.ts';
import { resolveInsideRoot } from '../paths.ts';
import type { StoreTree, TreeEntry } from '../store.ts';

const READ_CHUNK = 1024 * 1024;

/** What `openRegularFile` refuses here: the name holds no regular file. */
class NotRegularFile extends Error {}

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
    // Only a regular file, opened without blocking and never through a symbolic link: a named pipe
    // under a blob's name would hold scrub (and the maintenance barrier) until a writer came, and a
    // link to /dev/zero would be read without end. Anything else reads as no bytes, so scrub finds
    // it does not hash to its name and quarantines it (the name is moved, not what it leads to).
    async *read(file) {
      let handle: FileHandle;
      try {
        ({ handle } = await openRegularFile(at(file), {
          refuse: (reason) => new NotRegularFile(reason),
          followLinks: false,
        }));
      } catch (err) {
        if (err instanceof NotRegularFile) return;
        throw err;
      }
      try {
        for (let position = 0; ; ) {
          const chunk = Buffer.allocUnsafe(READ_CHUNK);
          const { bytesRead } = await handle.read(chunk, 0, READ_CHUNK, position);
          if (bytesRead === 0) return;
          position += bytesRead;
          yield chunk.subarray(0, bytesRead);
        }
      } finally {
        await handle.close();
      }
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
