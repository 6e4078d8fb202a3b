/**
 * Which gateways may answer a request, from its method and raw path alone (pure). Only the byte
 * reads of DESIGN.md ("content reads") may go to a reader; everything else stays on the writer.
 * The path is matched segment by segment without decoding, so `%2F` inside a name stays inside
 * its segment, exactly as the gateways' route table sees it.
 */

/** `content-read`: any healthy gateway. `write`: a mutating method or `/console/`. `writer`: the rest. */
export type RequestClass = 'content-read' | 'write' | 'writer';

const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Segment shapes after `/api/v1/repositories/{repo}/` of the content-read routes: the three
 * `…/content` routes and a package version's flat apt path `packages/{name}/{version}/apt/{file}`.
 * A `.` segment (apt asks for `…/apt/./Packages`) is dropped first, as the gateways' URL parser does.
 */
function isContentReadPath(raw: readonly string[]): boolean {
  const segments = raw.filter((s) => s !== '.' && s.toLowerCase() !== '%2e');
  if (segments.length < 7 || segments[0] !== 'api' || segments[1] !== 'v1' || segments[2] !== 'repositories')
    return false;
  if (segments.some((s) => s.length === 0)) return false;
  const rest = segments.slice(4);
  if (rest.length === 5 && rest[0] === 'packages' && rest[3] === 'apt') return true;
  if (rest.at(-1) !== 'content') return false;
  if (rest.length === 3) return rest[0] === 'artifacts';
  if (rest.length === 4) return rest[0] === 'packages';
  if (rest.length === 6) return rest[0] === 'packages' && rest[3] === 'assets';
  return false;
}

export function classifyRequest(method: string, rawUrl: string): RequestClass {
  const upper = method.toUpperCase();
  const path = rawUrl.split('?', 1)[0]!.split('#', 1)[0]!;
  if (!READ_METHODS.has(upper)) return 'write';
  if (path === '/console' || path.startsWith('/console/')) return 'write';
  if ((upper === 'GET' || upper === 'HEAD') && path.startsWith('/') && isContentReadPath(path.slice(1).split('/')))
    return 'content-read';
  return 'writer';
}

/** GET and HEAD without a body may be sent again to another backend if the first fails before answering. */
export function isRetryable(
  method: string,
  headers: { 'content-length'?: string | undefined; 'transfer-encoding'?: string | undefined },
): boolean {
  const upper = method.toUpperCase();
  if (upper !== 'GET' && upper !== 'HEAD') return false;
  if (headers['transfer-encoding'] !== undefined) return false;
  return headers['content-length'] === undefined || headers['content-length'] === '0';
}
