/**
 * API keys: `ark_<keyId>_<secret>`, keyId 16 chars [a-z0-9], secret 43 chars base64url (256 random
 * bits). Only sha256(secret) is stored: with 256 bits of entropy a slow hash adds nothing.
 */
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';
import { keyFromBasic } from './basic-credentials.ts';

const KEY_ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
export const KEY_PATTERN = /^ark_([a-z0-9]{16})_([A-Za-z0-9_-]{43})$/;
/** A key id and the start of its secret, anywhere in a text (see `holdsKey`). */
const KEY_INSIDE = /ark_[a-z0-9]{16}_[A-Za-z0-9_-]/;
/** Longest Authorization value worth parsing; anything longer is refused unread. */
export const MAX_AUTHORIZATION_LENGTH = 512;

export interface GeneratedKey {
  keyId: string;
  secret: string;
  /** The whole key, shown once. */
  key: string;
  secretSha256: Buffer;
}

function randomKeyId(): string {
  // 36^16 ≈ 2^82 ids; rejection sampling keeps the alphabet uniform.
  let id = '';
  while (id.length < 16) {
    for (const byte of randomBytes(32)) {
      if (id.length === 16) break;
      // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent within a test's reach: without the bound the ids lean by 1/64 toward 4 letters (>= is killed)
      if (byte < 252) id += KEY_ID_ALPHABET[byte % 36];
    }
  }
  return id;
}

export function generateKey(): GeneratedKey {
  const keyId = randomKeyId();
  const secret = randomBytes(32).toString('base64url');
  return { keyId, secret, key: `ark_${keyId}_${secret}`, secretSha256: hashSecret(secret) };
}

export function hashSecret(secret: string): Buffer {
  // One-shot: cheaper than createHash().update().digest(), and it runs on every authenticated request.
  return hash('sha256', secret, 'buffer');
}

/**
 * Whether `text` holds a key or most of one: a whole key, or one pasted with what a copy brings along
 * (a blank or newline, `Bearer `, a character too many or too few). Such text is never quoted back.
 */
export function holdsKey(text: string): boolean {
  return KEY_INSIDE.test(text);
}

/** Parses `Bearer <key>` or `Basic base64(user:key)`; anything else (missing, other scheme, malformed key) → undefined. */
export function parseAuthorization(header: unknown): { keyId: string; secret: string } | undefined {
  if (typeof header !== 'string' || header.length > MAX_AUTHORIZATION_LENGTH) return undefined;
  const bearer = /^Bearer +(\S+) *$/i.exec(header);
  const presented = bearer ? bearer[1]! : keyFromBasic(header);
  // Stryker disable next-line ConditionalExpression: equivalent: KEY_PATTERN finds no key in undefined either
  if (presented === undefined) return undefined;
  const key = KEY_PATTERN.exec(presented);
  if (!key) return undefined;
  return { keyId: key[1]!, secret: key[2]! };
}

/** Constant-time comparison of a presented secret with the stored digest. */
export function secretMatches(secret: string, storedSha256: Buffer): boolean {
  const presented = hashSecret(secret);
  return storedSha256.length === presented.length && timingSafeEqual(presented, storedSha256);
}
