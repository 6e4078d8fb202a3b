/**
 * `url.path` of a server span: the path the request is routed by, never anything else its target
 * may carry, nor a key a client put in it. An absolute-form (`http://user:password@host/p`) or scheme-relative (`//user:pw@host/p`)
 * target brings user info, and any target may bring a query (a pre-signed link's signature).
 */
import { REDACTED } from '../../lib/redact-url.ts';
import { parseRequestTarget } from '../server/request-path.ts';

// Not an authority's: `/` then neither `/` nor `\` (which the WHATWG parser reads as `/`).
const ORIGIN_FORM = /^\/(?![/\\])/;

// An API key (policy/auth/key-format.ts) anywhere in a path: its id is kept, its secret is not,
// nor what there is of it (a key pasted one character short still holds all but 4 bits of it).
const KEY_IN_PATH = /(ark_[a-z0-9]{16}_)[A-Za-z0-9_-]{1,43}/g;

/**
 * The pathname the gateway routes by (`new URL(target, base)`'s), with the secret of any API key in
 * it taken out (an admin revoking a leaked key by pasting it where its id belongs); undefined when
 * the target is no URL at all.
 */
export function spanPath(target: string): string | undefined {
  const path = routedPath(target);
  return path?.includes('ark_') ? path.replace(KEY_IN_PATH, `$1${REDACTED}`) : path;
}

/** The path the gateway routes the target by (`parseRequestTarget`, so the span names that route). */
function routedPath(target: string): string | undefined {
  // `OPTIONS *`: the asterisk form names no path.
  if (target === '*') return target;
  const parsed = parseRequestTarget(target);
  if (parsed === undefined || typeof parsed === 'string') return parsed;
  const { pathname } = parsed;
  // After an authority, a path holding `@` is what is left of a password holding `/` or `:`.
  if (!ORIGIN_FORM.test(target) && pathname.includes('@')) return `/${REDACTED}`;
  return pathname;
}
