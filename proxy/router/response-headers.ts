import type http from 'node:http';

/** Hop-by-hop response headers; the router's own connection decides these. */
const HOP_BY_HOP_RESPONSE = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'trailer',
  'te',
]);

/** A gateway's response headers as the router relays them: hop-by-hop ones (and those `Connection` names) dropped. */
export function responseHeadersFrom(headers: http.IncomingHttpHeaders): Record<string, string | string[]> {
  // A gateway names no header in `Connection` as a rule: no set to build then.
  const named =
    headers.connection === undefined
      ? undefined
      : new Set(
          String(headers.connection)
            .split(',')
            .map((h) => h.trim().toLowerCase())
            .filter(Boolean),
        );
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP_RESPONSE.has(name) || named?.has(name)) continue;
    out[name] = value;
  }
  return out;
}
