import { describe, expect, it } from 'vitest';
import {
  generateKey,
  hashSecret,
  holdsKey,
  KEY_PATTERN,
  MAX_AUTHORIZATION_LENGTH,
  parseAuthorization,
  secretMatches,
} from './key-format.ts';

describe('API key format', () => {
  it('generates ark_<16 id chars>_<43 secret chars> with 256 random bits and distinct keys', () => {
    const keys = Array.from({ length: 200 }, () => generateKey());
    for (const k of keys) {
      expect(k.key).toMatch(KEY_PATTERN);
      expect(Buffer.from(k.secret, 'base64url')).toHaveLength(32);
      expect(k.secretSha256.equals(hashSecret(k.secret))).toBe(true);
    }
    expect(new Set(keys.map((k) => k.keyId)).size).toBe(200);
    expect(new Set(keys.map((k) => k.secret)).size).toBe(200);
  });

  it('parses a Bearer header and refuses everything else', () => {
    const k = generateKey();
    expect(parseAuthorization(`Bearer ${k.key}`)).toEqual({ keyId: k.keyId, secret: k.secret });
    // Schemes are case-insensitive (RFC 9110 §11.1), Basic's as Bearer's.
    for (const scheme of ['bearer', 'BEARER', 'bEaReR'])
      expect(parseAuthorization(`${scheme} ${k.key}`), scheme).toEqual({ keyId: k.keyId, secret: k.secret });
    const userPass = Buffer.from(`u:${k.key}`).toString('base64');
    for (const scheme of ['basic', 'BASIC'])
      expect(parseAuthorization(`${scheme} ${userPass}`), scheme).toEqual({ keyId: k.keyId, secret: k.secret });
    for (const bad of [
      undefined,
      '',
      'Bearer',
      `Basic ${k.key}`,
      k.key,
      `Bearer ${k.key}x`,
      `Bearer ${k.key.slice(0, -1)}`,
      `Bearer ${k.key} extra`,
      `Bearer ark_${k.keyId.toUpperCase()}_${k.secret}`,
      `Bearer ${'a'.repeat(300)}`,
      ['Bearer', k.key],
      42,
      `xBearer ${k.key}`,
      `Bearer x${k.key}`,
      `Bearer ${k.key.slice(0, 4)}x${k.key.slice(4)}`,
    ]) {
      expect(parseAuthorization(bad)).toBeUndefined();
    }
    // Spaces around the key are allowed; a header past the length bound is refused unread.
    expect(parseAuthorization(`Bearer   ${k.key}  `)).toEqual({ keyId: k.keyId, secret: k.secret });
    const padded = (length: number) => `Bearer ${k.key}`.padEnd(length, ' ');
    expect(parseAuthorization(padded(MAX_AUTHORIZATION_LENGTH))).toEqual({ keyId: k.keyId, secret: k.secret });
    expect(parseAuthorization(padded(MAX_AUTHORIZATION_LENGTH + 1))).toBeUndefined();
  });

  it('draws key ids from the whole alphabet', () => {
    const seen = new Set(Array.from({ length: 100 }, () => generateKey().keyId).join(''));
    // 1,600 draws from 36 letters: each is missing with probability (35/36)^1600 < 1e-19.
    expect(seen.size).toBe(36);
  });

  it('finds a key, or most of one, in text pasted around it', () => {
    const { key } = generateKey();
    for (const text of [key, ` ${key}`, `${key}\n`, `Bearer ${key}`, `${key}x`, key.slice(0, -1), key.slice(0, 22)])
      expect(holdsKey(text), JSON.stringify(text)).toBe(true);
    for (const text of ['ci-bot', 'spark_jobs', key.slice(0, 21), 'ark_0123456789abcdef', 'no-such-principal'])
      expect(holdsKey(text), JSON.stringify(text)).toBe(false);
  });

  it('compares secrets against the stored digest', () => {
    const k = generateKey();
    expect(secretMatches(k.secret, k.secretSha256)).toBe(true);
    expect(secretMatches(generateKey().secret, k.secretSha256)).toBe(false);
    expect(secretMatches(k.secret, Buffer.alloc(5))).toBe(false);
  });
});
