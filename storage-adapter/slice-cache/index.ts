/** The slice cache: verified slices of remote stores' blobs on local disk (docs/storage-and-content.md, "Cache"). */
export { withSliceCache, type SliceCachedStoreOptions } from './cached-store.ts';
export { DigestDirectory, type DigestValidity } from './digest-directory.ts';
export { SliceCache, type SliceCacheOptions, type SliceCacheStats, type SliceSource } from './slice-cache.ts';
export {
  foreignEntries,
  removeStrayLayout,
  type SliceCacheBounds,
  strayLayoutEntries,
  workerShare,
  workerSliceCache,
} from './worker-layout.ts';
export { PURGE_MARK_FILE, readPurgeMark, writePurgeMark } from './purge-mark.ts';
export {
  type DirectoryLock,
  HOLDER_FILE,
  joinDirectory,
  LOCK_FILE,
  type LockHolder,
  lockDirectory,
  noWorkersLeft,
  WORKERS_LOCK_FILE,
} from './directory-lock.ts';
