/**
 * Part files of the filesystem store under `uploads/<session>/`: written to a new file, fsynced
 * with their directory (and a new session directory with `uploads/`) before `write` resolves, so a
 * part once acknowledged survives a power cut; a failed write removes the file.
 */
import { open, rm, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { StorageError, storageErrorFromErrno } from '../errors.ts';
import { fsyncDirectory, mkdirDurable } from '../../lib/fs-sync.ts';
import { openRegularFile } from '../../lib/regular-file.ts';
import { writeOverlapped } from './overlapped-writer.ts';
import type { PartStore } from '../store.ts';
import { resolveInsideRoot, sessionDir, UPLOADS_DIR } from '../paths.ts';

/**
 * The file of part `fileName` in its session's directory. The name is one component, refused
 * otherwise (`invalid_request`): it comes from a catalog row (the gateway makes it, but a restored
 * or edited database could hold `../../blobs/...` or an absolute path), and joined as it stood, reading
 * or removing such a part reached files outside the session, a blob's included.
 */
export function partFile(root: string, sessionId: string, fileName: string): string {
  const dir = sessionDir(root, sessionId);
  const file = path.join(dir, fileName);
  if (
    fileName === '' ||
    fileName === '.' ||
    fileName === '..' ||
    /[/\\\0]/.test(fileName) ||
    path.dirname(file) !== dir
  )
    throw new StorageError(
      'invalid_request',
      `part file name ${JSON.stringify(fileName.slice(0, 80))} is not a file name in its session's directory`,
    );
  return file;
}

/** `sync` fsyncs a directory (injectable for tests). */
export function createFsPartStore(root: string, sync: (dir: string) => Promise<void> = fsyncDirectory): PartStore {
  const uploadsDir = resolveInsideRoot(root, UPLOADS_DIR);
  return {
    async write(sessionId, fileName, body) {
      const dir = sessionDir(root, sessionId);
      const file = partFile(root, sessionId, fileName);
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
    async *read(sessionId, fileName, signal, maxBytes) {
      let handle: FileHandle;
      try {
        const file = partFile(root, sessionId, fileName);
        // Only a regular file, opened without blocking and not through a symbolic link: a named pipe
        // in a part's place held a thread of libuv's pool (and the completion job) until a writer
        // came, and a link to /dev/zero was read without end. Either is a part changed on the store.
        ({ handle } = await openRegularFile(file, {
          // The session's error carries this message: the part's name, never a path of the host.
          refuse: () =>
            new StorageError(
              'part_mismatch',
              `part file ${fileName} is not a regular file: the part changed on the store after it was received`,
            ),
          followLinks: false,
        }));
      } catch (err) {
        // A missing part is `not_found`, as on the other stores.
        throw storageErrorFromErrno(err) ?? err;
      }
      try {
        if (maxBytes !== undefined && maxBytes <= 0) return;
        // Bounded: a part file replaced by a huge (even sparse) one is not read on to its end.
        const end = maxBytes === undefined ? undefined : maxBytes - 1;
        const stream = handle.createReadStream({
          highWaterMark: 1024 * 1024,
          signal,
          autoClose: false,
          ...(end === undefined ? {} : { end }),
        });
        for await (const chunk of stream) yield chunk as Buffer;
      } catch (err) {
        throw storageErrorFromErrno(err) ?? err;
      } finally {
        await handle.close();
      }
    },
    async has(sessionId, fileName) {
      try {
        return (await stat(partFile(root, sessionId, fileName))).isFile();
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
        throw err;
      }
    },
    async remove(sessionId, fileName) {
      await rm(partFile(root, sessionId, fileName), { force: true });
    },
    async removeSession(sessionId) {
      await rm(sessionDir(root, sessionId), { recursive: true, force: true });
    },
  };
}
