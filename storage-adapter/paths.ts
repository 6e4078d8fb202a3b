/**
 * The one containment helper: every path under the storage root is built here, and nothing that
 * resolves outside the root (`..`, absolute paths, NUL bytes) is ever returned.
 */
import path from 'node:path';
import { StorageError } from './errors.ts';

const SHA256_HEX = /^[0-9a-f]{64}$/;

export function isSha256Hex(value: string): boolean {
  return SHA256_HEX.test(value);
}

/** True when `candidate` is `root` itself or lies below it (both absolute). */
export function isPathInsideDirectory(root: string, candidate: string): boolean {
  const relative = path.relative(root, candidate);
  return relative === '' || (!relative.startsWith('..') && !path.isAbsolute(relative));
}

/**
 * Joins `relative` onto the absolute `root` and checks the result stays inside it. Throws
 * `invalid_request` for NUL bytes, absolute inputs and anything escaping the root.
 */
export function resolveInsideRoot(root: string, relative: string): string {
  if (!path.isAbsolute(root)) throw new StorageError('invalid_request', 'The storage root must be an absolute path.');
  if (relative.includes('\0') || path.isAbsolute(relative) || relative === '') {
    throw new StorageError('invalid_request', 'The storage path is not a relative path inside the root.');
  }
  const resolved = path.resolve(root, relative);
  if (!isPathInsideDirectory(root, resolved) || resolved === path.resolve(root)) {
    throw new StorageError('invalid_request', 'The storage path escapes the storage root.');
  }
  return resolved;
}

/** `blobs/sha256/ab/cd/<hex>` for a lowercase hex sha256. */
export function blobRelativePath(sha256Hex: string): string {
  if (!isSha256Hex(sha256Hex)) throw new StorageError('invalid_request', 'A blob id must be 64 lowercase hex digits.');
  return path.join('blobs', 'sha256', sha256Hex.slice(0, 2), sha256Hex.slice(2, 4), sha256Hex);
}

export const STORAGE_ID_FILE = 'storage-id';
export const TMP_DIR = 'tmp';
/**
 * Under tmp/: where a separate completion worker (ARKVORY_ROLE=worker) stages its assemblies, which
 * a writer leaves alone and the worker that takes the worker lock empties (`clearStaging`).
 */
export const WORKER_STAGING_DIR = 'worker';

/**
 * Where a remote store's process stages whole uploads: a separate completion worker under
 * tmp/worker/, which it alone empties; a writer with a staging directory of its own (`ownStaging`,
 * its worker index's) under it, which its replacement empties; anyone else in tmp/ itself.
 */
export function stagingDirOf(role: string, ownStaging: string | undefined): string {
  if (role === 'worker') return `${TMP_DIR}/${WORKER_STAGING_DIR}`;
  if (role === 'writer' && ownStaging !== undefined) return `${TMP_DIR}/${ownStaging}`;
  return TMP_DIR;
}
export const BLOBS_DIR = path.join('blobs', 'sha256');
export const UPLOADS_DIR = 'uploads';

const SESSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** `uploads/<session>` relative to the store root; `not_found` for anything but a session UUID. */
export function sessionRelativeDir(sessionId: string): string {
  if (!SESSION_ID.test(sessionId)) throw new StorageError('not_found', 'No such upload.');
  return path.posix.join(UPLOADS_DIR, sessionId);
}

/** The multipart session's directory under `root`, for the stores that keep parts as files. */
export function sessionDir(root: string, sessionId: string): string {
  return resolveInsideRoot(root, sessionRelativeDir(sessionId));
}
