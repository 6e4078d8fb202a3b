/**
 * `s3://<bucket>/<optional prefix>`: where the S3 store keeps its layout. Pure parsing; the object
 * key of a store-relative name is `<prefix><name>` (the prefix, when set, ends with `/`).
 */
import { redactUrl } from '../../lib/redact-url.ts';

export interface S3Location {
  readonly bucket: string;
  /** '' or `a/b/`. */
  readonly prefix: string;
}

/** S3's most parts in one multipart upload. */
export const S3_MAX_PARTS = 10_000;
/** S3's largest part of a multipart upload (5 GiB). */
export const S3_MAX_PART_BYTES = 5 * 1024 ** 3;
/**
 * The largest object one multipart upload can create: 10 000 parts of 5 GiB (about 48.8 TiB). Here
 * rather than in s3-transfer.ts: the configuration checks it without loading the S3 client.
 */
export const S3_MAX_MULTIPART_BYTES = S3_MAX_PARTS * S3_MAX_PART_BYTES;

/** S3 bucket naming rules (3–63 characters, lowercase letters, digits, dots, hyphens). */
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

export type ParsedS3Location = { ok: true; value: S3Location } | { ok: false; problem: string };

export function parseS3Url(url: string): ParsedS3Location {
  const m = /^s3:\/\/([^/?#]*)(\/[^?#]*)?$/.exec(url);
  if (!m)
    return {
      ok: false,
      problem: `expected s3://<bucket>/<optional prefix> without query or fragment, got ${JSON.stringify(redactUrl(url))}`,
    };
  const bucket = m[1]!;
  if (!BUCKET.test(bucket) || bucket.includes('..'))
    return {
      ok: false,
      problem: `"${bucket}" is not a valid S3 bucket name (3-63 lowercase letters, digits, dots and hyphens)`,
    };
  const parts = (m[2] ?? '').split('/').filter((p) => p !== '');
  if (parts.some((p) => p === '.' || p === '..'))
    return { ok: false, problem: `the prefix of "${url}" may not contain . or .. segments` };
  return { ok: true, value: { bucket, prefix: parts.length === 0 ? '' : `${parts.join('/')}/` } };
}

/** `s3://bucket/prefix/` for messages. */
export function formatS3Location(location: S3Location): string {
  return `s3://${location.bucket}/${location.prefix}`;
}

/** The path of a path-style request: `/<bucket>/<key>`, each key segment percent-encoded once. */
export function pathStyleObjectPath(bucket: string, key: string): string {
  return `/${bucket}/${key.split('/').map(encodeRfc3986).join('/')}`;
}

/** encodeURIComponent plus the characters SigV4 also wants encoded. */
export function encodeRfc3986(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}
