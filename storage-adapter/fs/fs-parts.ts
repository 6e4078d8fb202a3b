/**
 * Part files of the filesystem store under `uploads/<session>/`: written to a new file, fsynced
 * with their directory (and a new session directory with `uploads/`) before `write` resolves, so a
 * part once acknowledged survives a power cut; a failed write removes the file.
 */
import { createReadStream } from 'node:fs';
import { open, rm, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { storageErrorFromErrno } from '../errors.ts';
import { fsyncDirectory, mkdirDurable } from '../../lib/fs-sync.ts';
import { writeOverlapped } from './overlapped-writer.ts';
import type { PartStore } from '../store.ts';
import { resolveInsideRoot, sessionDir, UPLOADS_DIR } from '../paths.ts';

/** `sync` fsyncs a directory (injectable for tests). */
export function createFsPartStore(root: string, sync: (dir: string) => Promise<void> = fsyncDirectory): PartStore {
  const uploadsDir = resolveInsideRoot(root, UPLOADS_DIR);
  return {
    async write(sessionId, fileName, body) {
      const dir = sessionDir(root, sessionId);
      const file = path.join(dir, fileName);
      let handle: FileHandle | undefined;
      try {
        // Inside: a filesystem out of inodes refuses the session's directory as `storage_full` too.
        await mkdirDurable(dir, uploadsDir, sync);
        handle = await open(file, 'wx', 0o644);
        // Overlapped like a blob's: one awaited write per slice held up the part's next bandwidth
        // take behind the disk, and a loaded machine then left the upload ceiling partly unused.
        await writeOverlapped(handle, body);
        await handle.close();
        handle = undefined;
        await sync(dir);
      } catch (err) {
        await handle?.close().catch(() => {});
        await rm(file, { force: true });
        const mapped = storageErrorFromErrno(err);
        throw mapped?.code === 'storage_full' ? mapped : err;
      }
    },
    async *read(sessionId, fileName, signal) {
      try {
        for await (const chunk of createReadStream(path.join(sessionDir(root, sessionId), fileName), {
          highWaterMark: 1024 * 1024,
          signal,
        }))
          yield chunk as Buffer;
      } catch (err) {
        // A missing part is `not_found`, as on the other stores.
        throw storageErrorFromErrno(err) ?? err;
      }
    },
    async has(sessionId, fileName) {
      try {
        return (await stat(path.join(sessionDir(root, sessionId), fileName))).isFile();
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
        throw err;
      }
    },
    async remove(sessionId, fileName) {
      await rm(path.join(sessionDir(root, sessionId), fileName), { force: true });
    },
    async removeSession(sessionId) {
      await rm(sessionDir(root, sessionId), { recursive: true, force: true });
    },
  };
}
