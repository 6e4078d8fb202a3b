/**
 * Who and what a request is, in rate-limit terms: the client address (through trusted proxies), the
 * key per-address limits count it by (an IPv6 client by its prefix), the request type, and the
 * `gateway_request` identifier.
 */
import { addressKey } from '../../lib/ip-address.ts';
import { ANONYMOUS, type Identifier } from '../../policy/rate-limit/index.ts';
import type { RequestContext } from '../server/route-types.ts';
import { clientAddress, createTrustedProxies, normalizeAddress, type TrustedProxies } from '../router/forwarded.ts';

export const NO_TRUSTED_PROXIES = createTrustedProxies([]);

/** Peer addresses remembered by `peerAddress`; past this many the memo starts afresh. */
const MAX_PEERS = 1024;
const peers = new Map<string, string>();

/** The socket peer's canonical address (a bounded memo: a keep-alive client or a router sends every request from one). */
function peerAddress(remoteAddress: string | undefined): string {
  if (remoteAddress === undefined) return '';
  let ip = peers.get(remoteAddress);
  if (ip === undefined) {
    if (peers.size >= MAX_PEERS) peers.clear();
    ip = normalizeAddress(remoteAddress) ?? remoteAddress;
    peers.set(remoteAddress, ip);
  }
  return ip;
}

/**
 * The client address: the socket peer, or behind ARKVORY_TRUSTED_PROXIES the forwarded client
 * (`X-Forwarded-For`, else `Forwarded`: forwarded.ts). A request with neither header (or with no
 * proxy trusted to have sent it) is its peer's.
 */
export function clientIp(ctx: RequestContext, trusted: TrustedProxies = NO_TRUSTED_PROXIES): string {
  const { headers } = ctx.req;
  if (trusted.entries.length > 0 && (headers['x-forwarded-for'] !== undefined || headers.forwarded !== undefined))
    return clientAddress(ctx.req, trusted);
  return peerAddress(ctx.req.socket.remoteAddress);
}

/** The IPv6 prefix length per-address limits use unless told (ARKVORY_RATE_LIMIT_IPV6_PREFIX_LENGTH). */
export const DEFAULT_IPV6_PREFIX_LENGTH = 64;

/** Keys remembered by `clientKey`; past this many the memo starts afresh. */
const MAX_KEYS = 4096;
const keys = new Map<string, string>();

/**
 * What per-address limits count a client by: its address, IPv6 by its first `ipv6PrefixLength`
 * bits (lib/ip-address.ts, `addressKey`). One host usually holds a whole IPv6 /64 (SLAAC, privacy
 * addresses): keyed by its full address, it would walk past every per-address limit by changing
 * address. A bounded memo: a keep-alive client or a router's clients ask again and again.
 */
export function clientKey(
  ctx: RequestContext,
  trusted: TrustedProxies = NO_TRUSTED_PROXIES,
  ipv6PrefixLength = DEFAULT_IPV6_PREFIX_LENGTH,
): string {
  const ip = clientIp(ctx, trusted);
  const memo = `${ipv6PrefixLength}/${ip}`;
  let key = keys.get(memo);
  if (key === undefined) {
    if (keys.size >= MAX_KEYS) keys.clear();
    key = addressKey(ip, ipv6PrefixLength) ?? ip;
    keys.set(memo, key);
  }
  return key;
}

export function requestType(
  ctx: Pick<RequestContext, 'route' | 'access' | 'req'>,
): 'read' | 'write' | 'admin' | 'health' {
  if (ctx.route.startsWith('/health/') || ctx.route === '/metrics') return 'health';
  if (ctx.access === 'admin' || ctx.route.startsWith('/api/v1/admin/') || ctx.route === '/api/v1/admin') return 'admin';
  const method = ctx.req.method ?? 'GET';
  return method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? 'read' : 'write';
}

/**
 * The `gateway_request` identifier: exactly the properties declared in available_limiters.yaml;
 * its `ip` is the client's key (`clientKey`), not its full address.
 */
export function requestIdentifier(
  ctx: RequestContext,
  trusted: TrustedProxies = NO_TRUSTED_PROXIES,
  ipv6PrefixLength = DEFAULT_IPV6_PREFIX_LENGTH,
): Identifier {
  return {
    principal: ctx.principal?.id ?? ANONYMOUS,
    ip: clientKey(ctx, trusted, ipv6PrefixLength),
    method: ctx.req.method ?? 'GET',
    repository: ctx.params.repo,
    route: ctx.route,
    request_type: requestType(ctx),
  };
}
