/**
 * Forwarded client addresses, pure (no I/O): which peers are trusted proxies, what a router adds
 * to `X-Forwarded-For`/`Forwarded`, and which address a gateway should use as the client's.
 *
 * Trust model: only the right end of `X-Forwarded-For` (or, without it, of `Forwarded`'s `for=`
 * nodes) can be believed, and only as far as every hop that appended to it is a configured proxy
 * (ARKVORY_TRUSTED_PROXIES). Anything a client sends itself sits further left and is never read
 * past the first untrusted hop.
 */
import { BlockList, isIP } from 'node:net';
import { canonicalIp } from '../../lib/ip-address.ts';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { connectionNamed, RequestHeader, requestHeaderKind } from './hop-by-hop.ts';

/** A compiled ARKVORY_TRUSTED_PROXIES list. */
export interface TrustedProxies {
  readonly entries: readonly string[];
  /** Whether `address` (any form `normalizeAddress` reads) is a trusted proxy's; never an absent one (a closed socket's). */
  isTrusted(address: string | undefined): boolean;
}

const NONE: TrustedProxies = { entries: [], isTrusted: () => false };

/**
 * The canonical text of an address (lib/ip-address.ts: `::ffff:10.0.0.1` → `10.0.0.1`,
 * `2001:DB8:0::1` → `2001:db8::1`), also from `[::1]`, `[::1]:80`, `10.0.0.1:5000` or a quoted
 * `Forwarded` node; anything else (no address at all included: a closed socket's) → undefined.
 */
export function normalizeAddress(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  let text = raw.trim();
  if (text.startsWith('"') && text.endsWith('"')) text = text.slice(1, -1);
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(text);
  if (bracketed) text = bracketed[1]!;
  else if (/^[0-9.]+:\d+$/.test(text)) text = text.slice(0, text.lastIndexOf(':'));
  return canonicalIp(text);
}

/**
 * Parses a comma-separated list of IP addresses and CIDR blocks (`10.0.0.0/8`, `::1`,
 * `fd00::/8`). Returns the problem text on the first bad entry.
 */
export function parseTrustedProxies(
  text: string | undefined,
): { ok: true; value: string[] } | { ok: false; problem: string } {
  if (text === undefined || text.trim() === '' || text.trim() === 'none') return { ok: true, value: [] };
  const entries: string[] = [];
  for (const part of text.split(',')) {
    const entry = part.trim();
    const match = /^([^/]+)(?:\/(\d{1,3}))?$/.exec(entry);
    const address = match ? normalizeAddress(match[1]!) : undefined;
    const family = address ? isIP(address) : 0;
    const prefix = match?.[2] === undefined ? undefined : Number(match[2]);
    if (!address || (prefix ?? 0) > (family === 4 ? 32 : 128)) {
      return {
        ok: false,
        problem: `expected comma-separated IP addresses or CIDR blocks (10.0.0.0/8, ::1), or none, got ${JSON.stringify(entry)}`,
      };
    }
    entries.push(prefix === undefined ? address : `${address}/${prefix}`);
  }
  return { ok: true, value: entries };
}

/** Compiles validated entries (from `parseTrustedProxies`, e.g. `config.trustedProxies`). */
export function createTrustedProxies(entries: readonly string[]): TrustedProxies {
  // Stryker disable next-line ConditionalExpression: equivalent: an empty BlockList trusts no one either (NONE skips reading the address)
  if (entries.length === 0) return NONE;
  const list = new BlockList();
  for (const entry of entries) {
    const [address, prefix] = entry.split('/') as [string, string | undefined];
    const type = isIP(address) === 4 ? 'ipv4' : 'ipv6';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  return {
    entries: [...entries],
    isTrusted(raw) {
      const address = normalizeAddress(raw);
      if (!address) return false;
      // Stryker disable next-line StringLiteral: equivalent: Node's BlockList checks an IPv6 address given an empty family as IPv6
      return list.check(address, isIP(address) === 4 ? 'ipv4' : 'ipv6');
    },
  };
}

function headerText(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

/** `X-Forwarded-For`'s entries in order; empty list elements are no hops (RFC 9110, section 5.6.1). */
function forwardedForHops(value: string | string[] | undefined): string[] {
  // Stryker disable next-line StringLiteral: equivalent: a hop that is no address stops the walk where no header would
  return (headerText(value) ?? '')
    .split(',')
    .map((h) => h.trim())
    .filter((h) => h.length > 0);
}

/** `text` split at each `separator` outside a quoted string (RFC 9110 `quoted-string`, `\` escapes). */
function splitOutsideQuotes(text: string, separator: ',' | ';'): string[] {
  const parts: string[] = [];
  let start = 0;
  let quoted = false;
  // Stryker disable next-line EqualityOperator: equivalent: one more turn reads past the end (undefined), which matches no character
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
    } else if (c === '"') quoted = true;
    else if (c === separator) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}

/** A parameter value as sent: a token, or a quoted string unquoted; undefined for an unclosed quote. */
function parameterValue(raw: string): string | undefined {
  if (!raw.startsWith('"')) return raw;
  if (raw.length < 2 || !raw.endsWith('"')) return undefined;
  return raw.slice(1, -1).replace(/\\(.)/g, '$1');
}

/**
 * The `for=` node of each element of `Forwarded` (RFC 7239), in order, unquoted
 * (`for="[2001:db8::1]:4711"` gives `[2001:db8::1]:4711`). An element that names no node, names
 * two or does not parse gives `unknown` (the RFC's word for a hop it cannot name); like an
 * obfuscated node (`_hidden`) it reads as no address, so a walk stops there, as at a malformed
 * `X-Forwarded-For` entry.
 */
export function forwardedForNodes(value: string | string[] | undefined): string[] {
  const nodes: string[] = [];
  for (const element of splitOutsideQuotes(headerText(value) ?? '', ',')) {
    if (element.trim() === '') continue;
    const found: Array<string | undefined> = [];
    for (const pair of splitOutsideQuotes(element, ';')) {
      const eq = pair.indexOf('=');
      // A pair without `=` names nothing.
      if (eq !== -1 && pair.slice(0, eq).trim().toLowerCase() === 'for')
        found.push(parameterValue(pair.slice(eq + 1).trim()));
    }
    nodes.push(found.length === 1 && found[0] !== undefined ? found[0] : 'unknown');
  }
  return nodes;
}

/**
 * The hops a request's forwarding headers name, nearest last: the entries of `X-Forwarded-For`, or,
 * from a request without it, the `for=` nodes of `Forwarded`; undefined when it sends neither.
 * `X-Forwarded-For` wins when both are present: every proxy shipped or documented here sets it (the
 * router sets both, naming the same hops), while a proxy that sets only one of them passes the
 * other on as its client wrote it, so a proxy that sets only `Forwarded` must drop the client's
 * `X-Forwarded-For` (docs/router.md).
 */
export function forwardingHops(headers: IncomingHttpHeaders): string[] | undefined {
  const xff = headers['x-forwarded-for'];
  if (xff !== undefined) return forwardedForHops(xff);
  const forwarded = headers.forwarded;
  return forwarded === undefined ? undefined : forwardedForNodes(forwarded);
}

/**
 * The client address along `hops` (nearest last): starts at the socket peer; while that hop is a
 * trusted proxy, steps one hop left. The first untrusted hop is the client. From an untrusted peer
 * this is the peer, whatever the hops say. A hop that is no address (malformed, obfuscated,
 * `unknown`) stops the walk at the proxy that passed it on.
 */
export function clientAddressAlong(
  remoteAddress: string | undefined,
  hops: readonly string[],
  trusted: TrustedProxies,
): string {
  const peer = normalizeAddress(remoteAddress) ?? remoteAddress ?? '';
  if (!trusted.isTrusted(peer)) return peer;
  let current = peer;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = normalizeAddress(hops[i]!);
    if (!hop) return current;
    current = hop;
    if (!trusted.isTrusted(hop)) return hop;
  }
  return current;
}

/** `clientAddressAlong` the entries of `X-Forwarded-For` alone. */
export function clientAddressFrom(
  remoteAddress: string | undefined,
  forwardedFor: string | string[] | undefined,
  trusted: TrustedProxies,
): string {
  return clientAddressAlong(remoteAddress, forwardedForHops(forwardedFor), trusted);
}

/**
 * The client address from the gateway's point of view, for rate limits and logs:
 * `clientAddressAlong` the request's `forwardingHops` (`X-Forwarded-For`, else `Forwarded`). With
 * no trusted proxies this is the socket peer, whatever the headers say.
 */
export function clientAddress(req: Pick<IncomingMessage, 'socket' | 'headers'>, trusted: TrustedProxies): string {
  // Stryker disable next-line ArrayDeclaration: equivalent: a hop that is no address stops the walk where no hop would
  return clientAddressAlong(req.socket.remoteAddress, forwardingHops(req.headers) ?? [], trusted);
}

/**
 * The `for=` nodes of a `Forwarded` value as `X-Forwarded-For` entries: an address as its canonical
 * text, any other node (`unknown`, `_hidden`, a quoted string) as `unknown`, which stops a walk
 * where the node would. Empty without a node.
 */
function forwardedAsForwardedFor(forwarded: string | undefined): string {
  return forwardedForNodes(forwarded)
    .map((node) => normalizeAddress(node) ?? 'unknown')
    .join(', ');
}

/**
 * The `name=` parameter of the last element of `Forwarded` (the sending proxy's own), as sent
 * (unquoted; undefined for an unclosed quote); undefined when that element has none. The first
 * such pair counts.
 */
function lastForwardedParameter(value: string | string[] | undefined, name: 'proto' | 'host'): string | undefined {
  const text = headerText(value);
  if (text === undefined) return undefined;
  const elements = splitOutsideQuotes(text, ',');
  for (const pair of splitOutsideQuotes(elements.at(-1)!, ';')) {
    const eq = pair.indexOf('=');
    // A pair without `=` names nothing.
    if (eq !== -1 && pair.slice(0, eq).trim().toLowerCase() === name) return parameterValue(pair.slice(eq + 1).trim());
  }
  return undefined;
}

/** A scheme a request can have arrived with. */
export type Scheme = 'http' | 'https';

/** `value` as a scheme when it is `http` or `https` (any case, blanks around), else undefined. */
function schemeOf(value: string | undefined): Scheme | undefined {
  const text = value?.trim().toLowerCase();
  return text === 'http' || text === 'https' ? text : undefined;
}

/** The scheme a request arrived with, and whether a trusted proxy said it (else it is the listener's own). */
export interface RequestScheme {
  readonly scheme: Scheme;
  readonly fromProxy: boolean;
}

/**
 * The scheme the client used, the one rule for everything that depends on it (the console cookie's
 * `Secure`, pre-signed links' origin, ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS): this listener's own,
 * unless the socket peer is a trusted proxy, which then says it: the last entry of its
 * `X-Forwarded-Proto` (the one it wrote itself; entries left of it come from hops further out), or,
 * when it sends none, the `proto=` of its own (the last) `Forwarded` element; that element's
 * `proto=http` wins over an `https` in X-Forwarded-Proto, which may be its client's, passed on. A
 * word other than `http`/`https` says nothing: the listener's scheme stands. Anyone else's headers
 * are ignored: a client must not pick its own cookie's `Secure` or the scheme of the links made for it.
 */
export function requestScheme(
  req: Pick<IncomingMessage, 'socket' | 'headers'>,
  trusted: TrustedProxies,
): RequestScheme {
  const socket = req.socket as (typeof req.socket & { encrypted?: boolean }) | null;
  const own: Scheme = socket?.encrypted === true ? 'https' : 'http';
  const said = trusted.isTrusted(socket?.remoteAddress) ? schemeSaidByProxy(req.headers) : undefined;
  return said === undefined ? { scheme: own, fromProxy: false } : { scheme: said, fromProxy: true };
}

/**
 * What a trusted proxy says its client used: the last entry of its `X-Forwarded-Proto` (the one it
 * wrote itself), or when it sends none, the `proto=` of its own (the last) `Forwarded` element; only
 * `http` or `https`, else nothing; `http` in that element wins. The gateway's `requestScheme` and
 * the router's forwarding headers both read it so.
 */
function schemeSaidByProxy(headers: IncomingHttpHeaders): Scheme | undefined {
  const forwarded = schemeOf(lastForwardedParameter(headers.forwarded, 'proto'));
  // A proxy that sets one of the two passes the other on as its client wrote it (HAProxy's
  // `option forwarded` leaves X-Forwarded-Proto, nginx leaves Forwarded): a client's `https` in the
  // one it does not set must not unsay the proxy's `http` in the other.
  if (forwarded === 'http') return 'http';
  const entries = (headerText(headers['x-forwarded-proto']) ?? '').split(',').filter((entry) => entry.trim() !== '');
  return entries.length > 0 ? schemeOf(entries.at(-1)) : forwarded;
}

/**
 * Whether `text` can stand as a URL's authority: a host name (letters, digits, `-`, dot-separated,
 * a trailing dot allowed), an IPv4 address or a bracketed IPv6 one, and an optional port; at most
 * 255 characters. No user info, path, blank or anything a URL would read otherwise.
 */
export function isAuthorityText(text: string): boolean {
  return (
    text.length <= 255 &&
    /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$/.test(
      text,
    )
  );
}

/** The last entry of `X-Forwarded-Host` (the one its sender wrote), trimmed; undefined without one. */
export function lastForwardedHostEntry(value: string | string[] | undefined): string | undefined {
  const last = (headerText(value) ?? '').split(',').pop()!.trim();
  return last === '' ? undefined : last;
}

/**
 * The host (and port) a trusted proxy says its client asked for, to name the origin of the links
 * made for it: the last entry of its `X-Forwarded-Host`, or its own (the last) `Forwarded`
 * element's `host=`. Only the socket peer's word when it is a trusted proxy, as for
 * `requestScheme`: a client must not choose the host of the links made for it. When the proxy sends
 * both and they differ (one of them its client's, passed on by a proxy that sets only the other),
 * neither is believed; nor is a value that is no plain authority (`isAuthorityText`). Undefined
 * then, and the request's own Host stands.
 */
export function forwardedHost(
  req: Pick<IncomingMessage, 'socket' | 'headers'>,
  trusted: TrustedProxies,
): string | undefined {
  if (!trusted.isTrusted(req.socket?.remoteAddress)) return undefined;
  const { headers } = req;
  const fromXfh = lastForwardedHostEntry(headers['x-forwarded-host']);
  const fromForwarded = lastForwardedParameter(headers.forwarded, 'host');
  if (fromXfh !== undefined && fromForwarded !== undefined && fromXfh.toLowerCase() !== fromForwarded.toLowerCase())
    return undefined;
  const host = fromXfh ?? fromForwarded;
  return host !== undefined && isAuthorityText(host) ? host : undefined;
}

/** The longest `X-Forwarded-Prefix` taken: a prefix is a few path segments. */
const MAX_FORWARDED_PREFIX_LENGTH = 256;

/**
 * The path prefix a trusted proxy publishes the gateway under (`X-Forwarded-Prefix: /arkvory`, set by
 * a proxy that strips it before the gateway), without a trailing slash; `''` for none. Only the socket
 * peer's word when it is a trusted proxy, as for `requestScheme`: a client must not choose the path
 * of the links made for it. One value only, segments of letters, digits and `-._~` (never `.` or
 * `..`), at most 256 characters; anything else (a list, a `//`, a query, an encoded byte) says
 * nothing and no prefix stands. `Forwarded` (RFC 7239) has no parameter for it.
 *
 * The prefix is never signed or checked by the gateway: it signs and checks the path it sees, which
 * the proxy reaches by stripping the prefix again, so only the link handed out carries it.
 */
export function forwardedPrefix(req: Pick<IncomingMessage, 'socket' | 'headers'>, trusted: TrustedProxies): string {
  const value = req.headers['x-forwarded-prefix'];
  if (typeof value !== 'string' || !trusted.isTrusted(req.socket?.remoteAddress)) return '';
  const text = value.trim();
  if (text.length > MAX_FORWARDED_PREFIX_LENGTH || !/^(?:\/[A-Za-z0-9._~-]+)*\/?$/.test(text)) return '';
  if (text.split('/').some((segment) => segment === '.' || segment === '..')) return '';
  return text.endsWith('/') ? text.slice(0, -1) : text;
}

function forwardedNode(address: string): string {
  return isIP(address) === 6 ? `"[${address}]"` : address;
}

function forwardedToken(value: string): string {
  return /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(value) ? value : `"${value.replace(/["\\]/g, '\\$&')}"`;
}

export interface ForwardingInput {
  /** The client's head as received (`req.rawHeaders`). */
  rawHeaders: readonly string[];
  /** The same head parsed (`req.headers`), for the few values read. */
  headers: IncomingHttpHeaders;
  remoteAddress: string | undefined;
  encrypted: boolean;
  trusted: TrustedProxies;
  /** The router's own id of the request (never the client's), sent as `x-request-id`. */
  requestId: string;
}

/** What is the same for every request of one client connection, worked out on its first. */
interface Hop {
  readonly remoteAddress: string | undefined;
  readonly encrypted: boolean;
  readonly trusted: TrustedProxies;
  /** The socket peer, normalized (`unknown` when it has none). */
  readonly peer: string;
  readonly fromProxy: boolean;
  /** `for=…` of `Forwarded`, IPv6 quoted. */
  readonly forNode: string;
  /** The last `Host` seen and the `Forwarded` element built from it (a connection keeps its Host). */
  host: string | undefined;
  element: string;
}

const HOP = Symbol('arkvory.router.hop');
/** Where a connection's `Hop` is kept: its socket. */
export type HopCache = { [HOP]?: Hop };

function hopFor(input: ForwardingInput, cache: HopCache | undefined): Hop {
  const known = cache?.[HOP];
  if (
    // Stryker disable next-line ConditionalExpression: equivalent: a cache miss builds the same hop again (each way a stale hop could be reused is killed)
    known !== undefined &&
    known.remoteAddress === input.remoteAddress &&
    known.encrypted === input.encrypted &&
    known.trusted === input.trusted
  )
    return known;
  const peer = normalizeAddress(input.remoteAddress) ?? 'unknown';
  const hop: Hop = {
    remoteAddress: input.remoteAddress,
    encrypted: input.encrypted,
    trusted: input.trusted,
    peer,
    fromProxy: input.trusted.isTrusted(peer),
    forNode: forwardedNode(peer),
    host: undefined,
    // Stryker disable next-line StringLiteral: equivalent: read only once `host` is set, with it
    element: '',
  };
  // Stryker disable next-line ConditionalExpression: equivalent: not keeping the hop only builds it again next time
  if (cache) cache[HOP] = hop;
  return hop;
}

/**
 * The head a router sends upstream, as a raw list for `http.request({headers})`: the client's own
 * headers in order and as spelled (duplicates included), minus hop-by-hop ones (and any named in
 * `Connection`), then `X-Forwarded-For`, `Forwarded`, `X-Forwarded-Proto`, `X-Forwarded-Host`, a
 * trusted proxy's `X-Forwarded-Prefix` and `x-request-id`. A peer that is a trusted proxy has its chain extended; from anyone else the
 * forwarding headers are replaced, so a client cannot plant an address. `Expect` is dropped: the
 * caller asks the gateway for `100 Continue` itself. `cache` (the client's socket) keeps what is
 * the same for every request of the connection.
 */
export function buildUpstreamHeaders(input: ForwardingInput, cache?: HopCache): string[] {
  const { headers, rawHeaders } = input;
  const hop = hopFor(input, cache);
  const named = connectionNamed(headers.connection);
  const out: string[] = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    if (requestHeaderKind(name) !== RequestHeader.Keep) continue;
    if (named?.has(name.toLowerCase())) continue;
    out.push(name, rawHeaders[i + 1]!);
  }
  const { fromProxy, peer } = hop;
  // As a gateway reads it (requestScheme): a proxy's last X-Forwarded-Proto entry, else its own
  // Forwarded element's proto=; anything but http/https leaves the router's own listener's scheme.
  const proto = (fromProxy && schemeSaidByProxy(headers)) || (input.encrypted ? 'https' : 'http');
  // A trusted proxy's word on the host is the entry it wrote itself (the last), as a gateway reads it
  // (forwardedHost): a whole list would reach the gateway as a Forwarded `host=` no entry matches.
  const host = (fromProxy && lastForwardedHostEntry(headers['x-forwarded-host'])) || headerText(headers.host);
  let element: string;
  // The element of a connection's Host is kept: building it again gives the same text.
  // Stryker disable next-line ConditionalExpression,BooleanLiteral: equivalent: a skipped or a proxy's (never stored) cached element is built again the same
  if (!fromProxy && host === hop.host && host !== undefined) element = hop.element;
  else {
    element = `for=${hop.forNode};proto=${proto}${host ? `;host=${forwardedToken(host)}` : ''}`;
    // Stryker disable next-line ConditionalExpression,BooleanLiteral,BlockStatement: equivalent: storing a proxy's element is never read, not storing one builds it again
    if (!fromProxy) {
      hop.host = host;
      hop.element = element;
    }
  }
  const priorForwarded = fromProxy ? headerText(headers.forwarded) : undefined;
  // A trusted proxy that names its clients with `Forwarded` alone: its `for=` nodes go on in
  // X-Forwarded-For too. Started afresh with the peer only, that header (which gateways read first)
  // would name trusted hops only, and the client's failures would count against nobody.
  const priorFor = fromProxy
    ? (headerText(headers['x-forwarded-for']) ?? forwardedAsForwardedFor(priorForwarded))
    : undefined;
  out.push(
    'x-forwarded-for',
    priorFor ? `${priorFor}, ${peer}` : peer,
    'forwarded',
    priorForwarded ? `${priorForwarded}, ${element}` : element,
    'x-forwarded-proto',
    proto,
  );
  if (host) out.push('x-forwarded-host', host);
  // A trusted proxy's path prefix goes on as it sent it (the gateway checks it: forwardedPrefix);
  // a client's own is dropped, never passed to a gateway that trusts the router.
  const prefix = fromProxy ? headerText(headers['x-forwarded-prefix']) : undefined;
  if (prefix !== undefined) out.push('x-forwarded-prefix', prefix);
  out.push('x-request-id', input.requestId);
  return out;
}
