/** The directory store: blobs, parts and the storage identity as files under one root. */
export { instanceWorkerStaging, openFsStore } from './fs-store.ts';
export { createFsTree } from './fs-tree.ts';
export { OpenFileCache, type OpenFileCacheOptions } from './open-file-cache.ts';
