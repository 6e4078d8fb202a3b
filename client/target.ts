/**
 * Pure: what `arkvory get/put/presign` name on the command line. A full URL is used as it is; a
 * short `repo/id` (artifact), `repo/name/version` (package) or `repo/name/version/asset` is turned
 * into the v1 path on a base URL.
 */
import { ArkvoryClientError } from './errors.ts';

export interface Target {
  /** The base path (metadata, upload, presign): `/api/v1/repositories/…`. */
  readonly basePath: string;
  /** Where the bytes are: `basePath + /content`. */
  readonly contentPath: string;
}

export function targetOf(repo: string, segments: readonly string[]): Target {
  const e = encodeURIComponent;
  const bad = [repo, ...segments].find((s) => s === '' || s === '.' || s === '..');
  if (bad !== undefined || segments.length < 1 || segments.length > 3) {
    throw new ArkvoryClientError(
      'invalid_argument',
      'Name an artifact as <repo>/<id>, a package as <repo>/<name>/<version>, an asset as <repo>/<name>/<version>/<asset>.',
    );
  }
  const base = `/api/v1/repositories/${e(repo)}`;
  const [a, b, c] = segments as [string, string?, string?];
  const basePath =
    segments.length === 1
      ? `${base}/artifacts/${e(a)}`
      : segments.length === 2
        ? `${base}/packages/${e(a)}/${e(b!)}`
        : `${base}/packages/${e(a)}/${e(b!)}/assets/${e(c!)}`;
  return { basePath, contentPath: `${basePath}/content` };
}

/** `repo/a/b` (split on `/`) → its target. */
export function parseShortTarget(text: string): Target {
  const [repo, ...rest] = text.split('/');
  return targetOf(repo ?? '', rest);
}

/** A full http(s) URL, or a short target resolved on `baseUrl`; the content URL either way. */
export function contentUrl(text: string, baseUrl: string | undefined): string {
  if (/^https?:\/\//i.test(text)) return text;
  if (!baseUrl)
    throw new ArkvoryClientError(
      'invalid_argument',
      `"${text}" is not a URL; give the gateway's URL (--url or ARKVORY_URL) to resolve it.`,
    );
  return `${baseUrl.replace(/\/+$/, '')}${parseShortTarget(text).contentPath}`;
}

/** The base (upload) URL of a short target or of a content URL. */
export function baseUrlOf(text: string, baseUrl: string | undefined): string {
  const url = contentUrl(text, baseUrl);
  return url.replace(/\/content(\?.*)?$/, '');
}
