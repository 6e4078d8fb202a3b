/**
 * Pure pieces of pre-signed links: the query parameters a link carries, the canonical form of the
 * path it is bound to, and the HMAC-SHA256 over both. No I/O, no clock: callers pass `nowMs`.
 *
 * A link is `<content path>?X-Arkvory-Key=<keyId>&X-Arkvory-Expires=<unix s>&X-Arkvory-Secret=<id>&X-Arkvory-Signature=<b64url>`.
 * The signature binds the path, the key id that made it, the expiry and which server secret signed
 * it; the key is checked again on every use, so revoking it kills its links.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const PRESIGN_PARAMS = {
  key: 'X-Arkvory-Key',
  expires: 'X-Arkvory-Expires',
  secret: 'X-Arkvory-Secret',
  signature: 'X-Arkvory-Signature',
} as const;

export interface PresignFields {
  /** Canonical path (see `canonicalPath`). */
  readonly path: string;
  readonly keyId: string;
  /** Expiry, whole seconds since the epoch. */
  readonly expiresAt: number;
  readonly secretId: string;
}

export interface PresignedQuery extends Omit<PresignFields, 'path'> {
  readonly signature: string;
}

/** Decodes and re-encodes every segment, so `%40` and `@` name the same target; undefined when undecodable. */
export function canonicalPath(pathname: string): string | undefined {
  try {
    return pathname
      .split('/')
      .map((segment) => encodeURIComponent(decodeURIComponent(segment)))
      .join('/');
  } catch {
    // undecodable: no canonical form
  }
  return undefined;
}

export function signPresign(secret: Buffer, fields: PresignFields): string {
  const payload = ['arkvory-presign-v1', fields.path, fields.keyId, String(fields.expiresAt), fields.secretId].join(
    '\n',
  );
  return createHmac('sha256', secret).update(payload, 'utf8').digest('base64url');
}

export function signatureMatches(secret: Buffer, fields: PresignFields, presented: string): boolean {
  const expected = Buffer.from(signPresign(secret, fields), 'utf8');
  const given = Buffer.from(presented, 'utf8');
  return expected.length === given.length && timingSafeEqual(expected, given);
}

/** True when the request carries any presign parameter (it is then judged as a link, not anonymous). */
export function hasPresignParams(query: URLSearchParams): boolean {
  return Object.values(PRESIGN_PARAMS).some((name) => query.has(name));
}

/** The link's parameters, or undefined when one is missing, repeated or malformed. */
export function parsePresignQuery(query: URLSearchParams): PresignedQuery | undefined {
  const one = (name: string): string | undefined => {
    const all = query.getAll(name);
    return all.length === 1 ? all[0] : undefined;
  };
  const keyId = one(PRESIGN_PARAMS.key);
  const expires = one(PRESIGN_PARAMS.expires);
  const secretId = one(PRESIGN_PARAMS.secret);
  const signature = one(PRESIGN_PARAMS.signature);
  if (!keyId || !/^[a-z0-9]{16}$/.test(keyId)) return undefined;
  if (!expires || !/^[0-9]{1,12}$/.test(expires)) return undefined;
  if (!secretId || !/^[0-9]{1,18}$/.test(secretId)) return undefined;
  if (!signature || !/^[A-Za-z0-9_-]{43}$/.test(signature)) return undefined;
  return { keyId, expiresAt: Number(expires), secretId, signature };
}

/** The query string of a link (without `?`). */
export function presignQueryString(fields: PresignFields, signature: string): string {
  const q = new URLSearchParams();
  q.set(PRESIGN_PARAMS.key, fields.keyId);
  q.set(PRESIGN_PARAMS.expires, String(fields.expiresAt));
  q.set(PRESIGN_PARAMS.secret, fields.secretId);
  q.set(PRESIGN_PARAMS.signature, signature);
  return q.toString();
}

/** A link's lifetime in seconds: the request's (default `defaultSeconds`), within 1..max; else the problem text. */
export function linkLifetime(
  requested: unknown,
  defaultSeconds: number,
  maxSeconds: number,
): { ok: true; seconds: number } | { ok: false; problem: string } {
  if (requested === undefined) return { ok: true, seconds: Math.min(defaultSeconds, maxSeconds) };
  if (typeof requested !== 'number' || !Number.isSafeInteger(requested) || requested < 1 || requested > maxSeconds) {
    return {
      ok: false,
      problem: `expiresInSeconds must be an integer from 1 to ${maxSeconds} (ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS)`,
    };
  }
  return { ok: true, seconds: requested };
}
