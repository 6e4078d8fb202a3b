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
 *    the others. But the peer chooses the client it names, so a client reached directly could name
 *    a new one with each bad key and never be banned: each such failure also charges the peer's own
 *    key `FORWARDER_SHARE` of a failure (`forwarderKey`), and a peer banned that way is refused
 *    whatever client it names. The peer is reported (`untrustedForwarder`) so the gateway can warn
 *    and `arkvory doctor` can say which address to trust.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { addressKey } from '../../lib/ip-address.ts';
import { clientAddressAlong, forwardingHops, normalizeAddress, type TrustedProxies } from '../router/forwarded.ts';

export interface BanIdentity {
  /** The ban key, or undefined when the request must never count (a trusted proxy's own address). */
  readonly key: string | undefined;
  /** An untrusted peer that sent forwarding headers. */
  readonly untrustedForwarder: string | undefined;
  /**
   * The ban key of the untrusted peer itself, when `key` is a client it names: charged
   * `FORWARDER_SHARE` of each failure counted against `key`, and checked before it.
   */
  readonly forwarderKey: string | undefined;
}

/**
 * What the key of an untrusted forwarding peer is charged for each failure of a client it names:
 * with the shipped rule (20 failures in a minute) the peer itself is banned after 160 in a minute,
 * which takes 8 or more of its clients failing 20 times each, or one client naming a new address
 * each time. A binary fraction, so that the counts add up exactly.
 */
export const FORWARDER_SHARE = 1 / 8;

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
    direct: {
      key: addressKey(address, ipv6PrefixLength) ?? address,
      untrustedForwarder: undefined,
      forwarderKey: undefined,
    },
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
  const keyOf = (address: string) => addressKey(address, ipv6PrefixLength) ?? address;
  if (peer.isTrusted) {
    const client = clientAddressAlong(remoteAddress, hops, trusted);
    return {
      key: trusted.isTrusted(client) ? undefined : keyOf(client),
      untrustedForwarder: undefined,
      forwarderKey: undefined,
    };
  }
  const claimed = hops.length === 0 ? undefined : normalizeAddress(hops[hops.length - 1]);
  if (claimed === undefined) return { ...peer.direct, untrustedForwarder: peer.address };
  return {
    key: `by=${peer.direct.key};for=${keyOf(claimed)}`,
    untrustedForwarder: peer.address,
    forwarderKey: peer.direct.key,
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
