/**
 * The S3 store: the same layout as the other stores (`storage-id`, `blobs/sha256/ab/cd/<hex>`, `tmp/`,
 * `uploads/<session>/`) as object keys under `s3://<bucket>/<prefix>` on any S3-compatible server
 * (SeaweedFS, MinIO, Ceph RGW, Garage, AWS S3, R2). Reads are GET/HEAD with Range.
 *
 * Publish: the body streams (hashed, counted, paced) to `tmp/<uuid>.upload` (a gateway writer:
 * `tmp/<ownStaging>/<uuid>.upload`, see `ownStaging`; a separate completion worker:
 * `tmp/worker/<uuid>.upload`, see `clearStaging`; s3-transfer.ts); commit()
 * copies it server-side to its blob name unless the object already there has the ETag the server
 * gave the temporary (anything else there is not known to be that blob and is replaced). The copy is
 * tied to the temporary by its ETag, and one whose ETag differs from it is read back and hashed
 * before commit() returns. discard() deletes the temporary. With a declared sha256, a key that was free and a
 * non-empty body, the body goes straight to its blob name and nothing is copied. The catalog row is written
 * by the caller only after commit() returned, so no row ever names a missing blob.
 *
 * Multipart sessions: assembleParts() reads each part once (its sha256 re-checked, the whole's
 * computed) and copies it server-side (UploadPartCopy, tied to the bytes read by the part's ETag);
 * the multipart upload is completed only after every check passed. Parts below S3's 5 MiB minimum
 * (or a server without UploadPartCopy): undefined, and the worker streams them through stage().
 */
import { createHash, randomUUID } from 'node:crypto';
import type pg from 'pg';
import { StorageError } from '../errors.ts';
import { BODY_CAPS, drainBody, readBoundedText } from '../streaming/bounded-body.ts';
import { checkedUpload } from '../streaming/checked-upload.ts';
import {
  type ExclusiveTokens,
  type IdentityObject,
  openingStorageId,
  replaceExclusively,
  type StorageRole,
} from '../identity.ts';
import { blobRelativePath, isSha256Hex, STORAGE_ID_FILE, stagingDirOf, TMP_DIR } from '../paths.ts';
import { type ObjectVersion, openRangeStream, type RangeStream, rangeStreamReader } from '../streaming/range-stream.ts';
import { createS3Client, type S3Client, type S3ClientOptions } from './s3-client.ts';
import { formatS3Location, type S3Location } from './s3-location.ts';
import { openSocketRange, SOCKET_READ_MIN_BYTES } from './s3-socket-read.ts';
import {
  abortMultipart,
  copyObject,
  readObject,
  S3_DEFAULT_LIMITS,
  uploadObject,
  type S3Limits,
  type UploadedObject,
} from './s3-transfer.ts';
import type { OpenedArtifactStore, StagedBlob, StageOptions } from '../store.ts';
import type { SliceDigests } from '../slice-digests.ts';
import { assembleOnServer, type Assembly } from './s3-assembly.ts';
import { removeTree, s3Parts, s3Tree, type S3Bucket } from './s3-tree.ts';
import { trackedStagedBlob } from '../streaming/staged-blob.ts';

/** `blobs/sha256/ab/cd/<hex>` with forward slashes whatever the platform. */
const blobName = (sha256: string) => blobRelativePath(sha256).split('\\').join('/');

export interface S3StoreOptions extends Omit<S3ClientOptions, 'bucket'> {
  readonly location: S3Location;
  readonly role: StorageRole | 'worker';
  readonly pool: pg.Pool;
  /** Defaults: S3's own limits (5 GiB PUT and copy, 8 MiB parts); tests lower them. */
  readonly limits?: Partial<S3Limits> | undefined;
  /** A restore target (writer only): nothing is read or written at open; see `OpenedArtifactStore`. */
  readonly restoreAs?: string | undefined;
  /** false: every read through undici (tests compare both paths); default: socket reads on http: endpoints. */
  readonly socketReads?: boolean | undefined;
  /** false: every single PUT through undici (tests compare both paths); default: socket writes on http: endpoints. */
  readonly socketWrites?: boolean | undefined;
  /**
   * Writer: the prefix under tmp/ this process alone stages in (a gateway's, proxy/content/storage.ts
   * `gatewayStaging`, which says why no other live writer stages there). Emptied here, before the
   * process serves: its objects and its multipart uploads never completed are what the process it
   * replaces staged and never moved (a single PUT cut short leaves nothing: the server drops it).
   */
  readonly ownStaging?: string | undefined;
}

/** Counts of how commit() placed blobs (tests check which path a server took). */
export interface S3CommitStats {
  copy: number;
  'multipart-copy': number;
  streamed: number;
  existing: number;
  /** Staged under its blob name (sha256 declared, key free): nothing to copy. */
  direct: number;
  /** Copies read back whole to check them: the server gave the copy another ETag than its source. */
  'read-back': number;
}

/** How assembleParts() put multipart sessions together (tests check which path a server took). */
export interface S3AssemblyStats {
  /** UploadPartCopy of the part objects: the bytes were read once (to hash), never uploaded. */
  'server-copy': number;
  /** Declined (parts below 5 MiB, no UploadPartCopy): the caller streamed the parts through stage(). */
  streamed: number;
}

/** How blob ranges were opened (tests check which path a read took). */
export interface S3ReadStats {
  /** A socket of its own reading into a reused buffer (s3-socket-read.ts). */
  socket: number;
  /** The keep-alive undici pool: short ranges, https: endpoints, and answers the socket path leaves to it. */
  pool: number;
}

/** How single streamed PUTs were sent (tests check which path an upload took). */
export interface S3PutStats {
  /** A socket of its own writing from a ring of reused slots (s3-socket-write.ts). */
  socket: number;
  /** undici: `https:` endpoints, or socket writes turned off. Multipart uploads are not counted. */
  pool: number;
}

export type S3Store = OpenedArtifactStore & {
  readonly commits: Readonly<S3CommitStats>;
  readonly reads: Readonly<S3ReadStats>;
  readonly puts: Readonly<S3PutStats>;
  readonly assemblies: Readonly<S3AssemblyStats>;
};

/**
 * PUT `key` only if no object has that name (`If-None-Match: *`): false when one has (412; 409, a
 * conditional write racing another on AWS). A server that ignores the header writes whatever is there
 * (docs/backup-and-restore.md, step 3, says which of the tested servers honour it).
 */
async function putIfAbsent(client: S3Client, key: string, text: string): Promise<boolean> {
  const res = await client.request({
    method: 'PUT',
    key,
    headers: { 'content-type': 'text/plain', 'if-none-match': '*' },
    body: Buffer.from(`${text}\n`),
  });
  if (res.statusCode === 412 || res.statusCode === 409) {
    await drainBody(res.body, client.timeoutMs);
    return false;
  }
  if (res.statusCode < 200 || res.statusCode > 299) throw await client.failure(res, `PUT ${key} (If-None-Match: *)`);
  await drainBody(res.body, client.timeoutMs);
  return true;
}

function identityObject(client: S3Client, location: S3Location): IdentityObject {
  const key = `${location.prefix}${STORAGE_ID_FILE}`;
  const root = formatS3Location(location);
  const tokens: ExclusiveTokens = {
    create: (name, text) => putIfAbsent(client, `${location.prefix}${name}`, text),
    remove: (name) => client.delete(`${location.prefix}${name}`),
  };
  const object: IdentityObject = {
    root,
    name: `${root}${STORAGE_ID_FILE}`,
    variable: 'ARKVORY_STORAGE_URL',
    async read() {
      const res = await client.request({ method: 'GET', key });
      if (res.statusCode === 404) {
        const error = await client.failure(res, `GET ${key}`);
        // A missing bucket is a configuration error, not an uninitialised store.
        if (error.code === 'storage_mismatch') throw error;
        return undefined;
      }
      if (res.statusCode !== 200) throw await client.failure(res, `GET ${key}`);
      return readBoundedText(res.body, { capBytes: BODY_CAPS.small, timeoutMs: client.timeoutMs }, `GET ${key}`);
    },
    async write(id) {
      // A PUT creates the object whole or not at all: readers see all or nothing.
      await client.expectOk(
        { method: 'PUT', key, headers: { 'content-type': 'text/plain' }, body: Buffer.from(`${id}\n`) },
        `PUT ${key}`,
      );
    },
    claim: async (text) => ((await putIfAbsent(client, key, text)) ? 'replaced' : 'changed'),
    takeOver: (from, text) => replaceExclusively(object, tokens, from, text),
  };
  return object;
}

/** An S3 store of any role: `writer` may create the identity; `reader` and `worker` only verify it. */
export async function openS3Store(options: S3StoreOptions): Promise<S3Store> {
  const { location, role } = options;
  const limits: S3Limits = { ...S3_DEFAULT_LIMITS, ...options.limits };
  const client = createS3Client({ ...options, bucket: location.bucket });
  const keyOf = (relative: string) => `${location.prefix}${relative}`;
  const locationText = `${formatS3Location(location)} on ${client.endpoint}`;
  const stats = { committed: 0, discarded: 0, failed: 0 };
  const commits: S3CommitStats = {
    copy: 0,
    'multipart-copy': 0,
    streamed: 0,
    existing: 0,
    direct: 0,
    'read-back': 0,
  };
  const assemblies: S3AssemblyStats = { 'server-copy': 0, streamed: 0 };
  const reads: S3ReadStats = { socket: 0, pool: 0 };
  const puts: S3PutStats = { socket: 0, pool: 0 };
  const { timeoutMs } = options;
  const bucket: S3Bucket = { client, location, limits, timeoutMs, keyOf };

  // Large reads from an http: endpoint go over a socket reading into one reused buffer (s3-socket-read.ts).
  const endpointUrl = new URL(client.endpoint);
  const socketEndpoint =
    endpointUrl.protocol === 'http:'
      ? {
          host: endpointUrl.hostname.replace(/^\[(.*)\]$/, '$1'),
          port: Number(endpointUrl.port || 80),
          connectTimeoutMs: options.connectTimeoutMs,
          timeoutMs,
        }
      : undefined;
  const socketReads = options.socketReads !== false ? socketEndpoint : undefined;
  // Single PUTs to an http: endpoint go over a socket writing from a ring of reused slots (s3-socket-write.ts).
  const socketWrites = options.socketWrites !== false ? socketEndpoint : undefined;
  // Socket streams read into a buffer they reuse, so their bytes are copied out (read()), never lent.
  const lendsChunks = socketReads === undefined;

  // A separate completion worker stages apart from every writer: it alone empties its prefix.
  const stagingDir = stagingDirOf(role, options.ownStaging);

  const identity = identityObject(client, location);
  let storageId: string;
  try {
    storageId = await openingStorageId({ object: identity, role, pool: options.pool, restoreAs: options.restoreAs });
    if (role === 'writer' && stagingDir !== TMP_DIR) await clearStagingPrefix(bucket, stagingDir);
  } catch (err) {
    await client.close().catch(() => {});
    throw err;
  }

  async function openRange(sha256: string, start: number, end: number, version?: ObjectVersion): Promise<RangeStream> {
    const key = keyOf(blobName(sha256));
    const ifMatch = (etag: string | undefined): Record<string, string> =>
      etag === undefined ? {} : { 'if-match': etag };
    if (socketReads && end - start + 1 >= SOCKET_READ_MIN_BYTES) {
      const request = client.signedHead({
        method: 'GET',
        key,
        headers: { range: `bytes=${start}-${end}`, ...ifMatch(version?.etag) },
      });
      const opened = await openSocketRange(socketReads, request, start, end);
      if (opened !== 'fallback') {
        reads.socket++;
        return opened;
      }
      // Not a plain success answer (an error, a redirect…): undici asks again and reads it.
    }
    reads.pool++;
    return openRangeStream(
      (range, highWaterMark, etag) =>
        client.request({ method: 'GET', key, headers: { range, ...ifMatch(etag) }, highWaterMark }),
      {
        sha256,
        target: key,
        version,
        timeoutMs: client.timeoutMs,
        onError: (res) =>
          client
            .failure(res, `GET ${key}`)
            .then((e) =>
              e.code === 'not_found' ? new StorageError('not_found', `blob ${sha256} is not on the S3 server`) : e,
            ),
      },
      start,
      end,
    );
  }

  /**
   * Where a body is staged: with a declared sha256 for a free key, straight under its blob name (no
   * copy: half the server work for large uploads). Safe because the object only comes into existence
   * once the body passed every check (s3-transfer.ts), and S3 replaces an object atomically (an
   * identical blob already there has the same bytes; a failed upload leaves it as it was). Nothing
   * checks such a blob at commit(), so its PUT counts only with the ETag S3 sends for every object
   * it stored (s3-transfer.ts `storedEtag`): a 200 without one is a failed upload.
   * Otherwise a temporary under tmp/; always for an empty body (nothing to save, and its PUT is
   * whole from its head: a blob name is never where a mistake there could land).
   */
  function stagingName(stageOptions: StageOptions): string {
    const declared =
      stageOptions.keyWasFree &&
      stageOptions.expectedLength !== 0 &&
      stageOptions.expectedSha256 !== undefined &&
      isSha256Hex(stageOptions.expectedSha256)
        ? stageOptions.expectedSha256
        : undefined;
    return declared ? blobName(declared) : `${stagingDir}/${randomUUID()}.upload`;
  }

  /**
   * Reads `key` back whole: its bytes must be the blob's. For a copy the server gave another ETag
   * than the object it copied (encryption with its own keys, a recomputed ETag): then nothing but
   * the bytes themselves says the copy holds what was uploaded.
   */
  async function verifyCopied(key: string, sha256: string, sizeBytes: number): Promise<void> {
    const hash = createHash('sha256');
    let read = 0;
    for await (const chunk of readObject(client, key)) {
      hash.update(chunk);
      read += chunk.length;
    }
    const got = hash.digest('hex');
    if (read !== sizeBytes || got !== sha256)
      throw new StorageError(
        'stored_bytes_mismatch',
        `The S3 server holds ${read} bytes of sha256 ${got} under ${key} after the copy, not the ${sizeBytes} uploaded of ${sha256}.`,
      );
    commits['read-back']++;
  }

  /**
   * A fully written, verified object at `tempName` (a tmp/ temporary or already its blob name),
   * `etag` as the server answered its upload.
   */
  function stagedBlob(
    tempName: string,
    etag: string | undefined,
    sha256: string,
    sizeBytes: number,
    sliceDigests: SliceDigests | undefined,
  ): StagedBlob {
    const direct = tempName === blobName(sha256);
    return trackedStagedBlob(
      stats,
      sha256,
      sizeBytes,
      {
        async commit() {
          const target = keyOf(blobName(sha256));
          if (direct) {
            commits.direct++;
            return;
          }
          // An object already under the name is taken as this blob only when the server gives it
          // the ETag of the object just uploaded (its own digest of both): another size or the
          // same size with other bytes (planted by hand or by a flawed older write, damaged) is
          // replaced by the verified bytes rather than published under their name.
          const there = await client.head(target);
          if (etag !== undefined && there?.sizeBytes === sizeBytes && there.etag === etag) {
            commits.existing++;
            return;
          }
          const copied = await copyObject(client, keyOf(tempName), target, sizeBytes, limits, timeoutMs, etag);
          commits[copied.how]++;
          if (etag === undefined || copied.etag !== etag) await verifyCopied(target, sha256, sizeBytes);
        },
        // Best effort: the catalog decision is already made; a temporary left behind is gc's.
        // A blob staged under its own name and not committed (a racing publish of the key) is
        // left to gc too: another publish may reference the same blob by now.
        discard: async () => {
          if (!direct) await client.delete(keyOf(tempName)).catch(() => {});
        },
      },
      sliceDigests,
    );
  }

  return {
    kind: 's3',
    location: locationText,
    storageId,
    identity,
    writable: role !== 'reader',
    uploadStats: () => ({ ...stats }),
    commits,
    assemblies,
    reads,
    puts,
    parts: s3Parts(bucket),
    tree: s3Tree(bucket, locationText),
    close: () => client.close(),
    // The separate worker's prefix, once it holds the worker lock: what an earlier worker staged
    // there (killed, or its lock lost and its job aborted) goes before it claims a job.
    ...(role === 'worker' && { clearStaging: () => clearStagingPrefix(bucket, stagingDir) }),

    async stage(body, stageOptions: StageOptions): Promise<StagedBlob> {
      if (role === 'reader') throw new Error('stage() on a read-only store');
      const tempName = stagingName(stageOptions);
      // Every check throws inside the body, so the server never completes the object.
      const upload = checkedUpload(body, stageOptions);
      let uploaded: UploadedObject;
      try {
        const single =
          stageOptions.expectedLength !== undefined && stageOptions.expectedLength <= limits.singlePutBytes;
        if (single) puts[socketWrites ? 'socket' : 'pool']++;
        uploaded = await uploadObject(client, keyOf(tempName), upload.chunks, limits, {
          expectedLength: stageOptions.expectedLength,
          signal: stageOptions.signal,
          timeoutMs,
          socket: socketWrites,
          // checkedUpload never reads a chunk again once it has yielded it; the body's producer says.
          releaseChunks: stageOptions.chunksOwned === true,
          // Without a length, the parts are sized so that the largest body allowed fits in 10 000.
          maxBytes: stageOptions.maxBytes,
        });
        // The upload resolves only after the body ended (and so was checked); if it ever did not,
        // the object is not known to be the body's: never commit it.
        if (upload.result.sha256 === '')
          throw new StorageError('upstream_unreachable', `The S3 server took ${tempName} before its body ended.`);
      } catch (err) {
        stats.failed++;
        // Normally nothing was stored; if the server did keep a temporary, gc lists it. A blob
        // name is never deleted here: an identical, published blob may have been there before.
        if (tempName.startsWith(TMP_DIR)) await client.delete(keyOf(tempName)).catch(() => {});
        throw err;
      }
      return stagedBlob(
        tempName,
        uploaded.etag,
        upload.result.sha256,
        upload.result.sizeBytes,
        upload.result.sliceDigests,
      );
    },

    async assembleParts(sessionId, parts, stageOptions): Promise<StagedBlob | undefined> {
      if (role === 'reader') throw new Error('assembleParts() on a read-only store');
      const tempName = stagingName(stageOptions);
      let assembled: Assembly;
      try {
        assembled = await assembleOnServer(bucket, sessionId, parts, keyOf(tempName), stageOptions);
      } catch (err) {
        stats.failed++;
        if (tempName.startsWith(TMP_DIR)) await client.delete(keyOf(tempName)).catch(() => {});
        throw err;
      }
      if (assembled === 'declined') {
        assemblies.streamed++;
        return undefined;
      }
      assemblies['server-copy']++;
      return stagedBlob(tempName, assembled.etag, assembled.sha256, assembled.sizeBytes, assembled.sliceDigests);
    },

    async openBlob(sha256, ranges = []) {
      if (!isSha256Hex(sha256)) throw new StorageError('not_found');
      if (ranges.length === 0) {
        const head = await client.head(keyOf(blobName(sha256)));
        if (!head) throw new StorageError('not_found', `blob ${sha256} is not on the S3 server`);
        return rangeStreamReader(
          sha256,
          head.sizeBytes,
          ranges,
          undefined,
          (start, end, version) => openRange(sha256, start, end, version),
          { lendsChunks },
        );
      }
      const first = await openRange(sha256, ranges[0]!.start, ranges[0]!.end);
      return rangeStreamReader(
        sha256,
        first.sizeBytes,
        ranges,
        first,
        (start, end, version) => openRange(sha256, start, end, version),
        { lendsChunks },
      );
    },

    async hasBlob(sha256) {
      if (!isSha256Hex(sha256)) return false;
      return (await client.head(keyOf(blobName(sha256)))) !== undefined;
    },
  };
}

/**
 * Removes what a killed process staged under `dir`: its multipart uploads never completed (their
 * parts are kept, and billed, until aborted) and its objects staged whole but never copied. The
 * uploads are listed under the store's prefix, as gc lists them, and only those under `dir` are
 * aborted: MinIO lists none for a prefix that is not a whole key or empty.
 */
async function clearStagingPrefix(bucket: S3Bucket, dir: string): Promise<void> {
  const own = bucket.keyOf(`${dir}/`);
  const uploads: Array<{ key: string; uploadId: string }> = [];
  for await (const upload of bucket.client.listMultipartUploads(bucket.location.prefix))
    if (upload.key.startsWith(own)) uploads.push(upload);
  for (const { key, uploadId } of uploads) await abortMultipart(bucket.client, key, uploadId);
  await removeTree(bucket, dir);
}

/** Reads `storage-id` from an S3 store without binding anything (for `arkvory doctor`). */
export async function readS3StorageIdObject(
  options: Omit<S3StoreOptions, 'role' | 'pool' | 'restoreAs'>,
): Promise<string | undefined> {
  const client = createS3Client({ ...options, bucket: options.location.bucket });
  try {
    return (await identityObject(client, options.location).read())?.trim();
  } finally {
    await client.close();
  }
}
