import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  canonicalPath,
  hasPresignParams,
  isOutdatedLink,
  linkLifetime,
  linkPredates,
  msUntilLinkOutlivesRemoval,
  outlivesMaxLifetime,
  PRESIGN_CLOCK_SKEW_SECONDS,
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

  it('signs the documented payload (links made by one version verify on another)', () => {
    // HMAC-SHA256 over "arkvory-presign-v2", path, key id, issue time, expiry, secret id and the content's
    // sha256, one per line (docs/clients.md).
    const payload = `arkvory-presign-v2\n${fields.path}\n${fields.keyId}\n${fields.issuedAt}\n${fields.expiresAt}\n${fields.secretId}\n${fields.sha256}`;
    expect(signPresign(secret, fields)).toBe(createHmac('sha256', secret).update(payload).digest('base64url'));
  });

  it('any one presign parameter makes the request a link', () => {
    for (const name of ['X-Arkvory-Key', 'X-Arkvory-Expires', 'X-Arkvory-Secret', 'X-Arkvory-Signature'])
      expect(hasPresignParams(new URLSearchParams(`${name}=x`)), name).toBe(true);
  });

  it('each parameter must match its whole pattern, not a prefix or suffix of it', () => {
    const signature = signPresign(secret, fields);
    const query = (overrides: Record<string, string>) => {
      const q = new URLSearchParams(presignQueryString(fields, signature));
      for (const [name, value] of Object.entries(overrides)) q.set(name, value);
      return q;
    };
    expect(parsePresignQuery(query({ 'X-Arkvory-Secret': '12' }))).toMatchObject({ secretId: '12' });
    expect(parsePresignQuery(query({ 'X-Arkvory-Secret': '123456789012345678' }))).toMatchObject({
      secretId: '123456789012345678',
    });
    for (const [name, value] of [
      ['X-Arkvory-Key', `${fields.keyId}x`],
      ['X-Arkvory-Key', `x${fields.keyId}`],
      ['X-Arkvory-Expires', '1234567890123'],
      ['X-Arkvory-Expires', '1800000000x'],
      ['X-Arkvory-Secret', '3x'],
      ['X-Arkvory-Secret', 'x3'],
      ['X-Arkvory-Secret', '1234567890123456789'],
      ['X-Arkvory-Signature', `${signature}x`],
      ['X-Arkvory-Signature', `x${signature}`],
      ['X-Arkvory-Digest', `${fields.sha256}0`],
      ['X-Arkvory-Digest', `0${fields.sha256}`],
    ] as const) {
      expect(parsePresignQuery(query({ [name]: value })), `${name}=${value}`).toBeUndefined();
    }
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
    expect(linkLifetime(1, 3600, 604800)).toEqual({ ok: true, seconds: 1 });
    for (const bad of [0, -1, 604801, 1.5, '60', null]) expect(linkLifetime(bad, 3600, 604800).ok).toBe(false);
    expect(linkLifetime(0, 3600, 600)).toEqual({
      ok: false,
      problem: 'expiresInSeconds must be an integer from 1 to 600 (ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS)',
    });
  });
});

describe('outlivesMaxLifetime: the current maximum applies to links already made', () => {
  const T = 1_800_000_000;
  const MAX = 3600;
  const SKEW = PRESIGN_CLOCK_SKEW_SECONDS;
  it.each([
    // [issuedAt, expiresAt, now (s), outlives?]
    [T, T + MAX, T, false],
    [T, T + MAX + 1, T, true],
    [T, T + 7200, T + 5000, true], // made for 2 h under an older maximum, whatever is left
    [T - 100, T + 600, T, false],
    [T + SKEW, T + SKEW + MAX, T, false], // made on a host a minute ahead
    [T + SKEW + 1, T + SKEW + 1 + MAX, T, true], // signed in the future beyond the slack
  ])('issued %i, expires %i, checked at %i: %s', (issuedAt, expiresAt, nowS, expected) => {
    expect(outlivesMaxLifetime({ issuedAt, expiresAt }, nowS * 1000, MAX)).toBe(expected);
  });
});

describe('linkPredates: a link made before its grant was last removed stays void', () => {
  const T = 1_800_000_000;
  it.each([
    // [issuedAt (s), removedAt (ms) or undefined, void?]
    [T, undefined, false],
    [T - 1, T * 1000, true], // made a second before the removal
    [T, T * 1000 + 400, true], // made within the removal's second: cannot tell, so before
    [T, T * 1000, true], // a removal at the second's very start (ms truncated from µs)
    [T + 1, T * 1000 + 999, false], // made in the next second
    [T + 3600, T * 1000, false],
  ])('issued %i, removed at %s: %s', (issuedAt, removedAtMs, expected) => {
    expect(linkPredates(issuedAt, removedAtMs)).toBe(expected);
  });

  it('issuing waits for the second after the removal, and only then', () => {
    const T_MS = T * 1000;
    expect(msUntilLinkOutlivesRemoval(T_MS + 500, undefined)).toBe(0);
    expect(msUntilLinkOutlivesRemoval(T_MS + 500, T_MS - 1)).toBe(0);
    expect(msUntilLinkOutlivesRemoval(T_MS + 500, T_MS + 200)).toBe(500);
    expect(msUntilLinkOutlivesRemoval(T_MS, T_MS)).toBe(1000);
    // After the wait, a link dated then outlives the removal.
    const now = T_MS + 250;
    const wait = msUntilLinkOutlivesRemoval(now, T_MS + 100);
    expect(linkPredates(Math.floor((now + wait) / 1000), T_MS + 100)).toBe(false);
    expect(msUntilLinkOutlivesRemoval(now + wait, T_MS + 100)).toBe(0);
  });
});
