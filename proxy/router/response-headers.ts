import type http from 'node:http';
import { endToEndHeaders } from './hop-by-hop.ts';

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
  return endToEndHeaders(headers, HOP_BY_HOP_RESPONSE);
}
