/**
 * Who and what a request is, in rate-limit terms: the client address (through trusted proxies), the
 * request type, and the `gateway_request` identifier.
 */
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

export function requestType(
  ctx: Pick<RequestContext, 'route' | 'access' | 'req'>,
): 'read' | 'write' | 'admin' | 'health' {
  if (ctx.route.startsWith('/health/') || ctx.route === '/metrics') return 'health';
  if (ctx.access === 'admin' || ctx.route.startsWith('/api/v1/admin/') || ctx.route === '/api/v1/admin') return 'admin';
  const method = ctx.req.method ?? 'GET';
  return method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? 'read' : 'write';
}

/** The `gateway_request` identifier: exactly the properties declared in available_limiters.yaml. */
export function requestIdentifier(ctx: RequestContext, trusted: TrustedProxies = NO_TRUSTED_PROXIES): Identifier {
  return {
    principal: ctx.principal?.id ?? ANONYMOUS,
    ip: clientIp(ctx, trusted),
    method: ctx.req.method ?? 'GET',
    repository: ctx.params.repo,
    route: ctx.route,
    request_type: requestType(ctx),
  };
}
