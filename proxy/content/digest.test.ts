import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { formatContentDigest, parseContentDigestSha256 } from './digest.ts';

const hex = createHash('sha256').update('hello').digest('hex');
const b64 = Buffer.from(hex, 'hex').toString('base64');

describe('parseContentDigestSha256', () => {
  it.each([
    ['absent', undefined, undefined],
    ['sha-256 alone', `sha-256=:${b64}:`, hex],
    ['among others', `sha-512=:${Buffer.alloc(64).toString('base64')}:, sha-256=:${b64}:`, hex],
    ['other algorithms only', `sha-512=:${Buffer.alloc(64).toString('base64')}:`, undefined],
    ['with a parameter', `sha-256=:${b64}:;x=1`, hex],
  ] as const)('%s', (_name, header, expected) => {
    expect(parseContentDigestSha256(header)).toBe(expected);
  });

  it.each([
    ['sha-256=abc'],
    [`sha-256=:${Buffer.alloc(31).toString('base64')}:`],
    ['sha-256=:!!!!:'],
    ['=:x:'],
    [`sha-256=:${b64}:,`],
  ])('rejects %j with invalid_request', (header) => {
    expect(() => parseContentDigestSha256(header)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });

  it('round-trips its own format', () => {
    expect(parseContentDigestSha256(formatContentDigest(hex))).toBe(hex);
  });
});
