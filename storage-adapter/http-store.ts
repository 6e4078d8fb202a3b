/**
 * The static-HTTP store: the same layout as the filesystem store (`storage-id`, `blobs/sha256/ab/cd/<hex>`,
 * `tmp/`, `uploads/<session>/`) on a dumb HTTP file server, e.g. nginx with
 * `dav_methods PUT DELETE MOVE; create_full_put_path on;` (writes) and `autoindex_format json` (listing,
 * for scrub and gc only). Reads are plain GET/HEAD with Range.
 *
 * Publish: the body streams (hashed, counted, paced) as a chunked PUT to `tmp/<uuid>.upload`; a
 * length or digest mismatch throws inside the body, so the store never completes the temporary.
 * commit() MOVEs it to the blob name (`Overwrite: F`: an existing blob has the same bytes). A store
 * without MOVE (405/501) gets a GET of the temporary piped into a PUT of the final name instead.
 * Durability is the store's: nginx does not fsync, so a power loss on the storage host can lose or
 * truncate a blob whose catalog row exists (scrub finds a truncated one; see the docs).
 */
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type pg from 'pg';
import type { Dispatcher, Pool } from 'undici';
import { checkedUpload } from './checked-upload.ts';
import { StorageError } from './errors.ts';
import {
  createUpstreamPool,
  sendStreamedBody,
  unexpectedStatus,
  upstreamError,
  type UpstreamOptions,
} from './http-upstream.ts';
import { ensureStorageIdentityOf, type IdentityObject, type StorageRole } from './identity.ts';
import { sessionRelativeDir } from './multipart/session-path.ts';
import { blobRelativePath, isSha256Hex, STORAGE_ID_FILE, TMP_DIR } from './paths.ts';
import type { ByteRange } from './range.ts';
import { openRangeStream, rangeStreamReader, type RangeStream } from './range-stream.ts';
import type {
  BlobReader,
  OpenedArtifactStore,
  PartStore,
  StagedBlob,
  StageOptions,
  StoreTree,
  TreeEntry,
} from './store.ts';

type Method = Dispatcher.HttpMethod;

interface CallOptions {
  method: Method;
  path: string;
  headers?: Record<string, string>;
  body?: Readable;
  signal?: AbortSignal;
  headersTimeout?: number;
  highWaterMark?: number;
}

/** `blobs/sha256/ab/cd/<hex>` with forward slashes whatever the platform. */
const blobName = (sha256: string) => blobRelativePath(sha256).split('\\').join('/');

export interface HttpStoreOptions extends UpstreamOptions {
  /** Base URL of the store root, e.g. `http://storage:8081/arkvory/`. */
  readonly url: string;
  readonly role: StorageRole | 'worker';
  readonly pool: pg.Pool;
  /** A restore target (writer only): nothing is read or written at open; see `OpenedArtifactStore`. */
  readonly restoreAs?: string | undefined;
}

/** An HTTP store of any role: `writer` may create the identity; `reader` and `worker` only verify it. */
export async function openHttpStore(options: HttpStoreOptions): Promise<OpenedArtifactStore> {
  const base = new URL(options.url);
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  const location = base.href;
  const basePath = base.pathname;
  const upstream: Pool = createUpstreamPool(base.origin, options);
  const { role } = options;
  const pathOf = (relative: string) => basePath + relative.split('/').map(encodeURIComponent).join('/');
  const stats = { committed: 0, discarded: 0, failed: 0 };
  /** Learned from the first MOVE: undefined until then. */
  let hasMove: boolean | undefined;

  async function call(o: CallOptions): Promise<Dispatcher.ResponseData> {
    try {
      return await upstream.request({
        method: o.method,
        path: o.path,
        headers: o.headers,
        body: o.body,
        signal: o.signal,
        headersTimeout: o.headersTimeout,
        highWaterMark: o.highWaterMark,
      });
    } catch (err) {
      throw upstreamError(
        o.signal?.aborted && o.signal.reason instanceof StorageError ? o.signal.reason : err,
        `${o.method} ${o.path}`,
      );
    }
  }

  /** A request whose answer has no body we need: the status, body drained. */
  async function status(o: CallOptions): Promise<number> {
    const res = await call(o);
    await res.body.dump().catch(() => {});
    return res.statusCode;
  }

  async function expectStatus(o: CallOptions, ok: readonly number[]): Promise<number> {
    const code = await status(o);
    if (!ok.includes(code)) throw unexpectedStatus(code, `${o.method} ${o.path}`);
    return code;
  }

  /** PUT with a streamed body and the confirmation deadline of `sendStreamedBody`. */
  async function put(relative: string, body: AsyncIterable<Buffer>, signal?: AbortSignal): Promise<void> {
    const timeoutMessage = `The artifact store did not confirm PUT ${pathOf(relative)} within ${options.timeoutMs} ms.`;
    await sendStreamedBody(body, { signal, timeoutMs: options.timeoutMs, timeoutMessage }, (watched, sendSignal) =>
      expectStatus(
        {
          method: 'PUT',
          path: pathOf(relative),
          headers: { 'content-type': 'application/octet-stream' },
          body: Readable.from(watched, { objectMode: false }),
          signal: sendSignal,
          headersTimeout: 0,
        },
        [200, 201, 204],
      ),
    );
  }

  async function* get(relative: string, signal?: AbortSignal): AsyncGenerator<Buffer> {
    const res = await call({ method: 'GET', path: pathOf(relative), signal });
    if (res.statusCode === 404) {
      await res.body.dump().catch(() => {});
      throw new StorageError('not_found', `${relative} is not on the artifact store.`);
    }
    if (res.statusCode !== 200) {
      await res.body.dump().catch(() => {});
      throw unexpectedStatus(res.statusCode, `GET ${pathOf(relative)}`);
    }
    try {
      for await (const chunk of res.body) yield chunk as Buffer;
    } catch (err) {
      throw upstreamError(err, `GET ${pathOf(relative)}`);
    }
  }

  /** Removes an object; a collection (nginx answers 409 without the slash) with `Depth: infinity`. */
  async function remove(relative: string): Promise<void> {
    const code = await expectStatus({ method: 'DELETE', path: pathOf(relative) }, [200, 204, 404, 409]);
    if (code === 409)
      await expectStatus(
        { method: 'DELETE', path: `${pathOf(relative)}/`, headers: { depth: 'infinity' } },
        [200, 204, 404],
      );
  }

  /** MOVE, or GET+PUT+DELETE on a store without it. Returns false when `to` existed and `overwrite` is off. */
  async function move(from: string, to: string, overwrite: boolean): Promise<boolean> {
    if (hasMove !== false) {
      const code = await status({
        method: 'MOVE',
        path: pathOf(from),
        headers: { destination: pathOf(to), overwrite: overwrite ? 'T' : 'F' },
      });
      if (code === 201 || code === 204) {
        hasMove = true;
        return true;
      }
      if (code === 412) return false;
      if (code !== 405 && code !== 501) throw unexpectedStatus(code, `MOVE ${pathOf(from)}`);
      hasMove = false;
    }
    if (!overwrite && (await status({ method: 'HEAD', path: pathOf(to) })) === 200) return false;
    await put(to, get(from));
    await remove(from);
    return true;
  }

  const identity: IdentityObject = {
    root: location,
    name: `${location}${STORAGE_ID_FILE}`,
    variable: 'ARKVORY_STORAGE_URL',
    async read() {
      const res = await call({ method: 'GET', path: pathOf(STORAGE_ID_FILE) });
      const text = await res.body.text().catch((err: unknown) => {
        throw upstreamError(err, `GET ${pathOf(STORAGE_ID_FILE)}`);
      });
      if (res.statusCode === 404) return undefined;
      if (res.statusCode !== 200) throw unexpectedStatus(res.statusCode, `GET ${pathOf(STORAGE_ID_FILE)}`);
      return text;
    },
    async write(id) {
      // nginx writes a PUT body to a temporary file and renames it: readers see all or nothing.
      await put(
        STORAGE_ID_FILE,
        (async function* () {
          yield Buffer.from(`${id}\n`);
        })(),
      );
    },
  };

  let storageId: string;
  try {
    if (options.restoreAs !== undefined && role !== 'writer') throw new Error('restoreAs needs the writer role');
    storageId =
      options.restoreAs ??
      (await ensureStorageIdentityOf({
        object: identity,
        role: role === 'writer' ? 'writer' : 'reader',
        pool: options.pool,
      }));
  } catch (err) {
    await upstream.close().catch(() => {});
    throw err;
  }

  function openRange(sha256: string, start: number, end: number): Promise<RangeStream> {
    const target = pathOf(blobName(sha256));
    return openRangeStream(
      (range, highWaterMark) => call({ method: 'GET', path: target, headers: { range }, highWaterMark }),
      { sha256, target },
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
    return rangeStreamReader(sha256, sizeBytes, ranges, first, (start, end) => openRange(sha256, start, end));
  }

  const parts: PartStore = {
    async write(sessionId, fileName, body, signal) {
      const name = `${sessionRelativeDir(sessionId)}/${fileName}`;
      try {
        await put(name, body, signal);
      } catch (err) {
        await remove(name).catch(() => {});
        throw err;
      }
    },
    read: (sessionId, fileName, signal) => get(`${sessionRelativeDir(sessionId)}/${fileName}`, signal),
    remove: (sessionId, fileName) => remove(`${sessionRelativeDir(sessionId)}/${fileName}`),
    removeSession: (sessionId) => remove(sessionRelativeDir(sessionId)),
  };

  const tree: StoreTree = {
    location,
    async list(dir) {
      const target = `${pathOf(dir)}/`;
      const res = await call({ method: 'GET', path: target, headers: { accept: 'application/json' } });
      const text = await res.body.text().catch((err: unknown) => {
        throw upstreamError(err, `GET ${target}`);
      });
      if (res.statusCode === 404) return [];
      if (res.statusCode !== 200) throw unexpectedStatus(res.statusCode, `GET ${target}`);
      let entries: Array<{ name?: unknown; type?: unknown; size?: unknown }>;
      try {
        entries = JSON.parse(text) as typeof entries;
        if (!Array.isArray(entries)) throw new Error('not a list');
      } catch {
        throw new Error(
          `GET ${location}${dir}/ did not return a JSON listing; scrub and gc need \`autoindex on; autoindex_format json;\` on the store`,
        );
      }
      return entries.map(
        (e): TreeEntry => ({
          name: String(e.name),
          isDirectory: e.type === 'directory',
          sizeBytes: Number(e.size ?? 0),
        }),
      );
    },
    read: (file) => get(file),
    remove,
    async move(from, to) {
      await move(from, to, true);
    },
  };

  return {
    kind: 'http',
    location,
    storageId,
    identity,
    writable: role !== 'reader',
    uploadStats: () => ({ ...stats }),
    parts,
    tree,
    close: () => upstream.close(),

    async stage(body, stageOptions: StageOptions): Promise<StagedBlob> {
      if (role === 'reader') throw new Error('stage() on a read-only store');
      const tempName = `${TMP_DIR}/${randomUUID()}.upload`;
      // Every check throws inside the body, so the store sees an aborted PUT and keeps nothing.
      const upload = checkedUpload(body, stageOptions);
      try {
        await put(tempName, upload.chunks, stageOptions.signal);
      } catch (err) {
        stats.failed++;
        // Normally nothing was stored; if the store did keep a temporary, gc lists it.
        await remove(tempName).catch(() => {});
        throw err;
      }
      const { sha256, sizeBytes } = upload.result;
      let committed = false;
      let discarded = false;
      return {
        sha256,
        sizeBytes,
        async commit() {
          if (discarded) throw new Error('commit() after discard()');
          if (committed) return;
          // false: an identical blob (same name, so same bytes) is already there; discard() drops ours.
          await move(tempName, blobName(sha256), false);
          committed = true;
          stats.committed++;
        },
        async discard() {
          if (!committed && !discarded) stats.discarded++;
          discarded = true;
          // Best effort: the catalog decision is already made; a temporary left behind is gc's.
          await remove(tempName).catch(() => {});
        },
      };
    },

    async openBlob(sha256, ranges = []) {
      if (!isSha256Hex(sha256)) throw new StorageError('not_found');
      if (ranges.length === 0) {
        const res = await call({ method: 'HEAD', path: pathOf(blobName(sha256)) });
        await res.body.dump().catch(() => {});
        if (res.statusCode === 404) throw new StorageError('not_found', `blob ${sha256} is not on the artifact store`);
        if (res.statusCode !== 200) throw unexpectedStatus(res.statusCode, `HEAD ${pathOf(blobName(sha256))}`);
        return openReader(sha256, Number(res.headers['content-length']), ranges, undefined);
      }
      const first = await openRange(sha256, ranges[0]!.start, ranges[0]!.end);
      return openReader(sha256, first.sizeBytes, ranges, first);
    },

    async hasBlob(sha256) {
      if (!isSha256Hex(sha256)) return false;
      const code = await status({ method: 'HEAD', path: pathOf(blobName(sha256)) });
      if (code === 200) return true;
      if (code === 404) return false;
      throw unexpectedStatus(code, `HEAD ${pathOf(blobName(sha256))}`);
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
    const text = await res.body.text();
    if (res.statusCode === 404) return undefined;
    if (res.statusCode !== 200) throw unexpectedStatus(res.statusCode, `GET ${target}`);
    return text.trim();
  } finally {
    await upstream.close();
  }
}
