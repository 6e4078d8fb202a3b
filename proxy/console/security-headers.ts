/**
 * The headers every answer under `/console` carries, whoever makes it: the console's routes, and also
 * the gates' refusals (a 401 without a session, a 403 without the CSRF token or from another site, a
 * 429), an unknown `/console/…` path's 404 and a 405. Set on the answer before any of them runs
 * (proxy/server/http-server.ts), so no error path can leave a console answer frameable or sniffable.
 */

/** Strict CSP: only this origin's script and style files, no inline code, no framing. */
export const CONTENT_SECURITY_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export const CONSOLE_SECURITY_HEADERS: readonly (readonly [string, string])[] = [
  ['content-security-policy', CONTENT_SECURITY_POLICY],
  ['x-content-type-options', 'nosniff'],
  ['x-frame-options', 'DENY'],
  ['referrer-policy', 'no-referrer'],
  ['cross-origin-opener-policy', 'same-origin'],
  ['cross-origin-resource-policy', 'same-origin'],
];

/** Whether a request path is the console's (`/console` and everything under `/console/`). */
export function isConsolePath(pathname: string): boolean {
  return pathname === '/console' || pathname.startsWith('/console/');
}
