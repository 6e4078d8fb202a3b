/**
 * An HTTP/2 request seen as the HTTP/1.1 head the router forwards (its upstream to gateways is
 * HTTP/1.1): the pseudo-header fields (`:method`, `:path`, `:scheme`, `:authority`) are not headers
 * and are never forwarded, and `:authority` becomes the `Host` an HTTP/2 client need not send
 * (RFC 9113 §8.3.1); a body without `Content-Length` (HTTP/2 ends it with END_STREAM) is announced as
 * chunked, as HTTP/1.1 would. Connection-specific headers cannot arrive (node:http2 refuses a request with
 * them); `te` is dropped by the hop-by-hop rules as for HTTP/1.1.
 */
import type { IncomingMessage } from 'node:http';
import { isHttp2 } from '../server/http2-messages.ts';

/** Rewrites `req.rawHeaders` (and `req.headers.host`) of an HTTP/2 request in place; HTTP/1.1 requests are left alone. */
export function asHttp1Head(req: IncomingMessage): void {
  if (!isHttp2(req)) return;
  const raw = req.rawHeaders;
  const head: string[] = [];
  let host = false;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.charCodeAt(0) === 58 /* ':' */) continue;
    if (name === 'host') host = true;
    head.push(name, raw[i + 1]!);
  }
  const authority = req.headers[':authority'];
  if (!host && typeof authority === 'string') {
    head.unshift('host', authority);
    req.headers.host = authority;
  }
  // A body without Content-Length is delimited by END_STREAM in HTTP/2; in HTTP/1.1 it is chunked.
  if (!req.stream.endAfterHeaders && req.headers['content-length'] === undefined) {
    head.push('transfer-encoding', 'chunked');
    req.headers['transfer-encoding'] = 'chunked';
  }
  Object.defineProperty(req, 'rawHeaders', { value: head, configurable: true });
}
