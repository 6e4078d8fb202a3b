/**
 * Which gateways may answer a request, from its method and raw path alone (pure). Only the byte
 * reads of DESIGN.md ("content reads") may go to a reader; everything else stays on the writer.
 * The path classified is the one the gateway will route, from the gateway's own parse of the target
 * (`parseRequestTarget`: `..` and `%2e%2e` segments resolved, `\` read as `/`), while the target
 * is forwarded as received: classified as written, `…/packages/x/../content` would be a content
 * read to the router and another route on the reader it picked, and an apt file name of
 * `..\..\…\console\` the console. The path is matched segment by segment without decoding, so
 * `%2F` inside a name stays inside its segment, exactly as the gateways' route table sees it.
 */

import { parseRequestTarget } from '../server/request-path.ts';

/** `content-read`: any healthy gateway. `write`: a mutating method or `/console/`. `writer`: the rest. */
export type RequestClass = 'content-read' | 'write' | 'writer';

const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** `.` or `%2e` (any case): a segment the gateways' URL parser drops. */
const isDot = (s: string): boolean =>
  s === '.' || (s.length === 3 && s[0] === '%' && s[1] === '2' && (s[2] === 'e' || s[2] === 'E'));

/**
 * Segment shapes after `/api/v1/repositories/{repo}/` of the content-read routes: the three
 * `…/content` routes and a package version's flat apt path `packages/{name}/{version}/apt/{file}`.
 * A `.` segment (apt asks for `…/apt/./Packages`) is dropped first, as the gateways' URL parser does.
 * `raw` is the path after its leading `/`, split on `/`. The reference form; `isContentReadPath`
 * gives the same answer without splitting.
 */
export function isContentReadSegments(raw: readonly string[]): boolean {
  const segments = raw.filter((s) => !isDot(s));
  // Stryker disable next-line ConditionalExpression: equivalent: with fewer segments no route shape below matches either (→ true is killed)
  if (segments.length < 7) return false;
  if (segments[0] !== 'api' || segments[1] !== 'v1' || segments[2] !== 'repositories') return false;
  if (segments.some((s) => s.length === 0)) return false;
  const rest = segments.slice(4);
  if (rest.length === 5 && rest[0] === 'packages' && rest[3] === 'apt') return true;
  if (rest.at(-1) !== 'content') return false;
  if (rest.length === 3) return rest[0] === 'artifacts';
  if (rest.length === 4) return rest[0] === 'packages';
  if (rest.length === 6) return rest[0] === 'packages' && rest[3] === 'assets';
  return false;
}

const PREFIX = '/api/v1/repositories/';
/** Start and end of the repository segment and of up to 6 after it (reused: classification is synchronous). */
const bounds = new Int32Array(14);

/**
 * `isContentReadSegments(path.slice(1).split('/'))` for a path that starts with `/` (false for any
 * other), by scanning:
 * this runs for every proxied request, and a split of a fresh string costs more than the rest of
 * the classification. A path with a possible dot segment takes the reference form.
 */
export function isContentReadPath(path: string): boolean {
  // Stryker disable next-line ConditionalExpression,StringLiteral: equivalent: the reference form answers every path the same (the property tests hold the two equal; → false is killed)
  if (path.includes('/.') || path.includes('%2e') || path.includes('%2E'))
    return path.startsWith('/') && isContentReadSegments(path.slice(1).split('/'));
  if (!path.startsWith(PREFIX)) return false;
  let count = 0;
  let pos = PREFIX.length;
  for (;;) {
    const slash = path.indexOf('/', pos);
    const end = slash === -1 ? path.length : slash;
    // An empty segment (`//`, a trailing `/`), or more segments than any content route has.
    // Stryker disable next-line ConditionalExpression: equivalent: past 7 the writes to bounds are dropped and no shape matches (the empty-segment check is killed)
    if (end === pos || count === 7) return false;
    bounds[2 * count] = pos;
    bounds[2 * count + 1] = end;
    count++;
    if (slash === -1) break;
    pos = slash + 1;
  }
  // Segment `k` after the repository is `word`.
  const at = (k: number, word: string) =>
    bounds[2 * k + 3]! - bounds[2 * k + 2]! === word.length && path.startsWith(word, bounds[2 * k + 2]);
  const rest = count - 1;
  // Stryker disable next-line ConditionalExpression: equivalent: fewer than 3 segments after the repository match no shape below (→ true is killed)
  if (rest < 3) return false;
  if (rest === 5 && at(0, 'packages') && at(3, 'apt')) return true;
  if (!at(rest - 1, 'content')) return false;
  if (rest === 3) return at(0, 'artifacts');
  if (rest === 4) return at(0, 'packages');
  if (rest === 6) return at(0, 'packages') && at(3, 'assets');
  return false;
}

export function classifyRequest(method: string, rawUrl: string): RequestClass {
  // node:http gives methods upper-case already.
  // Stryker disable next-line ConditionalExpression,LogicalOperator,StringLiteral: equivalent: a fast path for what node:http sends (→ true is killed)
  const upper = method === 'GET' || method === 'HEAD' ? method : method.toUpperCase();
  if (!READ_METHODS.has(upper)) return 'write';
  const parsed = parseRequestTarget(rawUrl);
  // No URL: the writer answers it 400 `invalid_request`, as any gateway would.
  if (parsed === undefined) return 'writer';
  const path = typeof parsed === 'string' ? parsed : parsed.pathname;
  if (path === '/console' || path.startsWith('/console/')) return 'write';
  // The absolute form (a proxy's request line) stays on the writer, which routes every path.
  if ((upper === 'GET' || upper === 'HEAD') && rawUrl.charCodeAt(0) === 47 /* '/' */ && isContentReadPath(path))
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
