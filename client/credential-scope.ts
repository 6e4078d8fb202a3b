/**
 * Pure: which origins may receive the API key. A URL on the command line may come from anyone (a
 * link pasted from a chat, a script's argument), so the key goes only to origins the operator named
 * as gateways (`--url` / ARKVORY_URL, `--mirror`), never to whatever host a URL names.
 */

const DEFAULT_PORTS: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };

/**
 * `scheme://host:port` with the scheme and host lowercased (IDNA and IPv6 as WHATWG URL spells them)
 * and the port always written (`http://gw` and `http://GW:80/x` are the same origin); undefined for
 * anything but an http(s) URL. A trailing dot makes another host, as it does for a browser's origin.
 */
export function normalizedOrigin(url: string): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  const defaultPort = DEFAULT_PORTS[parsed.protocol];
  if (defaultPort === undefined || parsed.hostname === '') return undefined;
  return `${parsed.protocol}//${parsed.hostname}:${parsed.port || defaultPort}`;
}

/** The origins a key may go to: the normalized origins of `trusted` (URLs or bare origins; others ignored). */
export class KeyScope {
  readonly #origins: ReadonlySet<string>;
  constructor(trusted: readonly (string | undefined)[]) {
    this.#origins = new Set(
      trusted.flatMap((t) => {
        const origin = t === undefined ? undefined : normalizedOrigin(t);
        return origin === undefined ? [] : [origin];
      }),
    );
  }

  /** Whether the key may be sent with a request to `url`. */
  allows(url: string): boolean {
    const origin = normalizedOrigin(url);
    return origin !== undefined && this.#origins.has(origin);
  }
}

/**
 * `path` (an absolute path the gateway answered, such as an upload session's `url`) on `origin`, or
 * undefined when joining them would lead anywhere else (`@evil/x` reads as user info before another
 * host): every request to it carries the key.
 */
export function pathOnOrigin(origin: string, path: unknown): string | undefined {
  if (typeof path !== 'string' || !path.startsWith('/')) return undefined;
  const url = `${origin}${path}`;
  const expected = normalizedOrigin(origin);
  return expected !== undefined && normalizedOrigin(url) === expected ? url : undefined;
}
