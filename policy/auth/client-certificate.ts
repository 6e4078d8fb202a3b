/**
 * Client certificates as principals (mutual TLS), the pure part: a binding names one subject
 * alternative name exactly, `URI:<uri>` (a SPIFFE id such as `URI:spiffe://example.org/ci`) or
 * `DNS:<name>` (lower case); a certificate offers the SANs Node reports in `subjectaltname`.
 * Nothing here does I/O; the authenticator looks bindings up, the auth gate reads the socket.
 */
import { quoted } from '../../lib/quoted.ts';
import { PolicyError } from '../errors.ts';

const URI_SAN = /^URI:[^\s\p{Cc}]{1,1024}$/u;
// Stryker disable next-line Regex: equivalent: it tests only `DNS:` + a lower-cased value, which cannot hold `DNS:` again
const DNS_SAN = /^DNS:[a-z0-9*._-]{1,253}$/;

/**
 * The canonical form of a SAN an operator binds: `URI:…` or `DNS:…` as given (DNS lower-cased); a
 * bare value with `://` is a URI, any other bare value a DNS name. Anything else is refused.
 */
export function normalizeSan(input: unknown): string {
  if (typeof input !== 'string' || input.length === 0)
    throw new PolicyError('invalid_request', 'san is required: URI:<uri> (e.g. a SPIFFE id) or DNS:<name>');
  let san = input.trim();
  if (!/^(URI|DNS):/i.test(san)) san = san.includes('://') ? `URI:${san}` : `DNS:${san}`;
  const kind = san.slice(0, 3).toUpperCase();
  const value = san.slice(4);
  const canonical = kind === 'DNS' ? `DNS:${value.toLowerCase()}` : `URI:${value}`;
  if (!(kind === 'DNS' ? DNS_SAN : URI_SAN).test(canonical))
    throw new PolicyError('invalid_request', `san ${quoted(input)} is neither URI:<uri> nor DNS:<name>`);
  return canonical;
}

/**
 * The URI and DNS names of Node's `subjectaltname` string (`DNS:a.example, URI:spiffe://x/y,
 * IP Address:10.0.0.1`), canonical as `normalizeSan` makes them; other kinds are ignored. Node
 * quotes a value holding a comma or a quote as a JSON string (`URI:"a,b"`).
 */
export function certificateSans(subjectaltname: string | undefined): string[] {
  if (!subjectaltname) return [];
  const sans: string[] = [];
  const pattern = /(URI|DNS|[A-Za-z ]+):("(?:[^"\\]|\\.)*"|[^,]*)(?:,\s*|$)/g;
  for (const m of subjectaltname.matchAll(pattern)) {
    // Stryker disable next-line MethodExpression: equivalent: the separator's `\s*` already took the spaces before a kind
    const kind = m[1]!.trim();
    if (kind !== 'URI' && kind !== 'DNS') continue;
    let value = m[2]!;
    // Stryker disable next-line MethodExpression: equivalent on Node's text: it quotes every value that holds a quote
    if (value.startsWith('"')) {
      try {
        value = JSON.parse(value) as string;
      } catch {
        continue;
      }
    }
    const san = kind === 'DNS' ? `DNS:${value.toLowerCase()}` : `URI:${value}`;
    if ((kind === 'DNS' ? DNS_SAN : URI_SAN).test(san)) sans.push(san);
  }
  return sans;
}

/** What the gateway knows of a connection's client certificate. */
export type PeerCertificate =
  | { readonly kind: 'none' }
  | { readonly kind: 'unverified'; readonly reason: string }
  | {
      readonly kind: 'verified';
      readonly sans: readonly string[];
      /** When the first certificate of its verified chain (leaf, intermediates, CA) expires. */
      readonly notAfterMs: number;
      readonly serial: string;
    };

/** Why a verified certificate does not authenticate at `nowMs`, or undefined when it may. */
export function certificateExpired(peer: { notAfterMs: number }, nowMs: number): string | undefined {
  return peer.notAfterMs <= nowMs
    ? `the client certificate (or a CA certificate of its chain) expired at ${new Date(peer.notAfterMs).toISOString()}`
    : undefined;
}
