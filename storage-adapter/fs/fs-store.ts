/**
 * The filesystem store: content-addressed immutable blobs under `blobs/sha256/ab/cd/<hex>`,
 * uploads in progress under `tmp/` (same filesystem, so publishing is a rename over the blob name). Opening as writer
 * creates the layout and the storage identity and empties `tmp/`; a reader only verifies. A
 * separate completion worker stages under `tmp/worker/`, which the writer leaves alone: the
 * worker that takes the worker lock empties it (clearStaging), and offline gc removes it. A worker
 * of a gateway instance stages under `tmp/gateway-worker-<index>/` (`ownStaging`), which it empties
 * when it opens: a killed worker's partial uploads go when it is replaced.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readdir, realpath, rename, rm, stat, unlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import type { OpenFileCache } from './open-file-cache.ts';
import { checkedUpload } from '../streaming/checked-upload.ts';
import { StorageError, storageErrorFromErrno } from '../errors.ts';
import { fsyncDirectory, mkdirDurable } from '../../lib/fs-sync.ts';
import { openRegularFile } from '../../lib/regular-file.ts';
import { fsIdentityObject, openingStorageId, type StorageRole } from '../identity.ts';
import { createFsTree } from './fs-tree.ts';
import { createFsPartStore } from './fs-parts.ts';
import { isLargeBody } from '../streaming/large-body.ts';
import { openUploadFile, writeOverlapped } from './overlapped-writer.ts';
import type { OpenedArtifactStore, ArtifactStore, BlobReader } from '../store.ts';
import {
  BLOBS_DIR,
  blobRelativePath,
  isSha256Hex,
  resolveInsideRoot,
  TMP_DIR,
  UPLOADS_DIR,
  WORKER_STAGING_DIR,
} from '../paths.ts';
import { trackedStagedBlob } from '../streaming/staged-blob.ts';

export type { BlobReader, StagedBlob, StageOptions, ArtifactStore, UploadStats } from '../store.ts';
/** The filesystem store is one implementation of `ArtifactStore`; the name stays for its callers. */
export type FsStore = ArtifactStore;

/** The staging directory under tmp/ of the worker of index `index` of a gateway instance (ARKVORY_WORKERS). */
export function instanceWorkerStaging(index: number): string {
  return `gateway-worker-${index}`;
}

/** Maps fs failures on the write path; ENOSPC/EDQUOT become `storage_full`, the rest pass through. */
function mapWriteError(err: unknown): unknown {
  if (err instanceof StorageError) return err;
  const mapped = storageErrorFromErrno(err);
  return mapped && mapped.code === 'storage_full' ? mapped : err;
}

async function isDirectory(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isDirectory();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/**
 * `writer` creates and binds the root and empties tmp/; `reader` only verifies and never writes;
 * `worker` (the multipart completion worker beside a running writer) verifies like a reader but may
 * stage and publish — in tmp/worker/ of its own, since the writer empties tmp/ when it (re)starts.
 */
export async function openFsStore(options: {
  root: string;
  role: StorageRole | 'worker';
  pool: pg.Pool;
  /** Reuse descriptors of hot blobs (content-addressed, so never stale while the process runs). */
  openFiles?: OpenFileCache | undefined;
  /**
   * A restore target (writer only): the storage-id is neither read nor written here; the store
   * reports this id and the restore writes `identity` last (backup/restore.ts).
   */
  restoreAs?: string | undefined;
  /**
   * Writer: leave tmp/ as it is. A worker of a gateway instance started while other workers of it
   * serve: what tmp/ holds are their uploads in progress, not a previous process's leftovers.
   */
  keepTmp?: boolean | undefined;
  /**
   * Writer: the directory under tmp/ this process alone stages in (a worker of a gateway instance:
   * its index's, `instanceWorkerStaging`). It is emptied here even with `keepTmp`: a worker starts
   * with an index only once that index's previous process is dead, so what it holds are the dead
   * one's partial uploads, never another live worker's.
   */
  ownStaging?: string | undefined;
}): Promise<OpenedArtifactStore> {
  const root = path.resolve(options.root);
  const { role } = options;
  if (role === 'writer') await mkdir(root, { recursive: true });
  else if (!(await isDirectory(root)))
    throw new StorageError(
      'storage_mismatch',
      `the storage root ${root} does not exist; a reader never creates it (start the writer first, or mount the shared root)`,
    );

  const storageId = await openingStorageId({
    object: fsIdentityObject(root),
    role,
    pool: options.pool,
    restoreAs: options.restoreAs,
  });
  const blobsDir = resolveInsideRoot(root, BLOBS_DIR);
  const tmpDir = resolveInsideRoot(root, TMP_DIR);
  if (role === 'writer') {
    await mkdirDurable(blobsDir, root);
    await mkdirDurable(tmpDir, root);
    await mkdirDurable(resolveInsideRoot(root, UPLOADS_DIR), root);
    // Whatever is in tmp/ belongs to uploads a previous process never finished; tmp/worker/ may
    // hold the assembly a separate worker is running now. Not a restore target's: a restore empties
    // the root itself once it holds it, and until then tmp/ may be another restore's, still writing.
    if (!options.keepTmp && options.restoreAs === undefined)
      for (const entry of await readdir(tmpDir))
        if (entry !== WORKER_STAGING_DIR) await rm(path.join(tmpDir, entry), { recursive: true, force: true });
    if (options.ownStaging !== undefined) {
      const own = resolveInsideRoot(root, path.join(TMP_DIR, options.ownStaging));
      await rm(own, { recursive: true, force: true });
      await mkdirDurable(own, root);
    }
  } else if (!(await isDirectory(blobsDir))) {
    throw new StorageError('storage_mismatch', `${blobsDir} is missing; the storage root is incomplete`);
  }
  const stagingRel =
    role === 'worker'
      ? path.join(TMP_DIR, WORKER_STAGING_DIR)
      : role === 'writer' && options.ownStaging !== undefined
        ? path.join(TMP_DIR, options.ownStaging)
        : TMP_DIR;
  const stagingDir = resolveInsideRoot(root, stagingRel);
  if (role === 'worker') await mkdirDurable(stagingDir, root);

  const blobPath = (sha256: string) => resolveInsideRoot(root, blobRelativePath(sha256));
  // Where blob files really are, resolved once: a blob opened through a symbolic link put later on
  // one of its directories (a shard directory linked out of the root) has another real path.
  const realBlobsDir = await realpath(blobsDir);
  const realBlobPath = (sha256: string) => path.join(realBlobsDir, path.relative(BLOBS_DIR, blobRelativePath(sha256)));
  const stats = { committed: 0, discarded: 0, failed: 0 };

  return {
    kind: 'fs',
    location: root,
    storageId,
    identity: fsIdentityObject(root),
    writable: role !== 'reader',
    uploadStats: () => ({ ...stats }),
    parts: createFsPartStore(root),
    tree: createFsTree(root),
    close: async () => {},
    // Only the separate worker's directory: the writer's own tmp/ is emptied when the writer starts.
    ...(role === 'worker' && {
      async clearStaging() {
        for (const entry of await readdir(stagingDir))
          await rm(path.join(stagingDir, entry), { recursive: true, force: true });
      },
    }),

    async stage(body, stageOptions) {
      if (role === 'reader') throw new Error('stage() on a read-only store');
      const tempPath = resolveInsideRoot(root, path.join(stagingRel, `${randomUUID()}.upload`));
      const upload = checkedUpload(body, stageOptions);
      let handle: FileHandle | undefined;
      try {
        const file = await openUploadFile(tempPath, isLargeBody(stageOptions.expectedLength));
        handle = file.handle;
        await writeOverlapped(handle, upload.chunks, {
          expectedBytes: stageOptions.expectedLength,
          // checkedUpload never reads a chunk again once it has yielded it; the body's producer says.
          releaseChunks: stageOptions.chunksOwned === true,
          direct: file.direct,
        });
        const { sha256, sizeBytes: received, sliceDigests } = upload.result;
        await handle.close();
        handle = undefined;
        return trackedStagedBlob(
          stats,
          sha256,
          received,
          {
            async commit() {
              const target = blobPath(sha256);
              const dir = path.dirname(target);
              try {
                await mkdirDurable(dir, blobsDir);
                // A shard directory replaced by a symbolic link would take the upload out of the root
                // (and readers refuse it there): refused instead of published. A link swapped in after
                // this check is still refused by every reader.
                const realDir = await realpath(dir);
                if (realDir !== path.dirname(realBlobPath(sha256)))
                  throw new Error(
                    `blob ${sha256}: its directory ${dir} leads out of its place in the store, to ${realDir}`,
                  );
                // The verified bytes take the name even when a file is already there: that file was
                // never checked here (damaged, cut short by a crash, replaced on the host) and would
                // otherwise be served under this sha256. rename() swaps it atomically: a reader sees
                // the old file or the new one, and one holding the old descriptor reads it to the end.
                await rename(tempPath, target);
                await fsyncDirectory(dir);
                options.openFiles?.forget(sha256);
              } catch (err) {
                throw mapWriteError(err);
              }
            },
            discard: () =>
              unlink(tempPath).catch((err: NodeJS.ErrnoException) => {
                if (err.code !== 'ENOENT') throw err;
              }),
          },
          sliceDigests,
        );
      } catch (err) {
        stats.failed++;
        await handle?.close().catch(() => {});
        await unlink(tempPath).catch(() => {});
        throw mapWriteError(err);
      }
    },

    async openBlob(sha256, _ranges) {
      if (!isSha256Hex(sha256)) throw new StorageError('not_found');
      const openFile = async () => {
        const file = blobPath(sha256);
        // Non-blocking: a named pipe planted under the name is refused at once instead of holding a
        // thread of libuv's pool (and the request) until a writer comes. A blob is only ever a file
        // renamed into place, so a symbolic link there (maybe out of the root) is refused too, and
        // so is one on a directory of its path. Checked at open only: a cached descriptor costs nothing.
        const { handle, stats } = await openRegularFile(file, {
          refuse: (reason) => new Error(`blob ${sha256}: ${reason}`),
          followLinks: false,
          realPath: realBlobPath(sha256),
        }).catch((err: unknown) => {
          throw storageErrorFromErrno(err) ?? err;
        });
        const { ino, dev, size } = stats;
        // An upload may put verified bytes in place of this file (see commit): the cache drops it then.
        // So it does when the file's size changed (cut short in place, on a disk or by a hand): a blob
        // never changes, and a HEAD, which reads nothing, would go on promising the old size.
        const isCurrent = async () => {
          try {
            const now = await stat(file);
            return now.ino === ino && now.dev === dev && now.size === size;
          } catch (err) {
            if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
            throw err;
          }
        };
        return { handle, sizeBytes: size, isCurrent };
      };
      // A blob file ends before the size read at open only when it was cut short on disk under a
      // descriptor this process holds (the open-file cache's; nothing says so until a read hits the
      // end): said naming the file, and the descriptor dropped, so the next request opens the file
      // afresh and is refused before its head instead of being cut again after it.
      const reading =
        (handle: FileHandle, sizeBytes: number, forget: () => void): BlobReader['read'] =>
        async (buffer, offset, length, position) => {
          const result = await handle.read(buffer, offset, length, position);
          if (result.bytesRead === 0 && length > 0 && position < sizeBytes) {
            forget();
            throw new Error(
              `blob ${sha256}: ${blobPath(sha256)} ended at byte ${position} of the ${sizeBytes} it had when opened (cut short on disk)`,
            );
          }
          return result;
        };
      if (options.openFiles) {
        const { openFiles } = options;
        const lease = await openFiles.acquire(sha256, openFile);
        const { handle, sizeBytes } = lease.file;
        return {
          sizeBytes,
          read: reading(handle, sizeBytes, () => openFiles.forget(sha256)),
          close: () => lease.release(),
        };
      }
      const { handle, sizeBytes } = await openFile();
      return {
        sizeBytes,
        read: reading(handle, sizeBytes, () => {}),
        close: () => handle.close(),
      };
    },

    async hasBlob(sha256) {
      if (!isSha256Hex(sha256)) return false;
      try {
        return (await stat(blobPath(sha256))).isFile();
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
        throw err;
      }
    },
  };
}
