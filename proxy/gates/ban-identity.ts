/**
 * Whom an `auth_failure` ban is keyed by, pure (docs/rate-limits.md, "Bans behind proxies"):
 *  - a client reached directly: its address (IPv6: its prefix, ARKVORY_BAN_IPV6_PREFIX_LENGTH);
 *  - behind trusted proxies: the forwarded client, the same way;
 *  - a request whose forwarding chain holds trusted proxies only (no client beyond them): nobody. A
 *    ban on a trusted proxy's own address would refuse every client behind it, which is exactly the
 *    lockout bans must never cause. A trusted address sending no `X-Forwarded-For` at all is a
 *    client itself (a router always forwards one) and is keyed by its address;
 *  - an untrusted peer that sends `X-Forwarded-For`/`Forwarded` (a router or proxy the operator has
 *    not listed): the pair of that peer and the client it names. The header cannot be believed, so
 *    the client alone is not the key; the peer alone would let one client behind it lock out all
 *    the others. The peer is reported (`untrustedForwarder`) so the gateway can warn and `arkvory
 *    doctor` can say which address to trust.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { banKey } from '../../lib/ip-address.ts';
import { clientAddressFrom, normalizeAddress, type TrustedProxies } from '../router/forwarded.ts';

export interface BanIdentity {
  /** The ban key, or undefined when the request must never count (a trusted proxy's own address). */
  readonly key: string | undefined;
  /** An untrusted peer that sent forwarding headers. */
  readonly untrustedForwarder: string | undefined;
}

function lastForwardedFor(headers: IncomingHttpHeaders): string | undefined {
  const xff = headers['x-forwarded-for'];
  const xffText = Array.isArray(xff) ? xff.join(',') : xff;
  if (xffText !== undefined) {
    const hops = xffText.split(',');
    return normalizeAddress(hops[hops.length - 1]!);
  }
  const forwarded = headers.forwarded;
  if (forwarded === undefined) return undefined;
  const nodes = [...forwarded.matchAll(/for=("[^"]*"|[^;,\s]+)/gi)];
  const last = nodes.at(-1)?.[1];
  return last === undefined ? undefined : normalizeAddress(last);
}

export function banIdentity(
  remoteAddress: string | undefined,
  headers: IncomingHttpHeaders,
  trusted: TrustedProxies,
  ipv6PrefixLength: number,
): BanIdentity {
  const peer = normalizeAddress(remoteAddress ?? '') ?? remoteAddress ?? '';
  const keyOf = (address: string) => banKey(address, ipv6PrefixLength) ?? address;
  if (trusted.isTrusted(peer) && headers['x-forwarded-for'] !== undefined) {
    const client = clientAddressFrom(remoteAddress, headers['x-forwarded-for'], trusted);
    return { key: trusted.isTrusted(client) ? undefined : keyOf(client), untrustedForwarder: undefined };
  }
  if (trusted.isTrusted(peer) || (headers['x-forwarded-for'] === undefined && headers.forwarded === undefined))
    return { key: keyOf(peer), untrustedForwarder: undefined };
  const claimed = lastForwardedFor(headers);
  return {
    key: claimed === undefined ? keyOf(peer) : `by=${keyOf(peer)};for=${keyOf(claimed)}`,
    untrustedForwarder: peer,
  };
}
