/**
 * The S3 store's bucket-level operations: one prefix of one bucket seen as the store's tree (scrub,
 * gc, backup) and its multipart part files. Object stores have no folders: a "directory" is a key
 * prefix, listed with a delimiter and removed object by object.
 */
import { StorageError } from '../errors.ts';
import { sessionRelativeDir } from '../paths.ts';
import { listedName } from '../streaming/listed-names.ts';
import type { S3Client } from './s3-client.ts';
import type { S3Location } from './s3-location.ts';
import { abortMultipart, copyObject, readObject, uploadObject, type S3Limits } from './s3-transfer.ts';
import type { ExpectedObject, PartStore, StoreTree, TreeEntry } from '../store.ts';

/** One prefix of one bucket, and how the store talks to it. */
export interface S3Bucket {
  readonly client: S3Client;
  readonly location: S3Location;
  readonly limits: S3Limits;
  readonly timeoutMs: number;
  /** The object key of a store-relative name. */
  keyOf(relative: string): string;
}

/** Deletes every object under `relative/`. */
export async function removeTree(bucket: S3Bucket, relative: string): Promise<void> {
  const keys: string[] = [];
  for await (const entry of bucket.client.list(bucket.keyOf(`${relative}/`)))
    if (entry.object) keys.push(entry.object.key);
  for (const key of keys) await bucket.client.delete(key);
}

/**
 * A server-side copy, then the delete of the source. With `expected.version` (the ETag of the read
 * the caller judged) every step is tied to that object, so one replaced since (put back from a
 * backup, published again) is neither copied aside nor deleted: the HEAD must name it, the copy is
 * conditional on it (`x-amz-copy-source-if-match`), and so is the delete (`If-Match`: SeaweedFS
 * and AWS honour it). MinIO ignores `If-Match` on DELETE, so a HEAD right before the delete checks
 * again; what is left there is the time between that HEAD and the DELETE, a few milliseconds in
 * which a replacement would still be deleted. Any mismatch is `stored_bytes_mismatch` with `from`
 * left as it is and the copy, if one was made, removed again.
 */
export async function moveObject(bucket: S3Bucket, from: string, to: string, expected?: ExpectedObject): Promise<void> {
  const { client, keyOf } = bucket;
  const source = await client.head(keyOf(from));
  if (!source) throw new StorageError('not_found', `${from} is not on the S3 server.`);
  const version = expected?.version;
  if (version === undefined) {
    await copyObject(client, keyOf(from), keyOf(to), source.sizeBytes, bucket.limits, bucket.timeoutMs);
    await client.delete(keyOf(from));
    return;
  }
  const changed = (what: string) =>
    new StorageError(
      'stored_bytes_mismatch',
      `${from} is no longer the object read (ETag ${version}): ${what}; nothing was moved, it stays under its name.`,
    );
  if (source.etag !== version || source.sizeBytes !== expected?.sizeBytes)
    throw changed(`HEAD names ETag ${source.etag ?? 'none'} and ${source.sizeBytes} bytes`);
  await copyObject(client, keyOf(from), keyOf(to), source.sizeBytes, bucket.limits, bucket.timeoutMs, version).catch(
    (err: unknown) => {
      throw (err as StorageError).code === 'stored_bytes_mismatch' ? changed('the copy was refused (412)') : err;
    },
  );
  try {
    const now = await client.head(keyOf(from));
    if (now?.etag !== version) throw changed(`replaced after the copy (ETag ${now?.etag ?? 'none'})`);
    await client.delete(keyOf(from), version).catch((err: unknown) => {
      throw (err as StorageError).code === 'stored_bytes_mismatch' ? changed('the delete was refused (412)') : err;
    });
  } catch (err) {
    if ((err as StorageError).code === 'stored_bytes_mismatch') await client.delete(keyOf(to)).catch(() => {});
    throw err;
  }
}

export function s3Tree(bucket: S3Bucket, locationText: string): StoreTree {
  const { client, keyOf, location } = bucket;
  return {
    location: locationText,
    async list(dir) {
      const prefix = keyOf(`${dir}/`);
      const entries: TreeEntry[] = [];
      // Joined onto `dir` and then deleted or moved by gc and scrub: one plain segment only.
      const what = `${locationText}${dir}/`;
      for await (const entry of client.list(prefix, '/')) {
        if (entry.commonPrefix)
          entries.push({
            name: listedName(entry.commonPrefix.slice(prefix.length).replace(/\/$/, ''), what),
            isDirectory: true,
            sizeBytes: 0,
          });
        else if (entry.object && entry.object.key.length > prefix.length)
          entries.push({
            name: listedName(entry.object.key.slice(prefix.length), what),
            isDirectory: false,
            sizeBytes: entry.object.sizeBytes,
          });
      }
      return entries;
    },
    read: (file, head) => readObject(client, keyOf(file), undefined, undefined, head),
    async incompleteUploads() {
      const found: Array<{ name: string; abort(): Promise<void> }> = [];
      for await (const u of client.listMultipartUploads(location.prefix)) {
        found.push({
          name: u.key.slice(location.prefix.length),
          abort: () => abortMultipart(client, u.key, u.uploadId),
        });
      }
      return found;
    },
    async remove(target) {
      await client.delete(keyOf(target));
      await removeTree(bucket, target);
    },
    move: (from, to, expected) => moveObject(bucket, from, to, expected),
  };
}

export function s3Parts(bucket: S3Bucket): PartStore {
  const { client, keyOf } = bucket;
  const partKey = (sessionId: string, fileName: string) => keyOf(`${sessionRelativeDir(sessionId)}/${fileName}`);
  return {
    async write(sessionId, fileName, body, signal) {
      await uploadObject(client, partKey(sessionId, fileName), body, bucket.limits, {
        signal,
        timeoutMs: bucket.timeoutMs,
      });
    },
    read: (sessionId, fileName, signal) => readObject(client, partKey(sessionId, fileName), signal),
    has: async (sessionId, fileName) => (await client.head(partKey(sessionId, fileName))) !== undefined,
    remove: (sessionId, fileName) => client.delete(partKey(sessionId, fileName)),
    removeSession: (sessionId) => removeTree(bucket, sessionRelativeDir(sessionId)),
  };
}
