/**
 * `url.path` of a server span: the path the request is routed by, never anything else its target
 * may carry. An absolute-form (`http://user:password@host/p`) or scheme-relative (`//user:pw@host/p`)
 * target brings user info, and any target may bring a query (a pre-signed link's signature).
 */
import { REDACTED } from '../../lib/redact-url.ts';
import { simplePathname } from '../server/request-path.ts';

// Not an authority's: `/` then neither `/` nor `\` (which the WHATWG parser reads as `/`).
const ORIGIN_FORM = /^\/(?![/\\])/;

/** The pathname `new URL(target, base)` gives; undefined when the target is no URL at all. */
export function spanPath(target: string): string | undefined {
  // `OPTIONS *`: the asterisk form names no path.
  if (target === '*') return target;
  const simple = simplePathname(target);
  if (simple !== undefined) return simple;
  let pathname: string;
  try {
    pathname = new URL(target, 'http://span.invalid').pathname;
  } catch {
    return undefined;
  }
  // After an authority, a path holding `@` is what is left of a password holding `/` or `:`.
  if (!ORIGIN_FORM.test(target) && pathname.includes('@')) return `/${REDACTED}`;
  return pathname;
}
