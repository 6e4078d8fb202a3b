/**
 * Gateway addresses as the router uses them: an http(s) origin, nothing else. Keys never travel in
 * a URL, so user info, a path, a query or a fragment is refused rather than silently dropped.
 */
import { redactUrl } from '../../lib/redact-url.ts';

export function parseOrigin(text: string): { ok: true; value: string } | { ok: false; problem: string } {
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    return {
      ok: false,
      problem: `expected an http:// or https:// origin such as http://10.0.0.5:8080, got ${JSON.stringify(redactUrl(text.trim()))}`,
    };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return { ok: false, problem: `expected scheme http:// or https://, got ${JSON.stringify(redactUrl(text.trim()))}` };
  if (url.username || url.password)
    return {
      ok: false,
      problem: `credentials do not belong in a gateway URL, got ${JSON.stringify(url.host)} with user info`,
    };
  if ((url.pathname !== '/' && url.pathname !== '') || url.search || url.hash)
    return {
      ok: false,
      problem: `expected an origin without path, query or fragment, got ${JSON.stringify(redactUrl(text.trim()))}`,
    };
  return { ok: true, value: url.origin };
}

/** ARKVORY_ROUTER_BACKENDS: comma-separated origins, the first one the writer. */
export function parseBackendList(text: string): { ok: true; value: string[] } | { ok: false; problem: string } {
  const origins: string[] = [];
  for (const part of text.split(',')) {
    if (part.trim() === '') continue;
    const parsed = parseOrigin(part);
    if (!parsed.ok) return parsed;
    if (origins.includes(parsed.value)) return { ok: false, problem: `${parsed.value} is listed twice` };
    origins.push(parsed.value);
  }
  if (origins.length === 0) return { ok: false, problem: 'expected at least one origin (the writer first)' };
  return { ok: true, value: origins };
}
