import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { formatContentDigest, parseContentDigestSha256 } from './digest.ts';

const hex = createHash('sha256').update('hello').digest('hex');
const b64 = Buffer.from(hex, 'hex').toString('base64');

/** The same bytes with one of the two unused low bits of the last base64 digit set. */
function nonCanonical(base64: string): string {
  const digits = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const at = base64.indexOf('=') - 1;
  const other = digits[digits.indexOf(base64[at]!) ^ 1]!;
  const changed = `${base64.slice(0, at)}${other}${base64.slice(at + 1)}`;
  if (!Buffer.from(changed, 'base64').equals(Buffer.from(base64, 'base64'))) throw new Error('not the same bytes');
  return changed;
}

describe('parseContentDigestSha256', () => {
  it.each([
    ['absent', undefined, undefined],
    ['sha-256 alone', `sha-256=:${b64}:`, hex],
    ['among others', `sha-512=:${Buffer.alloc(64).toString('base64')}:, sha-256=:${b64}:`, hex],
    ['other algorithms only', `sha-512=:${Buffer.alloc(64).toString('base64')}:`, undefined],
    ['with a parameter', `sha-256=:${b64}:;x=1`, hex],
    ['beside a bare member (a boolean)', `flag, sha-256=:${b64}:`, hex],
    ['the last sha-256 of several', `sha-256=:${Buffer.alloc(32).toString('base64')}:, sha-256=:${b64}:`, hex],
  ] as const)('%s', (_name, header, expected) => {
    expect(parseContentDigestSha256(header)).toBe(expected);
  });

  it.each([
    ['sha-256=abc'],
    [`sha-256=:${Buffer.alloc(31).toString('base64')}:`],
    ['sha-256=:!!!!:'],
    ['=:x:'],
    [`sha-256=:${b64}:,`],
    // A key must start with a lowercase letter or `*`, and be all key characters.
    [`Sha-256=:${b64}:`],
    [`1a=:${b64}:, sha-256=:${b64}:`],
    [`md5 x, sha-256=:${b64}:`],
    // The byte sequence is the whole value: colons around base64, then parameters only.
    [`sha-256=x:${b64}:`],
    [`sha-256=:${b64}:junk`],
    ['sha-256'],
    // Base64 that decodes to the right bytes but is not their canonical form (padding bits set).
    [`sha-256=:${nonCanonical(b64)}:`],
  ])('rejects %j with invalid_request', (header) => {
    expect(() => parseContentDigestSha256(header)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });

  it('says what is wrong, quoting at most 120 characters of the header', () => {
    const long = `sha-256=:${'A'.repeat(200)}:`;
    expect(() => parseContentDigestSha256(long)).toThrow(
      `Content-Digest is not a valid RFC 9530 dictionary with a 32-byte sha-256 (${JSON.stringify(long.slice(0, 120))}).`,
    );
  });

  it('round-trips its own format', () => {
    expect(parseContentDigestSha256(formatContentDigest(hex))).toBe(hex);
  });
});
