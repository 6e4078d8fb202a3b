import type http from 'node:http';

/**
 * `headers` without the hop-by-hop names in `hopByHop` and without those its `Connection` header
 * names (RFC 9110 §7.6.1): what a proxy may pass on, in either direction.
 */
export function endToEndHeaders(
  headers: http.IncomingHttpHeaders,
  hopByHop: ReadonlySet<string>,
): Record<string, string | string[]> {
  const connection = headers.connection === undefined ? undefined : String(headers.connection);
  // Most peers send `Connection: keep-alive` or nothing: no set of named headers to build then.
  const named =
    connection === undefined || /^\s*keep-alive\s*$/i.test(connection)
      ? undefined
      : new Set(
          connection
            .split(',')
            .map((h) => h.trim().toLowerCase())
            .filter(Boolean),
        );
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || hopByHop.has(name) || named?.has(name)) continue;
    out[name] = value;
  }
  return out;
}
