import path from 'node:path';
import { StorageError } from '../errors.ts';
import { resolveInsideRoot, UPLOADS_DIR } from '../paths.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** `uploads/<session>` relative to the store root; `not_found` for anything but a session UUID. */
export function sessionRelativeDir(sessionId: string): string {
  if (!UUID.test(sessionId)) throw new StorageError('not_found', 'No such upload.');
  return path.posix.join(UPLOADS_DIR, sessionId);
}

export function sessionDir(root: string, sessionId: string): string {
  return resolveInsideRoot(root, sessionRelativeDir(sessionId));
}
