/**
 * Operator URLs as a log line, a configuration problem or a command's output may show them. A URL
 * can carry a secret in its user info (`user:password@`), in its query (`?password=`,
 * `?X-Amz-Signature=`) and, malformed, anywhere: only what cannot be a secret is shown.
 */

/** What stands for a part taken out: user info, query, fragment, a path that may hold a password. */
export const REDACTED = '<redacted>';
/** What stands for text that is not a URL and could hold a secret. */
export const UNPARSEABLE_URL = '<unparseable URL>';

// Text with nothing a secret could hide behind (no `@`, `?`, `#`, `%`, quote or space) and at
// most one colon (a scheme's or a port's, never `user:password`): shown, so a typo can be fixed.
const HARMLESS = /^[A-Za-z0-9._~+\-/]*(:[A-Za-z0-9._~+\-/]*)?$/;
// An opaque path (`scheme:path`, no `//`): in `redis:user:pw@host` it is a password, not a path.
const HARMLESS_OPAQUE = /^[A-Za-z0-9._~+\-/]*$/;

/**
 * `raw` as `scheme://host/path`, user info as `<redacted>@`, a query as `?<redacted>`, a fragment
 * as `#<redacted>`; as given when it has none of these. The WHATWG parser decides what is user
 * info, as the clients reading the URL do (`http:svc:pw@host` and `http:\\svc:pw@host` carry
 * credentials too). A path holding `@` is what is left of a password holding `/` or `:` that the
 * parser took for a host and a path: it goes too. Text that does not parse is shown only when it
 * cannot hold a secret. Never truncate before this: a cut URL no longer parses and its secret may
 * lie past the cut.
 */
export function redactUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // A list where one URL belongs: each entry on its own (a comma in a password leaves two
    // halves that do not parse, neither shown).
    if (raw.includes(',')) return redactUrlList(raw);
    return HARMLESS.test(raw) ? raw : UNPARSEABLE_URL;
  }
  const userinfo = url.username !== '' || url.password !== '';
  let shown: string;
  if (url.href.startsWith(`${url.protocol}//`)) {
    const path = url.pathname.includes('@') ? `/${REDACTED}` : url.pathname;
    shown = `${url.protocol}//${userinfo ? `${REDACTED}@` : ''}${url.host}${path}`;
  } else shown = `${url.protocol}${HARMLESS_OPAQUE.test(url.pathname) ? url.pathname : REDACTED}`;
  if (url.search !== '') shown += `?${REDACTED}`;
  if (url.hash !== '') shown += `#${REDACTED}`;
  // Nothing taken out: the operator's own spelling, easier to find in their configuration.
  return shown.includes(REDACTED) ? shown : raw;
}

/** A comma-separated list of URLs, each entry redacted (the spaces around it kept). */
export function redactUrlList(raw: string): string {
  return raw
    .split(',')
    .map((entry) => {
      const url = entry.trim();
      return url === '' ? entry : entry.replace(url, () => redactUrl(url));
    })
    .join(',');
}

/**
 * `text` (a line someone else wrote) with every one of `urls` it quotes, whole or one entry of a
 * comma-separated list, raw or JSON-escaped, replaced by its redacted form.
 */
export function redactQuotedUrls(text: string, urls: Iterable<string>): string {
  const replacements = new Map<string, string>();
  for (const value of urls) {
    const entries = value.split(',');
    for (const quoted of new Set([value, ...entries, ...entries.map((e) => e.trim())])) {
      const redacted = redactUrlList(quoted);
      // Only what hides something: a harmless URL stays as the line quoted it, not normalised.
      if (!redacted.includes(REDACTED) && !redacted.includes(UNPARSEABLE_URL)) continue;
      replacements.set(quoted, redacted);
      replacements.set(JSON.stringify(quoted).slice(1, -1), redacted);
    }
  }
  // Longest first: a list is replaced whole before its entries are looked for.
  let out = text;
  for (const [secret, redacted] of [...replacements].sort(([a], [b]) => b.length - a.length))
    out = out.replaceAll(secret, () => redacted);
  return out;
}
