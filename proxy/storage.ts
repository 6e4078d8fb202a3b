/**
 * Picks the store from the configuration: `ARKVORY_STORAGE_URL` set → the static-HTTP store, else the
 * filesystem store under `ARKVORY_DATA_DIR`. Both satisfy the same `Store` interface.
 */
import type pg from 'pg';
import { openFsStore } from '../storage-adapter/fs-store.ts';
import { openHttpStore } from '../storage-adapter/http-store.ts';
import type { StorageRole } from '../storage-adapter/identity.ts';
import type { Store } from '../storage-adapter/store.ts';
import type { Config } from './config.ts';

/** `newStorageId`: the id a fresh root gets (restore recreates the backed-up identity). */
export function openStore(config: Config, role: StorageRole | 'worker', pool: pg.Pool, newStorageId?: string): Promise<Store> {
  const { url, connectTimeoutMs, timeoutMs } = config.storage;
  if (url !== undefined) return openHttpStore({ url, role, pool, connectTimeoutMs, timeoutMs, newStorageId });
  return openFsStore({ root: config.dataDir, role, pool, newStorageId });
}
