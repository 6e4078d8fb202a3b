/**
 * The storage interface both stores satisfy: the filesystem store (`fs-store.ts`, a directory) and
 * the static-HTTP store (`http-store.ts`, a dumb file server such as nginx with WebDAV PUT/DELETE/MOVE).
 * Both use the same layout of relative names, so a directory served by nginx is the same store.
 */
import type { ByteMeter } from './byte-meter.ts';
import type { IdentityObject } from './identity.ts';
import type { ByteRange } from './range.ts';
import type { SliceDigests } from './slice-digests.ts';

export interface StageOptions {
  /** Larger bodies fail with `payload_too_large` as soon as the limit is crossed. */
  readonly maxBytes: number;
  /** Declared length (Content-Length); a different count fails with `invalid_request`. */
  readonly expectedLength?: number | undefined;
  /** Declared sha256 (Content-Digest) as lowercase hex; a different digest fails with `invalid_request`. */
  readonly expectedSha256?: string | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Upload pacing: each slice of the body is charged before it is accepted. */
  readonly meter?: ByteMeter | undefined;
  /**
   * The caller found no catalog row for its key: a store may then stage a body with a declared
   * sha256 straight under its blob name (the S3 store, saving a copy). Such a blob, if not
   * committed after all (a racing publish of the same key), stays for gc.
   */
  readonly keyWasFree?: boolean | undefined;
  /**
   * The body's chunks become the store's as they are yielded (a request body read straight off the
   * socket): a store may free a chunk's memory once it has used it (the filesystem store does, see
   * overlapped-writer.ts). Leave unset when anything reads a chunk after yielding it.
   */
  readonly chunksOwned?: boolean | undefined;
  /**
   * Record the sha256 of each slice of this size too (`StagedBlob.sliceDigests`), for the slice
   * cache (slice-digests.ts). Undefined: slice digests are not computed.
   */
  readonly sliceBytes?: number | undefined;
}

/** A fully written temporary object, verified (size, sha256), not yet under its blob name. */
export interface StagedBlob {
  readonly sha256: string;
  readonly sizeBytes: number;
  /** Per-slice digests, computed in the same pass as the sha256 when `StageOptions.sliceBytes` asked. */
  readonly sliceDigests?: SliceDigests | undefined;
  /**
   * Moves the bytes to `blobs/sha256/ab/cd/<hex>`, in place of whatever is there (never checked, so
   * maybe damaged); the S3 store keeps an object the server gives the temporary's ETag.
   */
  commit(): Promise<void>;
  /** Removes the temporary; safe to call after commit and more than once. */
  discard(): Promise<void>;
}

/** Random access to one published blob, shaped like `FileHandle.read` so streaming code serves both. */
export interface BlobReader {
  readonly sizeBytes: number;
  /**
   * Reads up to `length` bytes at `position`; fewer is fine, 0 means the blob ended. A reader that
   * may wait long for its bytes (a fill of the slice cache) stops waiting when `signal` aborts.
   */
  read(
    buffer: Buffer,
    offset: number,
    length: number,
    position: number,
    signal?: AbortSignal,
  ): Promise<{ bytesRead: number }>;
  /**
   * Optional streaming form, preferred when present: the bytes of `range` as the store hands them
   * over (the HTTP store's upstream chunks, no copy). Pulls only when the caller asks (backpressure).
   */
  chunks?(range: ByteRange, signal: AbortSignal): AsyncIterable<Buffer>;
  /** The whole blob, when it is already in memory (small-blob cache): a response sends it in one write. */
  readonly bytes?: Buffer | undefined;
  close(): Promise<void>;
}

export interface UploadStats {
  /** commit() placed the staged bytes under blobs/. */
  readonly committed: number;
  /** Fully staged, then discarded without commit (the same bytes were already published, or a conflict). */
  readonly discarded: number;
  /** Staging failed: the client went away, too large, length or digest mismatch, disk full, store down. */
  readonly failed: number;
}

/** Multipart part objects under `uploads/<session>/<file>`. */
export interface PartStore {
  /** Stores `body` under the name; durable (as far as the store offers) when it resolves, absent when it throws. */
  write(sessionId: string, fileName: string, body: AsyncIterable<Buffer>, signal?: AbortSignal): Promise<void>;
  /**
   * The part's bytes. `maxBytes`: a store may stop reading there (the directory store does); the
   * caller still counts, as a remote store reads on to the end of its answer.
   */
  read(sessionId: string, fileName: string, signal?: AbortSignal, maxBytes?: number): AsyncIterable<Buffer>;
  /** Whether the part is there now (a part written may be removed by offline gc before it is recorded). */
  has(sessionId: string, fileName: string): Promise<boolean>;
  remove(sessionId: string, fileName: string): Promise<void>;
  removeSession(sessionId: string): Promise<void>;
}

/** One part of a multipart session, as the completion worker assembles it. */
export interface AssemblyPart {
  readonly partNumber: number;
  /** Its object under `uploads/<session>/`. */
  readonly fileName: string;
  readonly sizeBytes: number;
  /** The sha256 it was received with; the assembly re-checks it. */
  readonly sha256: string;
}

export interface TreeEntry {
  readonly name: string;
  readonly isDirectory: boolean;
  readonly sizeBytes: number;
}

/** What a `StoreTree.read` answer said of the object it read (filled by the store). */
export interface ReadHead {
  /** The object's version (S3: its ETag, unquoted); unset on stores without versions. */
  version?: string | undefined;
}

/** The object a caller read and judged, which a `StoreTree.move` must still find there. */
export interface ExpectedObject {
  readonly sha256: string;
  readonly sizeBytes: number;
  /** `ReadHead.version` of that read (S3). */
  readonly version?: string | undefined;
}

/** Name-level access for offline maintenance (scrub, gc); paths are relative to the store root. */
export interface StoreTree {
  /** Where the store is, for messages: a directory or a base URL. */
  readonly location: string;
  /** Entries of a directory; `[]` when it does not exist. */
  list(dir: string): Promise<TreeEntry[]>;
  /**
   * The file's bytes. The directory store reads a name that holds no regular file (a named pipe, a
   * link) as none. With `head`, a store whose objects have versions (S3) sets `head.version` (the
   * ETag the answer named) before the first chunk, so a move can be tied to the bytes read.
   */
  read(file: string, head?: ReadHead): AsyncIterable<Buffer>;
  /** Removes a file or a whole directory; a missing one is fine. */
  remove(target: string): Promise<void>;
  /**
   * Renames `from` to `to`. With `expected` (the size and sha256 of the bytes the caller read there),
   * a store that copies through us (the static-HTTP store without MOVE) checks the copy as it passes
   * and fails `stored_bytes_mismatch` on other bytes, writing nothing under `to` and leaving `from`;
   * the S3 store, given the `version` its read named (`ReadHead`), copies and deletes only while
   * `from` is still that object, else `stored_bytes_mismatch` with `from` left (s3-tree.ts
   * moveObject says what window is left on a server without conditional DELETE); a rename (a
   * directory, MOVE) moves the file as it is.
   */
  move(from: string, to: string, expected?: ExpectedObject): Promise<void>;
  /**
   * Object stores only (S3): uploads begun and never completed nor aborted (a process killed
   * mid-upload, a cut link). Invisible to listings and readers, but they hold space until aborted.
   */
  incompleteUploads?(): Promise<Array<{ readonly name: string; abort(): Promise<void> }>>;
}

export interface ArtifactStore {
  readonly kind: 'fs' | 'http' | 's3';
  /** A directory or a base URL, for logs and messages. */
  readonly location: string;
  readonly storageId: string;
  readonly writable: boolean;
  stage(body: AsyncIterable<Uint8Array>, options: StageOptions): Promise<StagedBlob>;
  /**
   * Opens a published blob; `not_found` when it is absent. `ranges` are the byte ranges the caller
   * will read, in order: the HTTP store starts the first upstream request here, so an unreachable
   * store fails before any response header is sent.
   */
  openBlob(sha256: string, ranges?: readonly ByteRange[]): Promise<BlobReader>;
  /**
   * Optional (a store with a blob cache in memory): a reader at once when the blob is held there,
   * else undefined (then `openBlob`).
   */
  cachedBlob?(sha256: string): BlobReader | undefined;
  hasBlob(sha256: string): Promise<boolean>;
  /** Counts since open (for metrics). */
  uploadStats(): UploadStats;
  readonly parts: PartStore;
  /**
   * Optional (the S3 store): stages the concatenation of a session's parts with server-side copies
   * (no upload of the bytes), with the checks of `stage()` (each part's sha256, the whole's size and
   * sha256). Undefined when it cannot (parts below the server's minimum copy part size, no
   * UploadPartCopy): the caller then streams the parts through `stage()`.
   */
  assembleParts?(
    sessionId: string,
    parts: readonly AssemblyPart[],
    options: StageOptions,
  ): Promise<StagedBlob | undefined>;
  readonly tree: StoreTree;
  /**
   * Optional (any store opened by a separate worker): removes what earlier workers left staged in
   * tmp/worker/. Called by the worker that takes the worker lock, so nothing of its own is in progress.
   */
  clearStaging?(): Promise<void>;
  /** Releases connections (HTTP store); nothing to do for the filesystem store. */
  close(): Promise<void>;
}

/**
 * A store as its opener returns it, with the object that holds its `storage-id`. A restore target
 * (opened with `restoreAs`) has bound nothing yet: the restore checks the root is empty, writes
 * every blob, and writes this object last, in the same step as the database (backup/restore.ts).
 */
export interface OpenedArtifactStore extends ArtifactStore {
  readonly identity: IdentityObject;
}
