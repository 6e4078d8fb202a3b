/**
 * Picks the store from the configuration: `ARKVORY_STORAGE_URL` set → the static-HTTP store (http:,
 * https:) or the S3 store (s3:), else the filesystem store under `ARKVORY_DATA_DIR`. All satisfy the
 * same `ArtifactStore` interface.
 */
import type pg from 'pg';
import { instanceWorkerStaging, openFsStore, type OpenFileCache } from '../../storage-adapter/fs/index.ts';
import type { StorageRole } from '../../storage-adapter/identity.ts';
import { TMP_DIR } from '../../storage-adapter/paths.ts';
import type { OpenedArtifactStore, StoreTree } from '../../storage-adapter/store.ts';
import type { Config } from '../config/config.ts';
import type { SecretVerifier } from '../config/secret-rotation.ts';

/**
 * The HTTP and S3 stores (and undici, the S3 signer, the XML parser under them) are loaded only by a
 * process whose store is one of them: a directory store's start never pays for them.
 * `openFiles` applies to the directory store only (the HTTP and S3 stores have no descriptors to keep).
 * `restoreAs`: open a restore target, binding nothing (see `OpenedArtifactStore`); the writer role only.
 * `current`: the configuration with the secrets in use now; the S3 store signs each request with its key.
 */
export async function openStore(
  config: Config,
  role: StorageRole | 'worker',
  pool: pg.Pool,
  options: {
    openFiles?: OpenFileCache | undefined;
    restoreAs?: string | undefined;
    current?: (() => Config) | undefined;
    /** A directory store's writer leaves tmp/ alone (a worker joining a serving instance). */
    keepTmp?: boolean | undefined;
    /** A writer's own staging directory under tmp/, emptied at open (`gatewayStaging`). */
    ownStaging?: string | undefined;
  } = {},
): Promise<OpenedArtifactStore> {
  const { url, connectTimeoutMs, timeoutMs, s3 } = config.storage;
  const { openFiles, restoreAs, current, keepTmp, ownStaging } = options;
  if (s3 !== undefined) {
    const credentials = current ? () => current().storage.s3?.credentials ?? s3.credentials : s3.credentials;
    const { openS3Store } = await import('../../storage-adapter/s3/index.ts');
    return openS3Store({ ...s3, credentials, role, pool, connectTimeoutMs, timeoutMs, restoreAs, ownStaging });
  }
  if (url !== undefined) {
    const { openHttpStore } = await import('../../storage-adapter/http/index.ts');
    return openHttpStore({ url, role, pool, connectTimeoutMs, timeoutMs, restoreAs, ownStaging });
  }
  return openFsStore({ root: config.dataDir, role, pool, openFiles, restoreAs, keepTmp, ownStaging });
}

/**
 * The directory under tmp/ a gateway process stages its uploads in, emptied by the process that
 * replaces it when that opens the store, before it serves, so an upload a killed process (SIGKILL,
 * the OOM killer) had staged goes then, not at an offline gc. Only the writer stages, and a writer
 * opens its store only once it holds the writer barrier: a writer that was draining (restart) still
 * holds it and this start is refused until it exited. A worker of an instance (ARKVORY_WORKERS):
 * its index's, given to a new process only once that index's previous one exited, so no other live
 * worker's is touched. A single process on the static-HTTP or S3 store: worker 0's (one process is
 * an instance of one worker, whichever the next writer is). Not tmp/ as a whole there: a separate
 * completion worker (ARKVORY_ROLE=worker) may be staging an assembly in tmp/worker/ meanwhile (its
 * own, emptied by the worker that takes the worker lock); the other indexes' directories are the
 * first process's of a start to remove (`removeRetiredStaging`).
 * A single process on the directory store stages in tmp/ itself and empties it whole at open, its
 * completion worker staging apart in tmp/worker/ (fs-store.ts): undefined. A writer whose database
 * session ended while it still runs (fenced) lost the barrier too: an upload it had staged and not
 * yet moved may be removed by the next writer, and then fails (its move finds nothing), nothing
 * published, as on the directory store.
 */
export function gatewayStaging(config: Config, instanceIndex: number | undefined): string | undefined {
  if (instanceIndex !== undefined) return instanceWorkerStaging(instanceIndex);
  const { url, s3 } = config.storage;
  return url !== undefined || s3 !== undefined ? instanceWorkerStaging(0) : undefined;
}

/** A gateway worker's staging directory under tmp/ (`instanceWorkerStaging`), by its name. */
const WORKER_STAGING = /^gateway-worker-\d+$/;

/**
 * Removes the staging directories of a remote store (static-HTTP, S3) that no process of this start
 * will stage in, and on S3 aborts the multipart uploads begun under them: `own`'s is emptied by the
 * store's open, and each other worker of the start empties its own, but an earlier start with more
 * workers (four, now one or two) left indexes nobody empties, whose uploads killed mid-way would
 * stay (and, begun on S3, be billed) until an offline gc. Called by the first process of a start
 * only (a single process, or an instance's worker 0, before the others fork): the writer barrier
 * and the writer workers' barrier it holds mean no other gateway process stages on the store now,
 * and the separate completion worker's tmp/worker/ is not such a name. The directory store needs
 * none of this: its first process empties tmp/ whole (fs-store.ts).
 */
export async function removeRetiredStaging(tree: StoreTree, own: string): Promise<string[]> {
  const retired = (await tree.list(TMP_DIR))
    .filter((entry) => entry.isDirectory && WORKER_STAGING.test(entry.name) && entry.name !== own)
    .map((entry) => `${TMP_DIR}/${entry.name}`);
  // An upload begun and never completed is no listed object: looked for under any such name.
  for (const upload of (await tree.incompleteUploads?.()) ?? []) {
    const [tmp, dir] = upload.name.split('/');
    if (tmp === TMP_DIR && dir !== undefined && WORKER_STAGING.test(dir) && dir !== own) await upload.abort();
  }
  for (const dir of retired) await tree.remove(dir);
  return retired;
}

/**
 * Checks a rotated S3 key before the store signs with it: the storage identity object is read with
 * it (what the store's health probe reads), so a key the server refuses, or one without read access
 * to the store, is refused and the old key kept.
 */
export function s3KeyVerifier(): SecretVerifier {
  return {
    what: 'the S3 server',
    variables: ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN'],
    changed(current, next) {
      const a = current.storage.s3?.credentials;
      const b = next.storage.s3?.credentials;
      return (
        a?.accessKeyId !== b?.accessKeyId ||
        a?.secretAccessKey !== b?.secretAccessKey ||
        a?.sessionToken !== b?.sessionToken
      );
    },
    async verify(next) {
      const { s3, connectTimeoutMs, timeoutMs } = next.storage;
      if (s3 === undefined) return;
      const { readS3StorageIdObject } = await import('../../storage-adapter/s3/index.ts');
      const id = await readS3StorageIdObject({ ...s3, connectTimeoutMs, timeoutMs });
      if (id === undefined) throw new Error('the storage identity object is not there for this key');
    },
  };
}

/** The configuration with the secrets in use now, where the process rotates them. */
export function rotatedConfig(services: { readonly secrets?: { readonly config: Config } | undefined }) {
  const { secrets } = services;
  return secrets ? () => secrets.config : undefined;
}
