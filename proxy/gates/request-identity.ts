/**
 * Who and what a request is, in rate-limit terms: the client address (through trusted proxies), the
 * request type, and the `gateway_request` identifier.
 */
import { ANONYMOUS, type Identifier } from '../../policy/rate-limit/index.ts';
import type { RequestContext } from '../server/route-types.ts';
import { clientAddress, createTrustedProxies, type TrustedProxies } from '../router/forwarded.ts';

export const NO_TRUSTED_PROXIES = createTrustedProxies([]);

/** Without trusted proxies the address is the socket peer's: normalized once per connection. */
const peerOf = new WeakMap<object, string>();

/** The client address: the socket peer, or behind ARKVORY_TRUSTED_PROXIES the forwarded client. */
export function clientIp(ctx: RequestContext, trusted: TrustedProxies = NO_TRUSTED_PROXIES): string {
  if (trusted.entries.length > 0) return clientAddress(ctx.req, trusted);
  const socket = ctx.req.socket;
  let ip = peerOf.get(socket);
  if (ip === undefined) {
    ip = clientAddress(ctx.req, trusted);
    // Only a known peer is remembered (a closed socket reports none).
    if (socket.remoteAddress !== undefined) peerOf.set(socket, ip);
  }
  return ip;
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
