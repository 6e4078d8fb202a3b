import { describe, expect, it } from 'vitest';
import {
  canonicalPath,
  hasPresignParams,
  isOutdatedLink,
  linkLifetime,
  parsePresignQuery,
  presignQueryString,
  signatureMatches,
  signPresign,
} from './presign-signature.ts';

const secret = Buffer.alloc(32, 7);
const fields = {
  path: '/api/v1/repositories/r/artifacts/a%40b/content',
  keyId: 'abcdefghij012345',
  issuedAt: 1_799_990_000,
  expiresAt: 1_800_000_000,
  secretId: '3',
  sha256: 'c'.repeat(64),
};

describe('pre-signed link signatures', () => {
  it('round-trips through the query string and verifies only the exact fields', () => {
    const signature = signPresign(secret, fields);
    const parsed = parsePresignQuery(new URLSearchParams(presignQueryString(fields, signature)));
    const { path: _path, ...rest } = fields;
    expect(parsed).toEqual({ ...rest, signature });
    expect(signatureMatches(secret, fields, signature)).toBe(true);
    for (const changed of [
      { path: '/api/v1/repositories/r/artifacts/other/content' },
      { keyId: 'abcdefghij012346' },
      { expiresAt: fields.expiresAt + 1 },
      { issuedAt: fields.issuedAt - 1 },
      { secretId: '4' },
      { sha256: 'd'.repeat(64) },
    ]) {
      expect(signatureMatches(secret, { ...fields, ...changed }, signature)).toBe(false);
    }
    expect(signatureMatches(Buffer.alloc(32, 8), fields, signature)).toBe(false);
    expect(signatureMatches(secret, fields, signature.slice(0, -1))).toBe(false);
  });

  it('refuses missing, repeated or malformed parameters', () => {
    const good = presignQueryString(fields, signPresign(secret, fields));
    expect(hasPresignParams(new URLSearchParams(good))).toBe(true);
    expect(hasPresignParams(new URLSearchParams('a=1'))).toBe(false);
    for (const bad of [
      good.replace(/X-Arkvory-Key=[^&]+/, 'X-Arkvory-Key=SHORT'),
      good.replace(/&X-Arkvory-Expires=[^&]+/, ''),
      `${good}&X-Arkvory-Secret=1`,
      good.replace(/X-Arkvory-Expires=\d+/, 'X-Arkvory-Expires=-5'),
      good.replace(/X-Arkvory-Signature=[^&]+/, 'X-Arkvory-Signature=abc'),
      good.replace(/&X-Arkvory-Digest=[^&]+/, ''),
      good.replace(/X-Arkvory-Digest=[^&]+/, `X-Arkvory-Digest=${'C'.repeat(64)}`),
      // Only the canonical spelling of a number verifies: one link, one text.
      good.replace(/X-Arkvory-Expires=\d+/, 'X-Arkvory-Expires=01800000000'),
      good.replace(/X-Arkvory-Expires=\d+/, 'X-Arkvory-Expires=%2B1800000000'),
      good.replace(/X-Arkvory-Expires=\d+/, 'X-Arkvory-Expires=1800000000.0'),
      good.replace(/X-Arkvory-Expires=\d+/, 'X-Arkvory-Expires=1.8e9'),
      good.replace(/X-Arkvory-Date=\d+/, 'X-Arkvory-Date=01799990000'),
      good.replace(/X-Arkvory-Secret=\d+/, 'X-Arkvory-Secret=03'),
      good.replace(/X-Arkvory-Secret=\d+/, 'X-Arkvory-Secret=0'),
    ]) {
      expect(parsePresignQuery(new URLSearchParams(bad)), bad).toBeUndefined();
    }
  });

  it('recognises a link of the first format (no date, no digest) as outdated, and nothing else', () => {
    const v1 = `X-Arkvory-Key=${fields.keyId}&X-Arkvory-Expires=1800000000&X-Arkvory-Secret=3&X-Arkvory-Signature=${'A'.repeat(43)}`;
    expect(isOutdatedLink(new URLSearchParams(v1))).toBe(true);
    const v2 = presignQueryString(fields, signPresign(secret, fields));
    expect(isOutdatedLink(new URLSearchParams(v2))).toBe(false);
    expect(isOutdatedLink(new URLSearchParams(v2.replace(/&X-Arkvory-Digest=[^&]+/, '')))).toBe(false);
    expect(isOutdatedLink(new URLSearchParams(v1.replace(/&X-Arkvory-Secret=\d+/, '')))).toBe(false);
  });

  it('canonicalises paths so equivalent encodings name one target', () => {
    expect(canonicalPath('/a/b@c/d%20e')).toBe('/a/b%40c/d%20e');
    expect(canonicalPath('/a/b%40c/d e')).toBe('/a/b%40c/d%20e');
    expect(canonicalPath('/a/%E0%A4%A')).toBeUndefined();
  });

  it('bounds lifetimes by the configured maximum', () => {
    expect(linkLifetime(undefined, 3600, 604800)).toEqual({ ok: true, seconds: 3600 });
    expect(linkLifetime(undefined, 3600, 600)).toEqual({ ok: true, seconds: 600 });
    expect(linkLifetime(604800, 3600, 604800)).toEqual({ ok: true, seconds: 604800 });
    for (const bad of [0, -1, 604801, 1.5, '60', null]) expect(linkLifetime(bad, 3600, 604800).ok).toBe(false);
  });
});
