/**
 * Diagnostics channels for the requests the S3 store sends over sockets of its own
 * (s3-socket-read.ts, s3-socket-write.ts), published with the message shapes of undici's
 * `undici:request:*` channels, so whoever follows undici's requests follows these too: tracing
 * (proxy/tracing/undici-spans.ts) adds the W3C `traceparent` and a client span. Nobody subscribes
 * while tracing is off: then no message is made and no header added.
 */
import diagnostics from 'node:diagnostics_channel';

export const SOCKET_REQUEST_CHANNELS = {
  create: 'arkvory:socket-request:create',
  headers: 'arkvory:socket-request:headers',
  done: 'arkvory:socket-request:done',
  error: 'arkvory:socket-request:error',
} as const;

const create = diagnostics.channel(SOCKET_REQUEST_CHANNELS.create);
const headers = diagnostics.channel(SOCKET_REQUEST_CHANNELS.headers);
const done = diagnostics.channel(SOCKET_REQUEST_CHANNELS.done);
const error = diagnostics.channel(SOCKET_REQUEST_CHANNELS.error);

/** What a `create` subscriber sees: undici's request shape (flat name/value list, `addHeader`). */
export interface SocketRequest {
  readonly method: string;
  readonly origin: string;
  readonly path: string;
  readonly headers: string[];
  addHeader(name: string, value: string): void;
}

export interface AnnouncedRequest {
  /** The request's header lines (each ending in CRLF), with whatever a subscriber added. */
  readonly headLines: string;
  /** The answer's head arrived with this status. */
  answered(statusCode: number): void;
  /** The exchange is over (body read or written, or left to another path). */
  finished(): void;
  failed(err: unknown): void;
}

const lines = (list: readonly string[]): string => {
  let text = '';
  for (let i = 0; i < list.length; i += 2) text += `${list[i]}: ${list[i + 1]}\r\n`;
  return text;
};

/** Announces `method path` to `origin` (`http://host:port`) with `head` (signed, Host included). */
export function announceSocketRequest(
  method: string,
  origin: string,
  path: string,
  head: Readonly<Record<string, string>>,
): AnnouncedRequest {
  const list = Object.entries(head).flat();
  if (!create.hasSubscribers)
    return { headLines: lines(list), answered: () => {}, finished: () => {}, failed: () => {} };
  const request: SocketRequest = {
    method,
    origin,
    path,
    headers: list,
    addHeader: (name, value) => {
      list.push(name, value);
    },
  };
  create.publish({ request });
  let over = false;
  return {
    headLines: lines(list),
    answered: (statusCode) => {
      if (!over) headers.publish({ request, response: { statusCode } });
    },
    finished: () => {
      if (over) return;
      over = true;
      done.publish({ request });
    },
    failed: (err) => {
      if (over) return;
      over = true;
      error.publish({ request, error: err });
    },
  };
}
