/**
 * The path of a request target without the WHATWG URL parser when that parser would return it
 * unchanged: an origin-form target whose path has only characters a path keeps as they are and no
 * dot segment. Anything else (percent-escapes, backslashes, `//` first, `.`/`..`, absolute form,
 * characters the parser escapes) is left to `new URL`, so the answer is the same either way; a
 * small request then builds no URL object unless a handler asks for the query.
 */
const SIMPLE_PATH = /^\/(?!\/)[A-Za-z0-9._~!$&'()*+,;=:@/-]*$/;
const DOT_SEGMENT = /(?:^|\/)\.\.?(?:\/|$)/;

/** The pathname `new URL(target, base).pathname` would give, or undefined where only the parser can tell. */
export function simplePathname(target: string): string | undefined {
  const query = target.indexOf('?');
  const path = query < 0 ? target : target.slice(0, query);
  if (!SIMPLE_PATH.test(path) || DOT_SEGMENT.test(path)) return undefined;
  return path;
}

/** What a request target is resolved against: only its path (and query) are ever read. */
export const TARGET_BASE = 'http://gateway.invalid';

/**
 * A request target as the gateway routes it: its pathname when `simplePathname` can tell it, else
 * the URL the WHATWG parser makes of it (whose `pathname` is the routed one: `.`, `..`, `%2e%2e`
 * segments resolved, `\` read as `/`), or undefined when it is no URL (400 `invalid_request`).
 * The router classifies a request by the same answer (proxy/router/route-class.ts), so a path
 * cannot be one route to the router and another to the gateway it sends it to.
 */
export function parseRequestTarget(target: string): string | URL | undefined {
  const simple = simplePathname(target);
  if (simple !== undefined) return simple;
  try {
    return new URL(target, TARGET_BASE);
  } catch {
    return undefined;
  }
}
