/**
 * The request method as logs and spans may name it. A client picks its method: node:http's HTTP/1.1
 * parser takes known methods only, but an HTTP/2 `:method` is any token, as long as the header list
 * allows (about 20 KB). Copied as it is, it would be the client's to size every line and span it
 * lands in; OpenTelemetry's HTTP semantic conventions name such a method `_OTHER` (and a span of
 * it `HTTP`), and so do the logs here.
 */

/** RFC 9110's methods and PATCH (RFC 5789): the set the semantic conventions know by default. */
const KNOWN_METHODS: ReadonlySet<string> = new Set([
  'CONNECT',
  'DELETE',
  'GET',
  'HEAD',
  'OPTIONS',
  'PATCH',
  'POST',
  'PUT',
  'TRACE',
]);

export const OTHER_METHOD = '_OTHER';

/** `method` when it is a known one (case-sensitive, as methods are), else `_OTHER`. */
export function knownMethod(method: string | undefined): string {
  return method !== undefined && KNOWN_METHODS.has(method) ? method : OTHER_METHOD;
}

/** What a span's name begins with: the known method, or `HTTP` for any other. */
export function spanMethod(method: string | undefined): string {
  const known = knownMethod(method);
  return known === OTHER_METHOD ? 'HTTP' : known;
}
