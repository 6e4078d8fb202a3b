/**
 * Names a remote store's listing gives (the static store's JSON autoindex, an S3 listing) are
 * joined onto the listed directory and then read, moved or deleted by gc, scrub and backup. A name
 * that is not one plain path segment (`..`, `.`, empty, with a `/` or a NUL) would address another
 * object than the one listed: `tmp/..` is the store's root to nginx, which normalizes the path of a
 * DELETE before it removes the directory it names. Real servers never list such names; a listing
 * that does comes from a broken or hostile store (or something between it and us), and is refused
 * whole (502 `upstream_unreachable`) rather than acted on.
 */
import { StorageError } from '../errors.ts';

export function isPlainName(name: string): boolean {
  return name !== '' && name !== '.' && name !== '..' && !name.includes('/') && !name.includes('\0');
}

/** `name` when it is one plain path segment; otherwise the listing is refused. */
export function listedName(name: string, what: string): string {
  if (isPlainName(name)) return name;
  throw new StorageError(
    'upstream_unreachable',
    `The artifact store's listing of ${what} names an entry that is not a plain name (${JSON.stringify(name.slice(0, 200))}); nothing was done with it.`,
  );
}
