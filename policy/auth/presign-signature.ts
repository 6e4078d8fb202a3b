/**
 * Pure pieces of pre-signed links: the query parameters a link carries, the canonical form of the
 * path it is bound to, and the HMAC-SHA256 over both. No I/O, no clock: callers pass `nowMs`.
 *
 * A link is `<content path>?X-Arkvory-Key=<keyId>&X-Arkvory-Date=<unix s>&X-Arkvory-Expires=<unix s>
 * &X-Arkvory-Secret=<id>&X-Arkvory-Digest=<sha256 hex>&X-Arkvory-Signature=<b64url>`.
 * The signature binds the path, the key id that made it, when it was made, the expiry, which server
 * secret signed it and the sha256 of the bytes the path held when it was made (format v2); the key
 * is checked again on every use, so revoking it kills its links, and the bytes served must still
 * have that digest. Numbers must be canonical (decimal digits, no leading zero): one link has one
 * spelling. A v1 link (no date, no digest) is recognised only to be refused (`isOutdatedLink`).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const PRESIGN_PARAMS = {
  key: 'X-Arkvory-Key',
  issued: 'X-Arkvory-Date',
  expires: 'X-Arkvory-Expires',
  secret: 'X-Arkvory-Secret',
  digest: 'X-Arkvory-Digest',
  signature: 'X-Arkvory-Signature',
} as const;

/** The parameters a link of the first format (before content binding) carried. */
const V1_PARAMS = [PRESIGN_PARAMS.key, PRESIGN_PARAMS.expires, PRESIGN_PARAMS.secret, PRESIGN_PARAMS.signature];

export interface PresignFields {
  /** Canonical path (see `canonicalPath`). */
  readonly path: string;
  readonly keyId: string;
  /** When the link was made by the database's clock, whole seconds (a re-enabled principal's older links die). */
  readonly issuedAt: number;
  /** Expiry, whole seconds since the epoch. */
  readonly expiresAt: number;
  readonly secretId: string;
  /** sha256 (hex) of the content the path held when the link was made. */
  readonly sha256: string;
}

/** Unix seconds: decimal digits without a leading zero (so `0100` and `100` are not two spellings). */
const SECONDS = /^(?:0|[1-9][0-9]{0,11})$/;
/** A secret id (bigint identity, from 1): the same canonical rule. */
const SECRET_ID = /^[1-9][0-9]{0,17}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;

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
  const payload = [
    'arkvory-presign-v2',
    fields.path,
    fields.keyId,
    String(fields.issuedAt),
    String(fields.expiresAt),
    fields.secretId,
    fields.sha256,
  ].join('\n');
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
  const issued = one(PRESIGN_PARAMS.issued);
  const expires = one(PRESIGN_PARAMS.expires);
  const secretId = one(PRESIGN_PARAMS.secret);
  const sha256 = one(PRESIGN_PARAMS.digest);
  const signature = one(PRESIGN_PARAMS.signature);
  if (!keyId || !/^[a-z0-9]{16}$/.test(keyId)) return undefined;
  if (!issued || !SECONDS.test(issued)) return undefined;
  if (!expires || !SECONDS.test(expires)) return undefined;
  if (!secretId || !SECRET_ID.test(secretId)) return undefined;
  if (!sha256 || !SHA256_HEX.test(sha256)) return undefined;
  if (!signature || !/^[A-Za-z0-9_-]{43}$/.test(signature)) return undefined;
  return { keyId, issuedAt: Number(issued), expiresAt: Number(expires), secretId, sha256, signature };
}

/**
 * True for a link of the first format: its four parameters and neither a date nor a digest. Such a
 * link was bound to a name, not to bytes, so it is refused (`link_outdated`), never verified.
 */
export function isOutdatedLink(query: URLSearchParams): boolean {
  return (
    V1_PARAMS.every((name) => query.getAll(name).length === 1) &&
    !query.has(PRESIGN_PARAMS.digest) &&
    !query.has(PRESIGN_PARAMS.issued)
  );
}

/** The query string of a link (without `?`). */
export function presignQueryString(fields: PresignFields, signature: string): string {
  const q = new URLSearchParams();
  q.set(PRESIGN_PARAMS.key, fields.keyId);
  q.set(PRESIGN_PARAMS.issued, String(fields.issuedAt));
  q.set(PRESIGN_PARAMS.expires, String(fields.expiresAt));
  q.set(PRESIGN_PARAMS.secret, fields.secretId);
  q.set(PRESIGN_PARAMS.digest, fields.sha256);
  q.set(PRESIGN_PARAMS.signature, signature);
  return q.toString();
}

/**
 * Slack for the clocks of the database, which dates a link, and the gateway checking it: a link made
 * for the whole maximum and checked on a host a few seconds behind still has no more than the maximum
 * left.
 */
export const PRESIGN_CLOCK_SKEW_SECONDS = 60;

/**
 * True when a link outlives the current maximum (`ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS`, which may
 * have been lowered since it was made): made for longer (`expiresAt − issuedAt`, both signed), or
 * with more than the maximum still to run at `nowMs` (beyond the clock slack). Lowering the maximum
 * thus shortens links already issued.
 */
export function outlivesMaxLifetime(
  link: Pick<PresignFields, 'issuedAt' | 'expiresAt'>,
  nowMs: number,
  maxSeconds: number,
): boolean {
  return (
    link.expiresAt - link.issuedAt > maxSeconds ||
    link.expiresAt * 1000 - nowMs > (maxSeconds + PRESIGN_CLOCK_SKEW_SECONDS) * 1000
  );
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

/**
 * True when a link made at `issuedAtS` (whole seconds, the database's clock) predates `atMs` (same
 * clock; undefined: never): the last removal of its principal's grant on the repository, or the
 * principal's last disable. Such a link stays void after the grant is given again or the principal
 * enabled again. A link made within that second counts as made before it (its date cannot tell),
 * so issuing waits for the next second (`msUntilLinkOutlivesRemoval`).
 */
export function linkPredates(issuedAtS: number, atMs: number | undefined): boolean {
  return atMs !== undefined && issuedAtS * 1000 <= atMs;
}

/**
 * How long to wait before a link dated `nowMs` (the database's clock) counts as made after the
 * grant removal (or the principal's disable, `disabled_at`) at `removedAtMs`: 0 when it already
 * does, else until the next whole second after it (a link made at once after a re-grant or a
 * re-enable would otherwise be void from birth).
 */
export function msUntilLinkOutlivesRemoval(nowMs: number, removedAtMs: number | undefined): number {
  if (!linkPredates(Math.floor(nowMs / 1000), removedAtMs)) return 0;
  return (Math.floor(removedAtMs! / 1000) + 1) * 1000 - nowMs;
}
