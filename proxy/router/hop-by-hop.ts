/**
 * Hop-by-hop headers (RFC 9110 §7.6.1) on raw header lists (`message.rawHeaders`: name, value,
 * name, value…, names as the peer spelled them, duplicates in order). The router copies a list in
 * one pass and hands it to `http.request({headers: list})` / `res.writeHead(status, list)`, node:http's
 * fast path: no header object built, no name lower-cased unless its length matches a name looked for.
 */

/**
 * Headers never dropped for being named in `Connection` (a sender must not list a header meant for
 * every recipient, RFC 9110 §7.6.1; nginx drops no header for being listed, Envoy only `TE`):
 * - the framing ones: a body whose length went unsaid would run on into the next request on the
 *   kept-alive upstream connection (request smuggling, answers handed to the wrong clients);
 * - `Host`: the target itself. Dropped, a GET reached the gateway with the gateway's own address
 *   as its Host (undici fills one in) and any other request with none, which node:http answers
 *   with a bare 400 the gateway never sees, logs or counts;
 * - the credentials (`Authorization`, `Cookie`): dropped, the request reached the gateway as a
 *   request of nobody, where no other proxy an operator would put here loses them;
 * - what says which answer is wanted (`Range` and the conditionals) and what the body is
 *   (`Content-Type`, `Content-Encoding`, `Content-Digest`, `Repr-Digest`): dropped, the gateway
 *   answered another request than the one sent, and as a success: a whole body for a range, a
 *   range of a changed object past the `If-Range` that guarded a resume, an upload stored unchecked.
 */
const NEVER_NAMED = new Set([
  'content-length',
  'transfer-encoding',
  'host',
  'authorization',
  'cookie',
  'range',
  'if-range',
  'if-match',
  'if-none-match',
  'if-modified-since',
  'if-unmodified-since',
  'content-type',
  'content-encoding',
  'content-digest',
  'repr-digest',
]);

/**
 * Names a `Connection` header lists beyond `keep-alive`/`close` and `NEVER_NAMED` (lower-case), or
 * undefined: the usual case.
 */
export function connectionNamed(connection: string | string[] | undefined): ReadonlySet<string> | undefined {
  if (connection === undefined) return undefined;
  const text = typeof connection === 'string' ? connection : connection.join(',');
  // Most peers send `Connection: keep-alive` (or `close`): nothing to build then.
  // Stryker disable next-line ConditionalExpression,LogicalOperator,StringLiteral: equivalent: a fast path, the loop finds no names in these either (→ true is killed)
  if (text === 'keep-alive' || text === 'close') return undefined;
  let named: Set<string> | undefined;
  for (const part of text.split(',')) {
    const name = part.trim().toLowerCase();
    // Stryker disable next-line ConditionalExpression,StringLiteral: equivalent: both are dropped anyway, named or not (→ true is killed)
    if (name === '' || name === 'keep-alive' || name === 'close' || NEVER_NAMED.has(name)) continue;
    (named ??= new Set()).add(name);
  }
  return named;
}

/** `name` (any case) equals `lower`, which has the same length. */
// Stryker disable next-line ConditionalExpression,LogicalOperator: equivalent: the exact match only spares the lower-casing (→ true is killed)
const is = (name: string, lower: string): boolean => name === lower || name.toLowerCase() === lower;

/** What the router does with a request header. */
export const RequestHeader = {
  Keep: 0,
  /** Hop-by-hop: never forwarded. */
  Drop: 1,
  /** Set by the router itself (X-Forwarded-*, Forwarded, x-request-id): the client's copy is not forwarded as is. */
  Forwarding: 2,
} as const;
export type RequestHeader = (typeof RequestHeader)[keyof typeof RequestHeader];

/**
 * A request header's fate. Hop-by-hop: `Connection`, `Keep-Alive`, `Proxy-Connection`,
 * `Proxy-Authorization`, `TE`, `Trailer`, `Upgrade`, and `Expect` (the router asks the gateway for
 * `100 Continue` itself).
 */
export function requestHeaderKind(name: string): RequestHeader {
  switch (name.length) {
    case 2:
      return is(name, 'te') ? RequestHeader.Drop : RequestHeader.Keep;
    case 6:
      return is(name, 'expect') ? RequestHeader.Drop : RequestHeader.Keep;
    case 7:
      return is(name, 'upgrade') || is(name, 'trailer') ? RequestHeader.Drop : RequestHeader.Keep;
    case 9:
      return is(name, 'forwarded') ? RequestHeader.Forwarding : RequestHeader.Keep;
    case 10:
      return is(name, 'connection') || is(name, 'keep-alive') ? RequestHeader.Drop : RequestHeader.Keep;
    case 12:
      return is(name, 'x-request-id') ? RequestHeader.Forwarding : RequestHeader.Keep;
    case 15:
      return is(name, 'x-forwarded-for') ? RequestHeader.Forwarding : RequestHeader.Keep;
    case 16:
      if (is(name, 'x-forwarded-host')) return RequestHeader.Forwarding;
      return is(name, 'proxy-connection') ? RequestHeader.Drop : RequestHeader.Keep;
    case 17:
      return is(name, 'x-forwarded-proto') ? RequestHeader.Forwarding : RequestHeader.Keep;
    case 18:
      return is(name, 'x-forwarded-prefix') ? RequestHeader.Forwarding : RequestHeader.Keep;
    case 19:
      return is(name, 'proxy-authorization') ? RequestHeader.Drop : RequestHeader.Keep;
    default:
      return RequestHeader.Keep;
  }
}

/**
 * A response header the router's own connection decides (`Connection`, `Keep-Alive`,
 * `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, `Trailer`, `TE`): never relayed.
 */
export function isHopByHopResponse(name: string): boolean {
  switch (name.length) {
    case 2:
      return is(name, 'te');
    case 7:
      return is(name, 'upgrade') || is(name, 'trailer');
    case 10:
      return is(name, 'connection') || is(name, 'keep-alive');
    case 16:
      return is(name, 'proxy-connection');
    case 17:
      return is(name, 'transfer-encoding');
    default:
      return false;
  }
}

/** `name` is `x-request-id` in any case. */
// Stryker disable next-line ConditionalExpression: equivalent: the length only spares the comparison (`||` instead of `&&` is killed)
export const isRequestId = (name: string): boolean => name.length === 12 && is(name, 'x-request-id');

/**
 * `name` is `Strict-Transport-Security` in any case: a property of the listener the client reached
 * (its TLS, its ARKVORY_TLS_HSTS), never relayed from a gateway: a router on plain HTTP must not send
 * it (RFC 6797 §7.2), and one on TLS sends its own (proxy/server/listener-headers.ts) or none.
 */
// Stryker disable next-line ConditionalExpression: equivalent: the length only spares the comparison (`||` instead of `&&` is killed)
export const isListenerOwned = (name: string): boolean => name.length === 25 && is(name, 'strict-transport-security');

/**
 * The end-to-end part of a response head, as a new raw list: hop-by-hop headers, the listener's own
 * (`isListenerOwned`) and those the `Connection` header (`connection`, from the parsed head) names are dropped, everything else is
 * kept in order with its original spelling, duplicates (two `Set-Cookie`) included. A `requestId`
 * given replaces the gateway's `x-request-id` (which echoes the router's id, not the client's);
 * undefined keeps the gateway's.
 */
export function responseHeaderList(
  rawHeaders: readonly string[],
  connection: string | string[] | undefined,
  requestId: string | undefined,
): string[] {
  const named = connectionNamed(connection);
  const out: string[] = [];
  const replaceId = requestId !== undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    if (isHopByHopResponse(name) || isListenerOwned(name)) continue;
    if (named?.has(name.toLowerCase())) continue;
    if (replaceId && isRequestId(name)) continue;
    out.push(name, rawHeaders[i + 1]!);
  }
  if (replaceId) out.push('x-request-id', requestId);
  return out;
}
