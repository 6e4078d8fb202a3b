/**
 * Whom an `auth_failure` ban is keyed by, pure (docs/rate-limits.md, "Bans behind proxies"):
 *  - a client reached directly: its address (IPv6: its prefix, ARKVORY_BAN_IPV6_PREFIX_LENGTH);
 *  - behind trusted proxies: the forwarded client, the same way, read from `X-Forwarded-For` or,
 *    without it, from `Forwarded` (forwarded.ts, `forwardingHops`);
 *  - a request whose forwarding chain holds trusted proxies only (no client beyond them, or a hop
 *    named `unknown` or obfuscated): nobody. A ban on a trusted proxy's own address would refuse
 *    every client behind it, which is exactly the lockout bans must never cause. A trusted address
 *    sending neither header is a client itself (a proxy always forwards one) and is keyed by its
 *    address;
 *  - an untrusted peer that sends `X-Forwarded-For`/`Forwarded` (a router or proxy the operator has
 *    not listed): the pair of that peer and the client it names. The header cannot be believed, so
 *    the client alone is not the key; the peer alone would let one client behind it lock out all
 *    the others. The peer is reported (`untrustedForwarder`) so the gateway can warn and `arkvory
 *    doctor` can say which address to trust.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { banKey } from '../../lib/ip-address.ts';
import { clientAddressAlong, forwardingHops, normalizeAddress, type TrustedProxies } from '../router/forwarded.ts';

export interface BanIdentity {
  /** The ban key, or undefined when the request must never count (a trusted proxy's own address). */
  readonly key: string | undefined;
  /** An untrusted peer that sent forwarding headers. */
  readonly untrustedForwarder: string | undefined;
}

/** What a peer address alone decides (its canonical text, trust, and its key as a direct client). */
interface Peer {
  readonly address: string;
  readonly isTrusted: boolean;
  readonly direct: BanIdentity;
}

function peerOf(remoteAddress: string | undefined, trusted: TrustedProxies, ipv6PrefixLength: number): Peer {
  const address = normalizeAddress(remoteAddress) ?? remoteAddress ?? '';
  return {
    address,
    isTrusted: trusted.isTrusted(address),
    direct: { key: banKey(address, ipv6PrefixLength) ?? address, untrustedForwarder: undefined },
  };
}

function identify(
  peer: Peer,
  remoteAddress: string | undefined,
  headers: IncomingHttpHeaders,
  trusted: TrustedProxies,
  ipv6PrefixLength: number,
): BanIdentity {
  const hops = forwardingHops(headers);
  if (hops === undefined) return peer.direct;
  const keyOf = (address: string) => banKey(address, ipv6PrefixLength) ?? address;
  if (peer.isTrusted) {
    const client = clientAddressAlong(remoteAddress, hops, trusted);
    return { key: trusted.isTrusted(client) ? undefined : keyOf(client), untrustedForwarder: undefined };
  }
  const claimed = hops.length === 0 ? undefined : normalizeAddress(hops[hops.length - 1]);
  return {
    key: claimed === undefined ? peer.direct.key : `by=${peer.direct.key};for=${keyOf(claimed)}`,
    untrustedForwarder: peer.address,
  };
}

export function banIdentity(
  remoteAddress: string | undefined,
  headers: IncomingHttpHeaders,
  trusted: TrustedProxies,
  ipv6PrefixLength: number,
): BanIdentity {
  return identify(peerOf(remoteAddress, trusted, ipv6PrefixLength), remoteAddress, headers, trusted, ipv6PrefixLength);
}

/** Peer addresses remembered by `BanIdentities`; past this many the memo starts afresh. */
const MAX_PEERS = 1024;

/**
 * `banIdentity` for one trusted-proxy list and prefix length, with what each peer address decides
 * remembered (a bounded memo of a pure function): a keep-alive client or a router sends every
 * request from one address, and parsing, canonicalising and checking it against the list each time
 * is most of the work.
 */
export class BanIdentities {
  readonly #trusted: TrustedProxies;
  readonly #ipv6PrefixLength: number;
  readonly #peers = new Map<string, Peer>();

  constructor(trusted: TrustedProxies, ipv6PrefixLength: number) {
    this.#trusted = trusted;
    this.#ipv6PrefixLength = ipv6PrefixLength;
  }

  of(remoteAddress: string | undefined, headers: IncomingHttpHeaders): BanIdentity {
    const raw = remoteAddress ?? '';
    let peer = this.#peers.get(raw);
    if (peer === undefined) {
      if (this.#peers.size >= MAX_PEERS) this.#peers.clear();
      peer = peerOf(remoteAddress, this.#trusted, this.#ipv6PrefixLength);
      this.#peers.set(raw, peer);
    }
    return identify(peer, remoteAddress, headers, this.#trusted, this.#ipv6PrefixLength);
  }
}
