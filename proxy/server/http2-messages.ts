/**
 * The request and response objects of an HTTP/2 stream, as the gateway and the router use them
 * (node:http2's compatibility API, shaped like node:http's): one stream is one request, and what
 * the gateway measured on the socket for HTTP/1.1 (bytes in and out of a request, whether the
 * client is gone) is measured on the stream here, since one connection carries many requests.
 */
import http2 from 'node:http2';
import type { IncomingMessage, OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { AnswerBudget } from './front-door/http2-send-budget.ts';
import { withEarlyHeader } from './gateway-response.ts';

/** Connection-specific headers HTTP/2 forbids (RFC 9113 §8.2.2): dropped from an answer, never sent. */
const { NGHTTP2_NO_ERROR } = http2.constants;

const CONNECTION_HEADERS = new Set([
  'connection',
  'http2-settings',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
]);

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
 * Why `writeHead` hands the stream one list itself: node:http2's compatibility `writeHead` stores
 * every header one `setHeader` at a time in a dictionary object (validating and lower-casing each),
 * which the stream then copies and validates again; a visible share of a small answer's CPU. With
 * nothing set progressively, the list goes to the stream as it is, with what the compatibility
 * layer adds: the Date field and `waitForTrailers` (its empty trailers keep a half-closed stream
 * open until the answer's last frame, which h2spec's 5.1/6 depends on).
 */
export class Http2Response extends http2.Http2ServerResponse {
  /** The request this answers, told when the response closes (proxy/server/request-exchange.ts). */
  exchange: { closed(): void } | undefined = undefined;
  /** Response body bytes written to this stream. */
  bodyBytesWritten = 0;
  /** Its session's send budget (front-door/http2-send-budget.ts), which a streamed body waits on: set when admitted. */
  sendBudget: AnswerBudget | undefined = undefined;

  /** node:http's `shouldKeepAlive`: the connection is shared by other streams, so it stays open. */
  shouldKeepAlive = true;

  /** Name/value pairs, names in lower case, for the status line (gateway-response.ts's `withEarlyHeader`). */
  #early: string[] | undefined;
  /** A header was set through the progressive API: node:http2 merges, and the early ones join that way. */
  #progressive = false;

  /** Adds `name: value` to the answer; a header of the same name given to `writeHead` replaces it. */
  addEarlyHeader(name: string, value: string): void {
    this.#early = withEarlyHeader(this.#early, name, value);
  }

  override setHeader(name: string, value: number | string | readonly string[]): this {
    this.#progressive = true;
    if (!CONNECTION_HEADERS.has(name.toLowerCase())) super.setHeader(name, value);
    return this;
  }

  override appendHeader(name: string, value: string | readonly string[]): this {
    this.#progressive = true;
    if (!CONNECTION_HEADERS.has(name.toLowerCase())) super.appendHeader(name, value as string | string[]);
    return this;
  }

  override writeHead(statusCode: number, headers?: Headers): this;
  override writeHead(statusCode: number, statusMessage: string, headers?: Headers): this;
  override writeHead(statusCode: number, reasonOrHeaders?: string | Headers, maybeHeaders?: Headers): this {
    // The reason phrase does not exist in HTTP/2: never passed on (node:http2 would warn).
    const given = typeof reasonOrHeaders === 'string' ? maybeHeaders : (reasonOrHeaders ?? maybeHeaders);
    const early = this.#early;
    this.#early = undefined;
    const { stream } = this;
    // Set progressively, or a stream that cannot answer (node:http2 ignores that or throws): its own path.
    if (this.#progressive || stream.destroyed || stream.closed || stream.headersSent) {
      if (early !== undefined && !stream.headersSent)
        for (let i = 0; i < early.length; i += 2)
          if (!this.hasHeader(early[i]!) && !isGiven(given, early[i]!)) super.setHeader(early[i]!, early[i + 1]!);
      return super.writeHead(statusCode, withoutConnectionHeaders(given) as OutgoingHttpHeaders);
    }
    // The setter refuses what node:http2 refuses (1xx, out of range); `statusCode` readers (the audit) see it.
    this.statusCode = statusCode;
    const list: OutgoingHttpHeader[] = [':status', statusCode];
    if (early !== undefined)
      for (let i = 0; i < early.length; i += 2) if (!isGiven(given, early[i]!)) list.push(early[i]!, early[i + 1]!);
    if (given !== undefined) appendWithoutConnectionHeaders(list, given);
    // `end()` before any write: the status line carries END_STREAM (writableEnded is the compat's "ending").
    // `sendDate` is an option node:http2 reads (the Date field) that its types leave out.
    const options = { endStream: this.writableEnded, waitForTrailers: true, sendDate: this.sendDate };
    stream.respond(list as unknown as http2.OutgoingHttpHeaders, options as http2.ServerStreamResponseOptions);
    return this;
  }

  override write(chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
    if (typeof chunk === 'string') this.bodyBytesWritten += Buffer.byteLength(chunk);
    else if (chunk) this.bodyBytesWritten += (chunk as Uint8Array).byteLength;
    return (super.write as (...a: unknown[]) => boolean)(chunk, encoding, cb);
  }
}

// node:http2 never sets `destroyed` on a response: the gateway's code reads it to know the client
// is gone (reset or closed), as on node:http. (Typed as a property, so defined here, not as an accessor.)
Object.defineProperty(Http2Response.prototype, 'destroyed', {
  get(this: Http2Response): boolean {
    return this.stream.destroyed;
  },
});

// node:http2 answers `writableFinished` with the stream's own flag, which a client's RST_STREAM sets
// too (the stream's writable side is ended as it closes): a reset response would read as finished,
// and nothing waiting for it (admission, a governor, a body) would be aborted. Finished here means
// as on node:http: the whole answer was handed over and the stream ended without an error code.
Object.defineProperty(Http2Response.prototype, 'writableFinished', {
  get(this: Http2Response): boolean {
    const { stream } = this;
    return this.writableEnded && stream.writableFinished && stream.rstCode === NGHTTP2_NO_ERROR;
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

/** Appends `headers` (an object, a flat list or a list of pairs) to the flat `list`, connection headers left out. */
function appendWithoutConnectionHeaders(list: OutgoingHttpHeader[], headers: Headers): void {
  if (!Array.isArray(headers)) {
    const object = headers as OutgoingHttpHeaders;
    for (const name in object) {
      const value = object[name];
      if (value !== undefined && !CONNECTION_HEADERS.has(name.toLowerCase())) list.push(name, value);
    }
    return;
  }
  if (headers.length > 0 && Array.isArray(headers[0])) {
    for (const [name, value] of headers as unknown as readonly [string, OutgoingHttpHeader][])
      if (!CONNECTION_HEADERS.has(String(name).toLowerCase())) list.push(name, value);
    return;
  }
  for (let i = 0; i + 1 < headers.length; i += 2)
    if (!CONNECTION_HEADERS.has(String(headers[i]).toLowerCase())) list.push(headers[i]!, headers[i + 1]!);
}

/** True when `headers` names `lower` (objects by their lower-case key, as the gateway writes them; lists without case). */
function isGiven(headers: Headers | undefined, lower: string): boolean {
  if (headers === undefined) return false;
  if (!Array.isArray(headers)) return (headers as OutgoingHttpHeaders)[lower] !== undefined;
  if (headers.length > 0 && Array.isArray(headers[0])) {
    for (const [name] of headers as unknown as readonly [string, OutgoingHttpHeader][])
      if (String(name).toLowerCase() === lower) return true;
    return false;
  }
  for (let i = 0; i + 1 < headers.length; i += 2) if (String(headers[i]).toLowerCase() === lower) return true;
  return false;
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
 * socket is shared by every stream, so the stream's own body bytes are counted instead. Classes,
 * not closures: the request path takes up to three of these per request.
 */
export function byteCounts(req: IncomingMessage, res: ServerResponse): ByteCounts {
  if (isHttp2(req) && res instanceof Http2Response) return new StreamByteCounts(req, res);
  return new SocketByteCounts(req.socket as Socket);
}

/** How far an HTTP/1.1 connection's bytes in were counted for its requests (`requestByteCounts`). */
const countedIn = new WeakMap<Socket, number>();

/**
 * What one whole request moves, for its request line, the request metrics and the usage statistics:
 * `byteCounts`, except that over HTTP/1.1 bytes in are counted from where the connection's previous
 * request stopped (0 on a new connection), not from now: Node has read the request's head by the time
 * it starts, and the head is the request's too. Requests on a connection are handled one after the
 * other (front-door.ts), so each head is counted once. `end()` marks where the next one starts.
 */
export function requestByteCounts(req: IncomingMessage, res: ServerResponse): ByteCounts & { end(): void } {
  if (isHttp2(req) && res instanceof Http2Response) return new StreamByteCounts(req, res);
  const socket = req.socket as Socket;
  return new SocketByteCounts(socket, countedIn.get(socket) ?? 0, countedIn);
}

class StreamByteCounts implements ByteCounts {
  readonly #req: Http2Request;
  readonly #res: Http2Response;
  readonly #readAtStart: number;
  readonly #writtenAtStart: number;

  constructor(req: Http2Request, res: Http2Response) {
    this.#req = req;
    this.#res = res;
    this.#readAtStart = req.bodyBytesRead;
    this.#writtenAtStart = res.bodyBytesWritten;
  }

  read(): number {
    return this.#req.bodyBytesRead - this.#readAtStart;
  }

  /**
   * Body bytes the client was sent: those written less those the stream still queues, which a reset
   * discards (a client with a zero window takes none; the send budget lets up to 1 MiB queue).
   */
  written(): number {
    const written = this.#res.bodyBytesWritten - this.#writtenAtStart;
    return written - Math.min(written, this.#res.stream.bufferSize);
  }

  /** Nothing to mark: a stream carries one request. */
  end(): void {}
}

class SocketByteCounts implements ByteCounts {
  readonly #socket: Socket;
  readonly #readAtStart: number;
  readonly #writtenAtStart: number;
  readonly #marks: WeakMap<Socket, number> | undefined;

  constructor(socket: Socket, readFrom = socket.bytesRead, marks?: WeakMap<Socket, number>) {
    this.#socket = socket;
    this.#readAtStart = readFrom;
    this.#writtenAtStart = socket.bytesWritten;
    this.#marks = marks;
  }

  /** The request is over: the connection's next request counts its bytes in from here. */
  end(): void {
    this.#marks?.set(this.#socket, this.#socket.bytesRead);
  }

  read(): number {
    return this.#socket.bytesRead - this.#readAtStart;
  }

  written(): number {
    return this.#socket.bytesWritten - this.#writtenAtStart;
  }
}
