import { describe, expect, it } from 'vitest';
import {
  canonicalPath,
  hasPresignParams,
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
  expiresAt: 1_800_000_000,
  secretId: '3',
};

describe('pre-signed link signatures', () => {
  it('round-trips through the query string and verifies only the exact fields', () => {
    const signature = signPresign(secret, fields);
    const parsed = parsePresignQuery(new URLSearchParams(presignQueryString(fields, signature)));
    expect(parsed).toEqual({ keyId: fields.keyId, expiresAt: fields.expiresAt, secretId: fields.secretId, signature });
    expect(signatureMatches(secret, fields, signature)).toBe(true);
    for (const changed of [
      { path: '/api/v1/repositories/r/artifacts/other/content' },
      { keyId: 'abcdefghij012346' },
      { expiresAt: fields.expiresAt + 1 },
      { secretId: '4' },
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
    ]) {
      expect(parsePresignQuery(new URLSearchParams(bad)), bad).toBeUndefined();
    }
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
