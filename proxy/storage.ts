/**
 * Picks the store from the configuration: `ARKVORY_STORAGE_URL` set → the static-HTTP store, else the
 * filesystem store under `ARKVORY_DATA_DIR`. Both satisfy the same `Store` interface.
 */
import type pg from 'pg';
import { openFsStore } from '../storage-adapter/fs-store.ts';
import { openHttpStore } from '../storage-adapter/http-store.ts';
import type { OpenFileCache } from '../storage-adapter/cache/open-file-cache.ts';
import type { StorageRole } from '../storage-adapter/identity.ts';
import type { Store } from '../storage-adapter/store.ts';
import type { Config } from './config.ts';

/**
 * `openFiles` applies to the directory store only (the HTTP store has no descriptors to keep).
 * `newStorageId`: the id a fresh root gets (restore recreates the backed-up identity).
 */
export function openStore(
  config: Config,
  role: StorageRole | 'worker',
  pool: pg.Pool,
  options: { openFiles?: OpenFileCache | undefined; newStorageId?: string | undefined } = {},
): Promise<Store> {
  const { url, connectTimeoutMs, timeoutMs } = config.storage;
  const { openFiles, newStorageId } = options;
  if (url !== undefined) return openHttpStore({ url, role, pool, connectTimeoutMs, timeoutMs, newStorageId });
  return openFsStore({ root: config.dataDir, role, pool, openFiles, newStorageId });
}
