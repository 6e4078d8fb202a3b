/**
 * Large ranged GETs of the S3 store over a plain TCP socket that reads into one reused buffer
 * (`net.connect({ onread })`), for `http:` endpoints. Why: relaying a large body through undici,
 * every socket read allocates a fresh buffer, undici copies it into its WASM parser and hands it
 * through stream and iterator layers, and the garbage (external buffer memory) forces major
 * collections and grows the RSS with parallel downloads (docs/storage-and-content.md, "The S3
 * store"). Reading into one buffer per download allocates nothing per chunk; the caller's read()
 * copies out of it (stream.ts' reused buffers).
 *
 * Only a success answer is read here: 206 whose Content-Range starts where asked and does not stop
 * short (or 200 for a range from byte 0), with a Content-Length and no Transfer-Encoding. Anything else (an error
 * answer, a redirect, a chunked body) gives 'fallback': the caller repeats the request through
 * undici, which reads the answer and maps it. The connection is not reused (`connection: close`),
 * so no state outlives a download; the connect costs little next to the ≥ 1 MiB read.
 */
import net from 'node:net';
import { StorageError } from '../errors.ts';
import { parseContentRange, upstreamError } from '../streaming/http-upstream.ts';
import { announceSocketRequest } from '../streaming/socket-request-channels.ts';
import { type RangeStream, strongEtag } from '../streaming/range-stream.ts';

/** Ranges at least this long use a socket of their own; shorter ones the keep-alive undici pool (no connect). */
export const SOCKET_READ_MIN_BYTES = 1024 * 1024;
/** Bytes the socket reads into per download (the whole upstream-side buffer of a download). */
export const SOCKET_READ_BUFFER_BYTES = 256 * 1024;
/** A response head longer than this is refused (S3 answers carry a dozen headers). */
const MAX_HEAD_BYTES = 64 * 1024;

export interface ResponseHead {
  readonly status: number;
  /** Lower-case names; repeated fields joined with ", " (RFC 9110 §5.3). */
  readonly headers: ReadonlyMap<string, string>;
  /** Bytes of the head including its closing blank line. */
  readonly headBytes: number;
}

const malformed = (what: string, detail: string) =>
  new StorageError('upstream_unreachable', `The artifact store answered ${what} with ${detail}.`);

/** Parses an HTTP/1.x response head at the start of `bytes`; undefined while it is incomplete. */
export function parseResponseHead(bytes: Buffer, what: string): ResponseHead | undefined {
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0) {
    if (bytes.length > MAX_HEAD_BYTES) throw malformed(what, `a response head over ${MAX_HEAD_BYTES} bytes`);
    return undefined;
  }
  const [statusLine = '', ...lines] = bytes.toString('latin1', 0, end).split('\r\n');
  const status = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(statusLine);
  if (!status) throw malformed(what, `a status line that is not HTTP/1.x: ${JSON.stringify(statusLine.slice(0, 80))}`);
  const headers = new Map<string, string>();
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon <= 0 || /[\s]/.test(line.slice(0, colon)))
      throw malformed(what, `a malformed header line: ${JSON.stringify(line.slice(0, 80))}`);
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    const before = headers.get(name);
    headers.set(name, before === undefined ? value : `${before}, ${value}`);
  }
  return { status: Number(status[1]), headers, headBytes: end + 4 };
}

/**
 * The body length and object size of an answer the socket path reads, or undefined for every
 * other answer (left to undici): 206 for `start` to `end` (or to the object's end before it), or
 * 200 when `start` is 0, with one Content-Length and no Transfer-Encoding.
 */
export function acceptedBody(
  head: ResponseHead,
  start: number,
  end: number,
): { length: number; size: number } | undefined {
  if (head.headers.has('transfer-encoding')) return undefined;
  const contentLength = head.headers.get('content-length');
  if (contentLength === undefined || !/^\d+$/.test(contentLength)) return undefined;
  const length = Number(contentLength);
  if (head.status === 206) {
    const range = parseContentRange(head.headers.get('content-range'));
    if (!range || range.start !== start || range.end - range.start + 1 !== length) return undefined;
    // A range that stops short inside the object would end the read as if the blob ended there.
    if (range.end < Math.min(end, range.size - 1)) return undefined;
    return { length, size: range.size };
  }
  if (head.status === 200 && start === 0) return { length, size: length };
  return undefined;
}

export interface SocketReadOptions {
  readonly host: string;
  readonly port: number;
  readonly connectTimeoutMs: number;
  /**
   * Longest wait for the answer's whole head (however the server paces it, as undici's header
   * timeout), and longest silence while the body flows (not while paused).
   */
  readonly timeoutMs: number;
  readonly bufferBytes?: number | undefined;
}

/**
 * Sends `GET path` with `headers` (signed, Host included; their Range asks `start` to `end`) and
 * resolves once the answer's head is read: a RangeStream over its body, or 'fallback' (see above;
 * the connection is closed).
 * Failing to connect or a head that does not come in time reject as undici's would.
 */
export function openSocketRange(
  options: SocketReadOptions,
  request: { readonly path: string; readonly headers: Readonly<Record<string, string>> },
  start: number,
  end: number,
): Promise<RangeStream | 'fallback'> {
  const what = `GET ${request.path}`;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  const announced = announceSocketRequest('GET', `http://${host}:${options.port}`, request.path, request.headers);
  const buffer = Buffer.allocUnsafe(options.bufferBytes ?? SOCKET_READ_BUFFER_BYTES);
  let head: Buffer | undefined = Buffer.alloc(0);
  /** Unread body bytes are buffer[availStart, availEnd); the socket is paused while there are any. */
  let availStart = 0;
  let availEnd = 0;
  let bodyLeft = 0;
  let paused = false;
  let failure: Error | undefined;
  let wake: (() => void) | undefined;
  let settleHead: ((value: RangeStream | 'fallback' | Error) => void) | undefined;

  const pause = () => {
    paused = true;
    socket.setTimeout(0);
    return false;
  };
  const resume = () => {
    if (!paused || socket.destroyed) return;
    paused = false;
    socket.setTimeout(options.timeoutMs);
    socket.resume();
  };
  const fail = (err: Error) => {
    failure ??= err;
    announced.failed(failure);
    settleHead?.(failure);
    settleHead = undefined;
    wake?.();
  };

  const stream: RangeStream = {
    position: start,
    sizeBytes: 0,
    etag: undefined,
    async next(maxBytes) {
      const chunk = Buffer.allocUnsafe(Math.min(maxBytes, buffer.length));
      const n = await stream.readInto(chunk, 0, chunk.length);
      return n === 0 ? undefined : chunk.subarray(0, n);
    },
    async readInto(target, offset, length) {
      for (;;) {
        if (availEnd > availStart) {
          const n = Math.min(length, availEnd - availStart);
          buffer.copy(target, offset, availStart, availStart + n);
          availStart += n;
          stream.position += n;
          if (availStart === availEnd && bodyLeft > 0) resume();
          return n;
        }
        if (bodyLeft === 0) return 0;
        if (failure) throw failure;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    },
    destroy() {
      announced.finished();
      socket.destroy();
    },
  };

  function onBody(bytes: number): boolean {
    const n = Math.min(bytes, bodyLeft);
    bodyLeft -= n;
    // The body starts at buffer[0] (onHead moved it there); bytes past the announced length are ignored.
    availStart = 0;
    availEnd = n;
    if (bodyLeft === 0) {
      announced.finished();
      socket.destroy();
    }
    wake?.();
    return n > 0 ? pause() : true;
  }

  function onHead(nread: number): boolean {
    head = Buffer.concat([head!, buffer.subarray(0, nread)]);
    let parsed: ResponseHead | undefined;
    try {
      parsed = parseResponseHead(head, what);
    } catch (err) {
      socket.destroy(err as Error);
      return false;
    }
    if (!parsed) return true;
    clearTimeout(headDeadline);
    announced.answered(parsed.status);
    const body = acceptedBody(parsed, start, end);
    const rest = head.subarray(parsed.headBytes);
    head = undefined;
    if (!body) {
      announced.finished();
      settleHead?.('fallback');
      settleHead = undefined;
      socket.destroy();
      return false;
    }
    (stream as { sizeBytes: number }).sizeBytes = body.size;
    (stream as { etag: string | undefined }).etag = strongEtag(parsed.headers.get('etag'));
    bodyLeft = body.length;
    rest.copy(buffer, 0);
    const keepReading = onBody(rest.length);
    settleHead?.(stream);
    settleHead = undefined;
    return keepReading;
  }

  const socket = net.connect({
    host: options.host,
    port: options.port,
    noDelay: true,
    onread: {
      buffer,
      callback: (nread: number) => {
        if (nread <= 0) return true;
        return head ? onHead(nread) : onBody(nread);
      },
    },
  });
  /** The head must be whole within the timeout: the socket's own timer only counts silence. */
  let headDeadline: NodeJS.Timeout | undefined;
  socket.setTimeout(options.connectTimeoutMs);
  socket.once('connect', () => {
    socket.setTimeout(options.timeoutMs);
    headDeadline = setTimeout(
      () =>
        socket.destroy(
          new StorageError(
            'upstream_timeout',
            `The artifact store did not answer in time (${what}: no whole head within ${options.timeoutMs} ms).`,
          ),
        ),
      options.timeoutMs,
    );
  });
  socket.on('timeout', () =>
    socket.destroy(
      new StorageError(
        'upstream_timeout',
        `The artifact store did not answer in time (${what}: no byte for ${socket.connecting ? options.connectTimeoutMs : options.timeoutMs} ms).`,
      ),
    ),
  );
  socket.on('error', (err) => fail(upstreamError(err, what)));
  socket.on('close', () => {
    clearTimeout(headDeadline);
    if (head) fail(upstreamError(new Error('the connection closed before the answer'), what));
    else if (bodyLeft > 0)
      fail(upstreamError(new Error(`the connection closed with ${bodyLeft} bytes of the body still to come`), what));
  });
  socket.write(`GET ${request.path} HTTP/1.1\r\n${announced.headLines}connection: close\r\n\r\n`);

  return new Promise((resolve, reject) => {
    settleHead = (value) => (value instanceof Error ? reject(value) : resolve(value));
    if (failure) fail(failure);
  });
}
