/**
 * The request and response objects of an HTTP/2 stream, as the gateway and the router use them
 * (node:http2's compatibility API, shaped like node:http's): one stream is one request, and what
 * the gateway measured on the socket for HTTP/1.1 (bytes in and out of a request, whether the
 * client is gone) is measured on the stream here, since one connection carries many requests.
 */
import http2 from 'node:http2';
import type { IncomingMessage, OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { withEarlyHeader } from './gateway-response.ts';

/** Connection-specific headers HTTP/2 forbids (RFC 9113 §8.2.2): dropped from an answer, never sent. */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

/** A request on an HTTP/2 stream that counts the body bytes it received. */
export class Http2Request extends http2.Http2ServerRequest {
  /** Request body bytes received on this stream. */
  bodyBytesRead = 0;

  override push(chunk: unknown, encoding?: BufferEncoding): boolean {
    if (chunk !== null && chunk !== undefined) this.bodyBytesRead += (chunk as Buffer).length;
    return super.push(chunk, encoding);
  }
}

type Headers = OutgoingHttpHeaders | readonly OutgoingHttpHeader[];

/**
 * A response on an HTTP/2 stream: counts the body bytes written, drops connection-specific headers
 * (a `Connection: close` the HTTP/1.1 path adds would make node:http2 warn, a `Transfer-Encoding`
 * would throw), and keeps the gateway's early headers (`addEarlyHeader`) for the status line.
 *
 * `writeHead` hands the stream one header object itself instead of going through node:http2's
 * compatibility `writeHead`, which validates and stores every header one `setHeader` at a time and
 * then has the stream validate them all again, and which always asks for trailers: one more
 * callback and an empty DATA frame per stream. Nothing here sends trailers (`addTrailers` is not
 * used), so the last DATA frame carries END_STREAM.
 */
export class Http2Response extends http2.Http2ServerResponse {
  /** The request this answers, told when the response closes (proxy/server/request-exchange.ts). */
  exchange: { closed(): void } | undefined = undefined;
  /** Response body bytes written to this stream. */
  bodyBytesWritten = 0;
  /** Name/value pairs, names in lower case, for the status line; a header of the same name given to `writeHead` wins. */
  #early: string[] | undefined;

  /** node:http's `shouldKeepAlive`: the connection is shared by other streams, so it stays open. */
  shouldKeepAlive = true;

  addEarlyHeader(name: string, value: string): void {
    this.#early = withEarlyHeader(this.#early, name, value);
  }

  override setHeader(name: string, value: number | string | readonly string[]): this {
    if (!CONNECTION_HEADERS.has(name.toLowerCase())) super.setHeader(name, value);
    return this;
  }

  override appendHeader(name: string, value: string | readonly string[]): this {
    if (!CONNECTION_HEADERS.has(name.toLowerCase())) super.appendHeader(name, value as string | string[]);
    return this;
  }

  override writeHead(statusCode: number, headers?: Headers): this;
  override writeHead(statusCode: number, statusMessage: string, headers?: Headers): this;
  override writeHead(statusCode: number, reasonOrHeaders?: string | Headers, maybeHeaders?: Headers): this {
    // The reason phrase does not exist in HTTP/2: never passed on (node:http2 would warn).
    const given = typeof reasonOrHeaders === 'string' ? maybeHeaders : reasonOrHeaders;
    const stream = this.stream;
    // A response that cannot send (closed, or sent already): node:http2's answer, ignored or thrown.
    if (stream.destroyed || stream.closed || stream.headersSent)
      return super.writeHead(statusCode, withoutConnectionHeaders(given) as OutgoingHttpHeaders);
    const headers = this.getHeaders() as Record<string, OutgoingHttpHeader>;
    if (given !== undefined) mergeGiven(headers, given);
    const early = this.#early;
    if (early !== undefined) {
      this.#early = undefined;
      for (let i = 0; i < early.length; i += 2)
        if (headers[early[i]!] === undefined) headers[early[i]!] = early[i + 1]!;
    }
    // The setter checks the range (1xx and > 599 throw, as node:http2's writeHead does).
    this.statusCode = statusCode;
    headers[':status'] = statusCode;
    // `end()` before any write: the status line carries END_STREAM (writableEnded is the compat's "ending").
    // `sendDate` is an option node:http2 reads (the Date header) that its types leave out.
    const options = { endStream: this.writableEnded, sendDate: this.sendDate };
    stream.respond(headers as http2.OutgoingHttpHeaders, options as http2.ServerStreamResponseOptions);
    return this;
  }

  override write(chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
    if (typeof chunk === 'string') this.bodyBytesWritten += Buffer.byteLength(chunk);
    else if (chunk) this.bodyBytesWritten += (chunk as Uint8Array).byteLength;
    return (super.write as (...a: unknown[]) => boolean)(chunk, encoding, cb);
  }
}

/**
 * Adds `given` to `headers` (those set before, names in lower case): a given name replaces a set
 * one; a name repeated in a list adds values (node:http2's `writeHead` semantics). Connection-specific
 * headers are dropped.
 */
function mergeGiven(headers: Record<string, OutgoingHttpHeader>, given: Headers): void {
  if (!Array.isArray(given)) {
    const object = given as OutgoingHttpHeaders;
    for (const name in object) {
      const value = object[name];
      if (value === undefined) continue;
      const lower = name.toLowerCase();
      if (!CONNECTION_HEADERS.has(lower)) headers[lower] = value;
    }
    return;
  }
  const fromList = new Set<string>();
  const add = (name: string, value: OutgoingHttpHeader) => {
    const lower = name.toLowerCase();
    if (CONNECTION_HEADERS.has(lower)) return;
    const existing = headers[lower];
    if (!fromList.has(lower) || existing === undefined) {
      fromList.add(lower);
      headers[lower] = value;
    } else headers[lower] = [...asList(existing), ...asList(value)];
  };
  if (given.length > 0 && Array.isArray(given[0])) {
    for (const [name, value] of given as unknown as readonly [string, OutgoingHttpHeader][]) add(String(name), value);
  } else {
    for (let i = 0; i + 1 < given.length; i += 2) add(String(given[i]), given[i + 1]!);
  }
}

function asList(value: OutgoingHttpHeader): string[] {
  return Array.isArray(value) ? value.map(String) : [String(value)];
}

// node:http2 never sets `destroyed` on a response: the gateway's code reads it to know the client
// is gone (reset or closed), as on node:http. (Typed as a property, so defined here, not as an accessor.)
Object.defineProperty(Http2Response.prototype, 'destroyed', {
  get(this: Http2Response): boolean {
    return this.stream.destroyed;
  },
});

function withoutConnectionHeaders(headers: Headers | undefined): Headers | undefined {
  if (headers === undefined) return undefined;
  if (!Array.isArray(headers)) {
    const object = headers as OutgoingHttpHeaders;
    let copy: OutgoingHttpHeaders | undefined;
    for (const name in object) {
      if (!CONNECTION_HEADERS.has(name.toLowerCase())) continue;
      copy ??= { ...object };
      delete copy[name];
    }
    return copy ?? object;
  }
  if (headers.length > 0 && Array.isArray(headers[0])) {
    const pairs = headers as unknown as readonly [string, OutgoingHttpHeader][];
    return pairs.filter(([name]) => !CONNECTION_HEADERS.has(String(name).toLowerCase())) as unknown as Headers;
  }
  const out: OutgoingHttpHeader[] = [];
  for (let i = 0; i + 1 < headers.length; i += 2)
    if (!CONNECTION_HEADERS.has(String(headers[i]).toLowerCase())) out.push(headers[i]!, headers[i + 1]!);
  return out;
}

/** True when the request arrived on an HTTP/2 stream. */
export function isHttp2(req: IncomingMessage): req is IncomingMessage & Http2Request {
  return req instanceof http2.Http2ServerRequest;
}

/** Bytes a request moved, from the moment this is called: its own stream's, or its connection's for HTTP/1.1. */
export interface ByteCounts {
  read(): number;
  written(): number;
}

/**
 * Counts what one request moves. HTTP/1.1 answers one request at a time per connection, so the
 * socket's counters are the request's (head and framing included, as before); over HTTP/2 the
 * socket is shared by every stream, so the stream's own body bytes are counted instead.
 */
export function byteCounts(req: IncomingMessage, res: ServerResponse): ByteCounts {
  if (isHttp2(req) && res instanceof Http2Response) {
    const readAtStart = req.bodyBytesRead;
    const writtenAtStart = res.bodyBytesWritten;
    return { read: () => req.bodyBytesRead - readAtStart, written: () => res.bodyBytesWritten - writtenAtStart };
  }
  const socket = req.socket as Socket;
  const readAtStart = socket.bytesRead;
  const writtenAtStart = socket.bytesWritten;
  return { read: () => socket.bytesRead - readAtStart, written: () => socket.bytesWritten - writtenAtStart };
}
