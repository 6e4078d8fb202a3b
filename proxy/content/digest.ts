/**
 * Pure parsing of `Content-Digest` (RFC 9530, a Structured Fields dictionary) for the one
 * algorithm we verify, `sha-256`. Other algorithms are allowed and ignored.
 */
import { GatewayError } from '../server/errors.ts';

const MEMBER = /^([a-z*][a-z0-9_\-.*]*)(?:=(.*))?$/;
// Stryker disable next-line Regex: equivalent for `={0,2}` → `=`: 32 bytes always end in one `=`, and other padding fails the length check
const BYTE_SEQUENCE = /^:([A-Za-z0-9+/]*={0,2}):(?:;.*)?$/;

/**
 * Returns the declared sha-256 as lowercase hex, undefined when the header is absent or names no
 * sha-256. A malformed header, or a sha-256 that is not 32 bytes, throws `invalid_request`.
 */
export function parseContentDigestSha256(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  let found: string | undefined;
  for (const raw of header.split(',')) {
    // An empty member (`a,,b`, a trailing comma) is refused here too: a key needs a first character.
    const match = MEMBER.exec(raw.trim());
    if (!match) throw invalid(header);
    if (match[1] !== 'sha-256') continue;
    // Stryker disable next-line StringLiteral: equivalent: a bare `sha-256` has no byte sequence, and no text standing in for it does either
    const bytes = BYTE_SEQUENCE.exec(match[2] ?? '');
    if (!bytes) throw invalid(header);
    const digest = Buffer.from(bytes[1]!, 'base64');
    if (digest.length !== 32 || digest.toString('base64') !== bytes[1]) throw invalid(header);
    found = digest.toString('hex');
  }
  return found;
}

/** `sha-256=:<base64>:` for a lowercase hex sha256. */
export function formatContentDigest(sha256Hex: string): string {
  return `sha-256=:${Buffer.from(sha256Hex, 'hex').toString('base64')}:`;
}

function invalid(header: string): GatewayError {
  return new GatewayError(
    'invalid_request',
    `Content-Digest is not a valid RFC 9530 dictionary with a 32-byte sha-256 (${JSON.stringify(header.slice(0, 120))}).`,
  );
}
