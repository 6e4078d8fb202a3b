/**
 * Forwarded client addresses, pure (no I/O): which peers are trusted proxies, what a router adds
 * to `X-Forwarded-For`/`Forwarded`, and which address a gateway should use as the client's.
 *
 * Trust model: only the right end of `X-Forwarded-For` can be believed, and only as far as every
 * hop that appended to it is a configured proxy (ARKVORY_TRUSTED_PROXIES). Anything a client sends
 * itself sits further left and is never read past the first untrusted hop.
 */
import { BlockList, isIP } from 'node:net';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { endToEndHeaders } from './hop-by-hop.ts';

/** A compiled ARKVORY_TRUSTED_PROXIES list. */
export interface TrustedProxies {
  readonly entries: readonly string[];
  isTrusted(address: string): boolean;
}

const NONE: TrustedProxies = { entries: [], isTrusted: () => false };

/** `::ffff:10.0.0.1` → `10.0.0.1`; `[::1]` → `::1`; `10.0.0.1:5000` → `10.0.0.1`; anything else → undefined. */
export function normalizeAddress(raw: string): string | undefined {
  let text = raw.trim();
  if (text.startsWith('"') && text.endsWith('"')) text = text.slice(1, -1);
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(text);
  if (bracketed) text = bracketed[1]!;
  else if (/^[0-9.]+:\d+$/.test(text)) text = text.slice(0, text.lastIndexOf(':'));
  const lower = text.toLowerCase();
  if (lower.startsWith('::ffff:') && isIP(lower.slice(7)) === 4) return lower.slice(7);
  const family = isIP(lower);
  return family === 0 ? undefined : lower;
}

/**
 * Parses a comma-separated list of IP addresses and CIDR blocks (`10.0.0.0/8`, `::1`,
 * `fd00::/8`). Returns the problem text on the first bad entry.
 */
export function parseTrustedProxies(
  text: string | undefined,
): { ok: true; value: string[] } | { ok: false; problem: string } {
  if (text === undefined || text.trim() === '') return { ok: true, value: [] };
  const entries: string[] = [];
  for (const part of text.split(',')) {
    const entry = part.trim();
    const match = /^([^/]+)(?:\/(\d{1,3}))?$/.exec(entry);
    const address = match ? normalizeAddress(match[1]!) : undefined;
    const family = address ? isIP(address) : 0;
    const prefix = match?.[2] === undefined ? undefined : Number(match[2]);
    if (!address || (prefix !== undefined && prefix > (family === 4 ? 32 : 128))) {
      return {
        ok: false,
        problem: `expected comma-separated IP addresses or CIDR blocks (10.0.0.0/8, ::1), got ${JSON.stringify(entry)}`,
      };
    }
    entries.push(prefix === undefined ? address : `${address}/${prefix}`);
  }
  return { ok: true, value: entries };
}

/** Compiles validated entries (from `parseTrustedProxies`, e.g. `config.trustedProxies`). */
export function createTrustedProxies(entries: readonly string[]): TrustedProxies {
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
      return list.check(address, isIP(address) === 4 ? 'ipv4' : 'ipv6');
    },
  };
}

function headerText(value: string | string[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * The client address from the gateway's point of view, for rate limits and logs. Starts at the
 * socket peer; while that hop is a trusted proxy, steps one entry left in `X-Forwarded-For`. The
 * first untrusted hop is the client. With no trusted proxies this is the socket peer, whatever the
 * headers say. A malformed entry stops the walk at the proxy that passed it on.
 */
export function clientAddressFrom(
  remoteAddress: string | undefined,
  forwardedFor: string | string[] | undefined,
  trusted: TrustedProxies,
): string {
  const peer = normalizeAddress(remoteAddress ?? '') ?? remoteAddress ?? '';
  if (!trusted.isTrusted(peer)) return peer;
  const hops = (headerText(forwardedFor) ?? '')
    .split(',')
    .map((h) => h.trim())
    .filter((h) => h.length > 0);
  let current = peer;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = normalizeAddress(hops[i]!);
    if (!hop) return current;
    current = hop;
    if (!trusted.isTrusted(hop)) return hop;
  }
  return current;
}

/** `clientAddressFrom` on a request: the helper gateways use for the rate-limit `ip`. */
export function clientAddress(req: Pick<IncomingMessage, 'socket' | 'headers'>, trusted: TrustedProxies): string {
  return clientAddressFrom(req.socket.remoteAddress, req.headers['x-forwarded-for'], trusted);
}

/** Hop-by-hop request headers (RFC 9110 §7.6.1) a proxy must not forward. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'expect',
]);

function forwardedNode(address: string): string {
  return isIP(address) === 6 ? `"[${address}]"` : address;
}

function forwardedToken(value: string): string {
  return /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(value) ? value : `"${value.replace(/["\\]/g, '\\$&')}"`;
}

export interface ForwardingInput {
  headers: IncomingHttpHeaders;
  remoteAddress: string | undefined;
  encrypted: boolean;
  trusted: TrustedProxies;
  requestId: string;
}

/**
 * The headers a router sends upstream: the client's own, minus hop-by-hop ones (and any named in
 * `Connection`), plus `X-Forwarded-For`, `Forwarded`, `X-Forwarded-Proto`/`-Host` and
 * `x-request-id`. A peer that is a trusted proxy has its chain extended; from anyone else the
 * forwarding headers are replaced, so a client cannot plant an address. `Expect` is dropped: the
 * router has already answered `100 Continue` itself.
 */
export function buildUpstreamHeaders(input: ForwardingInput): Record<string, string | string[]> {
  const { headers } = input;
  const out = endToEndHeaders(headers, HOP_BY_HOP);
  const peer = normalizeAddress(input.remoteAddress ?? '') ?? 'unknown';
  const fromProxy = input.trusted.isTrusted(peer);
  const proto = (fromProxy && headerText(headers['x-forwarded-proto'])) || (input.encrypted ? 'https' : 'http');
  const host = (fromProxy && headerText(headers['x-forwarded-host'])) || headerText(headers.host);
  const priorFor = fromProxy ? headerText(headers['x-forwarded-for']) : undefined;
  const priorForwarded = fromProxy ? headerText(headers.forwarded) : undefined;
  out['x-forwarded-for'] = priorFor ? `${priorFor}, ${peer}` : peer;
  const element = [
    `for=${forwardedNode(peer)}`,
    `proto=${proto}`,
    ...(host ? [`host=${forwardedToken(host)}`] : []),
  ].join(';');
  out.forwarded = priorForwarded ? `${priorForwarded}, ${element}` : element;
  out['x-forwarded-proto'] = proto;
  if (host) out['x-forwarded-host'] = host;
  else delete out['x-forwarded-host'];
  out['x-request-id'] = input.requestId;
  return out;
}
