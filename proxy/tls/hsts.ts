/**
 * HTTP Strict Transport Security (RFC 6797) as a TLS listener sends it (ARKVORY_TLS_HSTS, docs/tls.md):
 * the operator's value checked once at start against the header's grammar (§6.1) and sent in one
 * canonical form. Pure.
 *
 * Unknown directives are refused rather than passed on: a browser ignores them (§6.1), so a typo such
 * as `includeSubdomain` would silently send a policy other than the one the operator meant.
 */

/** The header's name, lower case as the listeners write it. */
export const HSTS_HEADER = 'strict-transport-security';

/** RFC 9111 §1.2.2: a delta-seconds past 2^31 is read as 2^31 (68 years); a longer one is a typo. */
export const MAX_AGE_LIMIT = 2 ** 31;

export interface HstsPolicy {
  /** Seconds a browser keeps the host HTTPS-only; 0 tells it to forget the host (§6.1.1). */
  readonly maxAge: number;
  readonly includeSubDomains: boolean;
  /** Consent to the browsers' preload lists (hstspreload.org); not part of RFC 6797. */
  readonly preload: boolean;
}

export type HstsParse = { readonly policy: HstsPolicy; readonly header: string } | { readonly problem: string };

// tchar of RFC 9110 §5.6.2; a directive's value is a token or a quoted-string (RFC 6797 §6.1).
const DIRECTIVE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?:[ \t]*=[ \t]*([!#$%&'*+.^_`|~0-9A-Za-z-]+|"(?:[^"\\]|\\.)*"))?$/;
const VALUELESS = new Set(['includesubdomains', 'preload']);

/** The policy `value` states and the header it is sent as, or why it is not a valid one. */
export function parseHsts(value: string): HstsParse {
  // Header field values are visible ASCII, space and tab (RFC 9110 §5.5); a control byte never leaves.
  if (/[^\x20-\x7e\t]/.test(value)) return { problem: 'holds a control or non-ASCII character' };
  const seen = new Set<string>();
  let maxAge: number | undefined;
  for (const part of value.split(';')) {
    const directive = part.trim();
    // `[ directive ] *( ";" [ directive ] )`: empty ones are allowed.
    if (directive === '') continue;
    const match = DIRECTIVE.exec(directive);
    if (!match) return { problem: `"${directive}" is not a directive (name, or name=value)` };
    const name = match[1]!.toLowerCase();
    const raw = match[2];
    if (seen.has(name)) return { problem: `${match[1]} appears twice (RFC 6797 §6.1: each directive once)` };
    seen.add(name);
    if (name === 'max-age') {
      const digits = raw?.startsWith('"') ? raw.slice(1, -1) : raw;
      if (digits === undefined || !/^[0-9]+$/.test(digits))
        return { problem: 'max-age must be a number of seconds, a non-negative integer (max-age=31536000)' };
      const seconds = Number(digits);
      if (seconds > MAX_AGE_LIMIT) return { problem: `max-age must be at most ${MAX_AGE_LIMIT} seconds` };
      maxAge = seconds;
    } else if (VALUELESS.has(name)) {
      if (raw !== undefined) return { problem: `${match[1]} takes no value` };
    } else return { problem: `unknown directive "${match[1]}" (allowed: max-age, includeSubDomains, preload)` };
  }
  if (maxAge === undefined) return { problem: 'max-age is required (RFC 6797 §6.1.1)' };
  const policy = { maxAge, includeSubDomains: seen.has('includesubdomains'), preload: seen.has('preload') };
  return { policy, header: hstsHeader(policy) };
}

/** The header's canonical value. */
export function hstsHeader(policy: HstsPolicy): string {
  let header = `max-age=${policy.maxAge}`;
  if (policy.includeSubDomains) header += '; includeSubDomains';
  if (policy.preload) header += '; preload';
  return header;
}
