/**
 * The static-HTTP store: the same layout as the filesystem store (`storage-id`, `blobs/sha256/ab/cd/<hex>`,
 * `tmp/`, `uploads/<session>/`) on a dumb HTTP file server, e.g. nginx with
 * `dav_methods PUT DELETE MOVE MKCOL; create_full_put_path on;` (writes; MKCOL for a restore's claim) and `autoindex_format json` (listing,
 * for scrub and gc only). Reads are plain GET/HEAD with Range.
 *
 * Publish: the body streams (hashed, counted, paced) as a chunked PUT to `tmp/<uuid>.upload` (a
 * gateway writer: `tmp/<ownStaging>/<uuid>.upload`, see `ownStaging`; a separate completion worker:
 * `tmp/worker/<uuid>.upload`, see `clearStaging`); a
 * length or digest mismatch throws inside the body, so the store never completes the temporary.
 * commit() MOVEs it to the blob name with `Overwrite: T`: whatever is there already is replaced by the
 * verified bytes, never taken as them. A store without MOVE (405/501) gets a GET of the temporary
 * piped into a PUT of the final name instead, its size and sha256 checked on the way: other bytes (a
 * GET cut short with a clean end, a proxy rewriting it) fail the PUT before its body ends, so nothing
 * is written under the blob name and commit() fails `stored_bytes_mismatch`. The blob name is never
 * deleted on that failure: an identical, published blob may be there.
 * Durability is the store's: nginx does not fsync, so a power loss on the storage host can lose or
 * truncate a blob whose catalog row exists (scrub finds a truncated one; see the docs).
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { BODY_CAPS, drainBody, readBoundedText } from '../streaming/bounded-body.ts';
import { checkedUpload } from '../streaming/checked-upload.ts';
import { StorageError } from '../errors.ts';
import {
  createUpstreamPool,
  headLength,
  unexpectedStatus,
  upstreamError,
  type UpstreamOptions,
} from '../streaming/http-upstream.ts';
import { httpIdentity, httpParts, httpTree } from './http-tree.ts';
import { WebDavClient } from './http-webdav.ts';
import { openingStorageId, type StorageRole } from '../identity.ts';
import { blobRelativePath, isSha256Hex, STORAGE_ID_FILE, stagingDirOf, TMP_DIR } from '../paths.ts';
import type { ByteRange } from '../range.ts';
import { type ObjectVersion, openRangeStream, type RangeStream, rangeStreamReader } from '../streaming/range-stream.ts';
import type { BlobReader, OpenedArtifactStore, StagedBlob, StageOptions } from '../store.ts';
import { trackedStagedBlob } from '../streaming/staged-blob.ts';

const blobName = (sha256: string) => blobRelativePath(sha256).split('\\').join('/');

export interface HttpStoreOptions extends UpstreamOptions {
  readonly url: string;
  readonly role: StorageRole | 'worker';
  readonly pool: pg.Pool;
  readonly restoreAs?: string | undefined;
  /**
   * Writer: the directory under tmp/ this process alone stages in (a gateway's, proxy/content/storage.ts
   * `gatewayStaging`, which says why no other live writer stages there). Removed here, before the
   * process serves: what it holds are the staged uploads (whole: nginx keeps a PUT cut short
   * nowhere) of the process this one replaces.
   */
  readonly ownStaging?: string | undefined;
}

export async function openHttpStore(options: HttpStoreOptions): Promise<OpenedArtifactStore> {
  const dav = new WebDavClient(options.url, options);
  const { location } = dav;
  const { role } = options;
  const stats = { committed: 0, discarded: 0, failed: 0 };
  const identity = httpIdentity(dav);

  // A separate completion worker stages apart from every writer: it alone empties its directory.
  const stagingDir = stagingDirOf(role, options.ownStaging);

  let storageId: string;
  try {
    storageId = await openingStorageId({ object: identity, role, pool: options.pool, restoreAs: options.restoreAs });
    // One DELETE of the directory (no listing needed); the next PUT creates it again.
    if (role === 'writer' && stagingDir !== TMP_DIR) await dav.remove(stagingDir);
  } catch (err) {
    await dav.close().catch(() => {});
    throw err;
  }

  function openRange(sha256: string, start: number, end: number, version?: ObjectVersion): Promise<RangeStream> {
    const target = dav.pathOf(blobName(sha256));
    return openRangeStream(
      (range, highWaterMark, ifMatch) =>
        dav.call({
          method: 'GET',
          path: target,
          headers: ifMatch === undefined ? { range } : { range, 'if-match': ifMatch },
          highWaterMark,
        }),
      { sha256, target, version, timeoutMs: dav.timeoutMs },
      start,
      end,
    );
  }

  function openReader(
    sha256: string,
    sizeBytes: number,
    ranges: readonly ByteRange[],
    first: RangeStream | undefined,
  ): BlobReader {
    return rangeStreamReader(sha256, sizeBytes, ranges, first, (start, end, version) =>
      openRange(sha256, start, end, version),
    );
  }

  return {
    kind: 'http',
    location,
    storageId,
    identity,
    writable: role !== 'reader',
    uploadStats: () => ({ ...stats }),
    parts: httpParts(dav),
    tree: httpTree(dav),
    close: () => dav.close(),
    // The separate worker's directory, once it holds the worker lock: what an earlier worker staged
    // there (killed, or its lock lost and its job aborted) goes before it claims a job.
    ...(role === 'worker' && { clearStaging: () => dav.remove(stagingDir) }),

    async stage(body, stageOptions: StageOptions): Promise<StagedBlob> {
      if (role === 'reader') throw new Error('stage() on a read-only store');
      const tempName = `${stagingDir}/${randomUUID()}.upload`;
      // Every check throws inside the body, so the store sees an aborted PUT and keeps nothing.
      const upload = checkedUpload(body, stageOptions);
      try {
        await dav.put(tempName, upload.chunks, stageOptions.signal);
      } catch (err) {
        stats.failed++;
        // Normally nothing was stored; if the store did keep a temporary, gc lists it.
        await dav.remove(tempName).catch(() => {});
        throw err;
      }
      const { sha256, sizeBytes, sliceDigests } = upload.result;
      return trackedStagedBlob(
        stats,
        sha256,
        sizeBytes,
        {
          // Overwrite: an object already under the name was never checked here (damaged, cut short,
          // replaced on the host) and would otherwise be served under this sha256; the verified
          // bytes replace it (nginx renames over it: a reader sees the old file or the new one).
          commit: async () => {
            await dav.move(tempName, blobName(sha256), true, { sha256, sizeBytes });
          },
          // Best effort: the catalog decision is already made; a temporary left behind is gc's.
          discard: () => dav.remove(tempName).catch(() => {}),
        },
        sliceDigests,
      );
    },

    async openBlob(sha256, ranges = []) {
      if (!isSha256Hex(sha256)) throw new StorageError('not_found');
      if (ranges.length === 0) {
        const res = await dav.call({ method: 'HEAD', path: dav.pathOf(blobName(sha256)) });
        await drainBody(res.body, dav.timeoutMs);
        if (res.statusCode === 404) throw new StorageError('not_found', `blob ${sha256} is not on the artifact store`);
        const what = `HEAD ${dav.pathOf(blobName(sha256))}`;
        if (res.statusCode !== 200) throw unexpectedStatus(res.statusCode, what);
        return openReader(sha256, headLength(res.headers['content-length'], what), ranges, undefined);
      }
      const first = await openRange(sha256, ranges[0]!.start, ranges[0]!.end);
      return openReader(sha256, first.sizeBytes, ranges, first);
    },

    async hasBlob(sha256) {
      if (!isSha256Hex(sha256)) return false;
      const code = await dav.status({ method: 'HEAD', path: dav.pathOf(blobName(sha256)) });
      if (code === 200) return true;
      if (code === 404) return false;
      throw unexpectedStatus(code, `HEAD ${dav.pathOf(blobName(sha256))}`);
    },
  };
}

/** Reads `storage-id` from a static-HTTP store without binding anything (for `arkvory doctor`). */
export async function readStorageIdObject(url: string, options: UpstreamOptions): Promise<string | undefined> {
  const base = new URL(url);
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  const upstream = createUpstreamPool(base.origin, options);
  const target = `${base.pathname}${STORAGE_ID_FILE}`;
  try {
    const res = await upstream.request({ method: 'GET', path: target }).catch((err: unknown) => {
      throw upstreamError(err, `GET ${target}`);
    });
    if (res.statusCode !== 200) {
      await drainBody(res.body, options.timeoutMs);
      if (res.statusCode === 404) return undefined;
      throw unexpectedStatus(res.statusCode, `GET ${target}`);
    }
    return (
      await readBoundedText(res.body, { capBytes: BODY_CAPS.small, timeoutMs: options.timeoutMs }, `GET ${target}`)
    ).trim();
  } finally {
    await upstream.close();
  }
}
