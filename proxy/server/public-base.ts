/**
 * Where clients reach this gateway, for the URLs it hands out (pre-signed links, multipart session
 * URLs, the console's redirect and cookie path): an origin and a path prefix. Either the operator's
 * ARKVORY_PUBLIC_URL, which then stands whatever a request says, or the request's own word: its Host
 * (over HTTP/2 `:authority`), unless a trusted proxy names its client's host (`forwardedHost`), the
 * scheme it arrived with (`requestScheme`), and a trusted proxy's `X-Forwarded-Prefix`.
 */
import type { IncomingMessage } from 'node:http';
import {
  forwardedHost,
  forwardedPrefix,
  isAuthorityText,
  requestScheme,
  type TrustedProxies,
} from '../router/forwarded.ts';

/** An origin (`https://tools.example.com`, or `''` when the request names no usable one) and a path prefix (`/arkvory`, or `''`). */
export interface PublicBase {
  readonly origin: string;
  readonly prefix: string;
}

/** What decides a request's `PublicBase`: the trusted proxies, and ARKVORY_PUBLIC_URL when set. */
export interface PublicBaseOptions {
  readonly trusted: TrustedProxies;
  /** ARKVORY_PUBLIC_URL as `parsePublicUrl` gives it; undefined: from each request. */
  readonly publicUrl?: string | undefined;
}

/** The longest ARKVORY_PUBLIC_URL path taken, as for `X-Forwarded-Prefix`. */
const MAX_PREFIX_LENGTH = 256;

/**
 * ARKVORY_PUBLIC_URL: an `http://` or `https://` URL with a host, no user info, query or fragment,
 * and a path of plain segments (letters, digits, `-._~`; no `.` or `..`, no encoded byte, at most 256
 * characters) or none. Its value is the origin and that path without a trailing slash
 * (`https://tools.example.com/arkvory`).
 */
export function parsePublicUrl(text: string): { ok: true; value: string } | { ok: false; problem: string } {
  const bad = (why: string) => ({
    ok: false as const,
    problem: `${why}: expected an http:// or https:// origin with an optional path (https://tools.example.com or https://tools.example.com/arkvory), got ${JSON.stringify(text)}`,
  });
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return bad('not a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return bad('not http or https');
  if (url.username !== '' || url.password !== '') return bad('user info is not allowed');
  // `new URL` drops an empty `?` or `#`, and resolves `.`/`..` segments, encoded ones too: the text
  // is checked for them as written.
  if (url.search !== '' || url.hash !== '' || /[?#]/.test(text)) return bad('a query or fragment is not allowed');
  if (/%|\\|\/\.{1,2}(?:\/|$)/.test(text.slice(url.protocol.length + 2))) return bad('the path is not plain segments');
  if (!isAuthorityText(url.host)) return bad('not a plain host');
  const path = url.pathname === '/' ? '' : url.pathname.replace(/\/$/, '');
  if (
    path.length > MAX_PREFIX_LENGTH ||
    !/^(?:\/[A-Za-z0-9._~-]+)*$/.test(path) ||
    path.split('/').some((segment) => segment === '.' || segment === '..')
  )
    return bad('the path is not plain segments');
  return { ok: true, value: `${url.origin}${path}` };
}

/** The request's origin as it named it: scheme from `requestScheme`, host from a trusted proxy or Host/`:authority`. */
function requestOrigin(req: IncomingMessage, trusted: TrustedProxies): string {
  const named = forwardedHost(req, trusted);
  const authority = req.headers[':authority'];
  const host = named ?? req.headers.host ?? (typeof authority === 'string' ? authority : undefined);
  if (host === undefined || !isAuthorityText(host)) return '';
  return `${requestScheme(req, trusted).scheme}://${host}`;
}

/** Where the client of `req` reaches this gateway (see the module's comment). */
export function publicBase(req: IncomingMessage, options: PublicBaseOptions): PublicBase {
  if (options.publicUrl !== undefined) {
    const url = new URL(options.publicUrl);
    return { origin: url.origin, prefix: url.pathname === '/' ? '' : url.pathname };
  }
  return { origin: requestOrigin(req, options.trusted), prefix: forwardedPrefix(req, options.trusted) };
}
