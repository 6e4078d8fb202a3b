/**
 * An HTTP/2 request seen as the HTTP/1.1 head the router forwards (its upstream to gateways is
 * HTTP/1.1): the pseudo-header fields (`:method`, `:path`, `:scheme`, `:authority`) are not headers
 * and are never forwarded, and `:authority` becomes the `Host` (RFC 9113 §8.3.1: an intermediary
 * forwarding over HTTP/1.1 MUST set `Host` from `:authority`, and a recipient MUST NOT use `Host`
 * to find the target when `:authority` is present); a body without `Content-Length` (HTTP/2 ends
 * it with END_STREAM) is announced as chunked, as HTTP/1.1 would, and `cookie` crumbs go on as one
 * `Cookie` (RFC 9113 §8.2.3). Connection-specific headers
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
 * The HTTP/1.1 head an HTTP/2 request's raw header list (`raw`, pseudo-header fields included)
 * stands for, pure: no pseudo-header field; `Host` first, from `authority` when there is one; the
 * `cookie` crumbs joined into one field with "; " where the first stood (RFC 9113 §8.2.3: a client
 * may split its cookies into crumbs for HPACK, and they MUST be joined before the request goes on
 * over HTTP/1.1, where a second `Cookie` line is not allowed (RFC 6265 §5.4) and a gateway other
 * than node:http may read the first one only); `Transfer-Encoding: chunked` added when `chunked`.
 * The fault instead when a `Host` names another authority.
 */
function http1Head(raw: readonly string[], authority: string | undefined, chunked: boolean): string[] | ClientFault {
  // Host names compare case-insensitively (RFC 3986 §3.2.2); anything else is another authority.
  const wanted = authority === undefined ? '' : authority.toLowerCase();
  const head: string[] = authority === undefined ? [] : ['host', authority];
  /** Where the one `cookie` field's value is in `head` (-1: none yet). */
  let cookie = -1;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const value = raw[i + 1]!;
    if (name.charCodeAt(0) === 58 /* ':' */) continue;
    // HTTP/2 field names are lower case (node:http2 resets a stream with another).
    if (authority !== undefined && name === 'host') {
      if (value.toLowerCase() !== wanted) return AUTHORITY_MISMATCH;
      // The same authority: the one Host forwarded is `:authority`'s, put first above.
      continue;
    }
    if (name === 'cookie') {
      if (cookie !== -1) {
        head[cookie] = `${head[cookie]}; ${value}`;
        continue;
      }
      cookie = head.length + 1;
    }
    head.push(name, value);
  }
  if (chunked) head.push('transfer-encoding', 'chunked');
  return head;
}

/**
 * Rewrites `req.rawHeaders` (and `req.headers.host`) of an HTTP/2 request in place (`http1Head`);
 * HTTP/1.1 requests are left alone. Returns the fault when its `Host` and `:authority` disagree
 * (then the request must not be forwarded).
 */
export function asHttp1Head(req: IncomingMessage): ClientFault | undefined {
  if (!isHttp2(req)) return undefined;
  const given = req.headers[':authority'];
  const authority = typeof given === 'string' ? given : undefined;
  // A body without Content-Length is delimited by END_STREAM in HTTP/2; in HTTP/1.1 it is chunked.
  const chunked = !req.stream.endAfterHeaders && req.headers['content-length'] === undefined;
  const head = http1Head(req.rawHeaders, authority, chunked);
  if (!Array.isArray(head)) return head;
  if (authority !== undefined) req.headers.host = authority;
  if (chunked) req.headers['transfer-encoding'] = 'chunked';
  Object.defineProperty(req, 'rawHeaders', { value: head, configurable: true });
  return undefined;
}
