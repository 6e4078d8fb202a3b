/**
 * An HTTP/2 request seen as the HTTP/1.1 head the router forwards (its upstream to gateways is
 * HTTP/1.1): the pseudo-header fields (`:method`, `:path`, `:scheme`, `:authority`) are not headers
 * and are never forwarded, and `:authority` becomes the `Host` (RFC 9113 §8.3.1: an intermediary
 * forwarding over HTTP/1.1 MUST set `Host` from `:authority`, and a recipient MUST NOT use `Host`
 * to find the target when `:authority` is present); a body without `Content-Length` (HTTP/2 ends
 * it with END_STREAM) is announced as chunked, as HTTP/1.1 would. Connection-specific headers
 * cannot arrive (node:http2 refuses a request with them); `te` is dropped by the hop-by-hop rules
 * as for HTTP/1.1.
 */
import type { IncomingMessage } from 'node:http';
import { isHttp2 } from '../server/http2-messages.ts';
import type { ClientFault } from './forwardable.ts';

/**
 * A `Host` that names another authority than `:authority`: refused, as nginx does (RFC 9113
 * §8.3.1: clients MUST NOT send one, a server SHOULD treat the request as malformed). Which of the
 * two a gateway, a cache or a log in between would believe is not the router's to guess.
 */
export const AUTHORITY_MISMATCH: ClientFault = {
  kind: 'authority_mismatch',
  message: 'The Host header differs from the :authority pseudo-header (RFC 9113 §8.3.1).',
};

/**
 * Rewrites `req.rawHeaders` (and `req.headers.host`) of an HTTP/2 request in place; HTTP/1.1
 * requests are left alone. Returns the fault when its `Host` and `:authority` disagree (then the
 * request must not be forwarded).
 */
export function asHttp1Head(req: IncomingMessage): ClientFault | undefined {
  if (!isHttp2(req)) return undefined;
  const raw = req.rawHeaders;
  const authority = req.headers[':authority'];
  const hasAuthority = typeof authority === 'string';
  // Host names compare case-insensitively (RFC 3986 §3.2.2); anything else is another authority.
  const wanted = hasAuthority ? authority.toLowerCase() : '';
  const head: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.charCodeAt(0) === 58 /* ':' */) continue;
    if (hasAuthority && name === 'host') {
      if (raw[i + 1]!.toLowerCase() !== wanted) return AUTHORITY_MISMATCH;
      // The same authority: the one Host forwarded is `:authority`'s, added below.
      continue;
    }
    head.push(name, raw[i + 1]!);
  }
  if (hasAuthority) {
    head.unshift('host', authority);
    req.headers.host = authority;
  }
  // A body without Content-Length is delimited by END_STREAM in HTTP/2; in HTTP/1.1 it is chunked.
  if (!req.stream.endAfterHeaders && req.headers['content-length'] === undefined) {
    head.push('transfer-encoding', 'chunked');
    req.headers['transfer-encoding'] = 'chunked';
  }
  Object.defineProperty(req, 'rawHeaders', { value: head, configurable: true });
  return undefined;
}
