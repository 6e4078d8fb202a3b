/**
 * Picks the store from the configuration: `ARKVORY_STORAGE_URL` set → the static-HTTP store (http:,
 * https:) or the S3 store (s3:), else the filesystem store under `ARKVORY_DATA_DIR`. All satisfy the
 * same `ArtifactStore` interface.
 */
import type pg from 'pg';
import { openFsStore, type OpenFileCache } from '../../storage-adapter/fs/index.ts';
import { openHttpStore } from '../../storage-adapter/http/index.ts';
import { openS3Store } from '../../storage-adapter/s3/index.ts';
import type { StorageRole } from '../../storage-adapter/identity.ts';
import type { OpenedArtifactStore } from '../../storage-adapter/store.ts';
import type { Config } from '../config/config.ts';

/**
 * `openFiles` applies to the directory store only (the HTTP and S3 stores have no descriptors to keep).
 * `restoreAs`: open a restore target, binding nothing (see `OpenedArtifactStore`); the writer role only.
 */
export function openStore(
  config: Config,
  role: StorageRole | 'worker',
  pool: pg.Pool,
  options: { openFiles?: OpenFileCache | undefined; restoreAs?: string | undefined } = {},
): Promise<OpenedArtifactStore> {
  const { url, connectTimeoutMs, timeoutMs, s3 } = config.storage;
  const { openFiles, restoreAs } = options;
  if (s3 !== undefined) return openS3Store({ ...s3, role, pool, connectTimeoutMs, timeoutMs, restoreAs });
  if (url !== undefined) return openHttpStore({ url, role, pool, connectTimeoutMs, timeoutMs, restoreAs });
  return openFsStore({ root: config.dataDir, role, pool, openFiles, restoreAs });
}
