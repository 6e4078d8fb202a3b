/**
 * More than one `Authorization` line in a request head: Node's parser keeps the first in
 * `req.headers` and drops the rest, so a proxy in front and the gateway behind it could each act on
 * a different one. Gateway and router refuse such a request (400 `duplicate_authorization`) instead.
 */
const NAME = 'authorization';

/** True when the raw head (`req.rawHeaders`: name, value, name, value, …) names Authorization twice or more. */
export function hasDuplicateAuthorization(rawHeaders: readonly string[]): boolean {
  let seen = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    if (name.length !== NAME.length || name.toLowerCase() !== NAME) continue;
    if (seen) return true;
    seen = true;
  }
  return false;
}
