/**
 * IP address text, pure: one canonical spelling per address (so a ban on an address is a ban on
 * every way of writing it) and the IPv6 prefix per-address counters and bans are keyed by (one host
 * usually owns a whole /64, so counting or banning single IPv6 addresses limits nothing).
 *
 * Canonical text: IPv4 dotted decimal; IPv6 as RFC 5952 says (lower case, no leading zeros in a
 * group, the longest run of two or more zero groups compressed to `::`, the first on a tie); an
 * IPv4-mapped IPv6 address (`::ffff:1.2.3.4`, `::ffff:0102:0304`) is the IPv4 address; a zone
 * (`%eth0`) is dropped.
 */
import { isIP } from 'node:net';

const IPV4_MAPPED_PREFIX = [0, 0, 0, 0, 0, 0xffff];
/**
 * The NAT64/SIIT well-known prefix 64:ff9b::/96 (RFC 6052): an IPv4 client reaching an IPv6 gateway
 * through a translator appears as this prefix and its IPv4 address. Every such client shares one
 * /64, so it is keyed by the IPv4 address it embeds, never by a prefix.
 */
const NAT64_WELL_KNOWN_PREFIX = [0x64, 0xff9b, 0, 0, 0, 0];

/** The eight 16-bit groups of an IPv6 address, or undefined when `text` is not one. */
export function ipv6Groups(text: string): number[] | undefined {
  const bare = text.split('%', 1)[0]!;
  if (isIP(bare) !== 6) return undefined;
  let head = bare;
  const tail: number[] = [];
  // An embedded IPv4 tail (`::ffff:1.2.3.4`) is two groups.
  const lastColon = head.lastIndexOf(':');
  const maybeV4 = head.slice(lastColon + 1);
  if (maybeV4.includes('.')) {
    const octets = maybeV4.split('.').map(Number);
    tail.push((octets[0]! << 8) | octets[1]!, (octets[2]! << 8) | octets[3]!);
    // Keep a `::` that ends right before the tail; drop a single separating colon.
    head = head.slice(0, lastColon + 1);
    if (!head.endsWith('::')) head = head.slice(0, -1);
  }
  // isIP vouched for the text: at most one `::`, and without one exactly eight groups.
  const [left, right] = head.split('::');
  const parse = (part: string | undefined) =>
    part === undefined || part === '' ? [] : part.split(':').map((g) => Number.parseInt(g, 16));
  const l = parse(left);
  const r = parse(right);
  return [...l, ...new Array<number>(8 - l.length - r.length - tail.length).fill(0), ...r, ...tail];
}

/** RFC 5952 text of eight groups. */
export function formatIpv6(groups: readonly number[]): string {
  let bestStart = -1;
  let bestLength = 1; // a single zero group is never compressed
  // Stryker disable next-line EqualityOperator: equivalent: past the end a group is undefined, not 0, and the loop ends
  for (let i = 0; i < groups.length; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}

/** The canonical text of an address (see the header), or undefined when `text` is none. */
export function canonicalIp(text: string): string | undefined {
  // No case to fold: isIP and the hex groups read either, and formatIpv6 writes lower case.
  const trimmed = text.trim();
  if (isIP(trimmed) === 4) return trimmed;
  const groups = ipv6Groups(trimmed);
  if (!groups) return undefined;
  if (IPV4_MAPPED_PREFIX.every((g, i) => groups[i] === g))
    return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.');
  return formatIpv6(groups);
}

/**
 * What per-address rate-limit counters and bans are keyed by: an IPv4 address (an IPv4-mapped IPv6
 * one too, and one translated into 64:ff9b::/96) itself; an IPv6 address's first `ipv6PrefixLength`
 * bits as a CIDR block (`2001:db8:1:2::/64`), or the address itself at 128. Undefined for a
 * non-address.
 */
export function addressKey(text: string, ipv6PrefixLength: number): string | undefined {
  const canonical = canonicalIp(text);
  if (canonical === undefined || isIP(canonical) === 4) return canonical;
  const groups = ipv6Groups(canonical)!;
  // One key for all IPv4 clients of a translator would let any of them ban (or throttle) the rest.
  if (NAT64_WELL_KNOWN_PREFIX.every((g, i) => groups[i] === g))
    return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.');
  if (ipv6PrefixLength >= 128) return canonical;
  const masked = groups.map((g, i) => {
    // bits 0 makes the mask 0xffff << 16 & 0xffff, which is 0.
    const bits = Math.min(16, Math.max(0, ipv6PrefixLength - i * 16));
    return g & ((0xffff << (16 - bits)) & 0xffff);
  });
  return `${formatIpv6(masked)}/${ipv6PrefixLength}`;
}
