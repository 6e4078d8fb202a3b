/**
 * Headers a listener puts on every answer it gives, whoever makes the answer (a route, an error, the
 * front door's 503, a 408 for a stalled body, a response the router relays): Strict-Transport-Security
 * on a TLS listener with ARKVORY_TLS_HSTS (proxy/tls/hsts.ts). Added where every head leaves, in
 * `writeHead` (node:http and node:http2's compatibility API both call it for an implicit head), so no
 * route has to remember them; the listener's value replaces one of the same name given there.
 */
import type { OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Http2Response } from './http2-messages.ts';

type Headers = OutgoingHttpHeaders | readonly OutgoingHttpHeader[];

/** Name/value pairs, names in lower case. */
export type AnswerHeaders = readonly (readonly [string, string])[];

/**
 * `given` (an object, or a raw list flat or of pairs, as `writeHead` takes them) with `extra` added,
 * any header of the same name (in any case) given there dropped. A raw list stays a raw list, so
 * node:http's fast path (no header object built) is kept. `given` itself is not changed.
 */
export function withAnswerHeaders(given: Headers | undefined, extra: AnswerHeaders): Headers {
  if (given === undefined) return Object.fromEntries(extra);
  if (!Array.isArray(given)) {
    const object: OutgoingHttpHeaders = {};
    for (const name in given) if (!named(extra, name)) object[name] = (given as OutgoingHttpHeaders)[name];
    for (const [name, value] of extra) object[name] = value;
    return object;
  }
  const list: OutgoingHttpHeader[] = [];
  if (given.length > 0 && Array.isArray(given[0])) {
    for (const pair of given as unknown as readonly (readonly [string, OutgoingHttpHeader])[])
      if (!named(extra, String(pair[0]))) list.push(pair[0], pair[1]);
  } else {
    for (let i = 0; i + 1 < given.length; i += 2)
      if (!named(extra, String(given[i]))) list.push(given[i]!, given[i + 1]!);
  }
  for (const [name, value] of extra) list.push(name, value);
  return list;
}

function named(extra: AnswerHeaders, name: string): boolean {
  for (const [lower] of extra) if (name.length === lower.length && name.toLowerCase() === lower) return true;
  return false;
}

/** `Base` (node:http's response, or the gateway's) whose every head also carries `extra`. */
export function http1AnsweringWith(Base: typeof ServerResponse, extra: AnswerHeaders): typeof ServerResponse {
  type Http1Headers = OutgoingHttpHeaders | OutgoingHttpHeader[];
  const Answering = class extends Base {
    override writeHead(statusCode: number, reasonOrHeaders?: string | Http1Headers, maybeHeaders?: Http1Headers): this {
      // 1xx heads leave by writeContinue & co., never here; a second head throws in Node as it would.
      if (this.headersSent) return super.writeHead(statusCode, reasonOrHeaders as string, maybeHeaders);
      const reason = typeof reasonOrHeaders === 'string' ? reasonOrHeaders : undefined;
      const given = typeof reasonOrHeaders === 'string' ? maybeHeaders : (reasonOrHeaders ?? maybeHeaders);
      return super.writeHead(statusCode, reason, withAnswerHeaders(given, extra) as Http1Headers);
    }
  };
  return Answering as unknown as typeof ServerResponse;
}

/** The HTTP/2 response whose every head also carries `extra`. */
export function http2AnsweringWith(extra: AnswerHeaders): typeof Http2Response {
  return class extends Http2Response {
    override writeHead(statusCode: number, reasonOrHeaders?: string | Headers, maybeHeaders?: Headers): this {
      const given = typeof reasonOrHeaders === 'string' ? maybeHeaders : (reasonOrHeaders ?? maybeHeaders);
      return super.writeHead(statusCode, withAnswerHeaders(given, extra));
    }
  };
}
