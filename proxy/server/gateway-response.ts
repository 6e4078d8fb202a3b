/**
 * The gateway's `ServerResponse`: headers the gateway adds to every answer before a route decides
 * it (the request id, the RateLimit fields) wait here and leave with the status line in one list.
 *
 * Why not `setHeader`: one header set that way sends Node down its slow path for the whole
 * response; every header later given to `writeHead` is then validated, lower-cased and stored one
 * `setHeader` at a time before being serialised, a visible share of a small request's CPU.
 * With nothing set progressively, `writeHead` serialises the list it is given directly.
 */
import type { IncomingMessage, OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import http from '../../lib/node-http.ts';

type Headers = OutgoingHttpHeaders | OutgoingHttpHeader[];

export class GatewayResponse<Request extends IncomingMessage = IncomingMessage> extends http.ServerResponse<Request> {
  /** The request this answers, told when the response closes (proxy/server/request-exchange.ts). */
  exchange: { closed(): void } | undefined = undefined;
  /** Name/value pairs, names in lower case, for the next status line. */
  #early: string[] | undefined;
  /** A header was set through the progressive API: Node merges, and the early ones join that way. */
  #progressive = false;

  /** Adds `name: value` to the answer; a header of the same name given to `writeHead` replaces it. */
  addEarlyHeader(name: string, value: string): void {
    this.#early = withEarlyHeader(this.#early, name, value);
  }

  override setHeader(name: string, value: number | string | readonly string[]): this {
    this.#progressive = true;
    return super.setHeader(name, value);
  }

  override appendHeader(name: string, value: string | readonly string[]): this {
    this.#progressive = true;
    return super.appendHeader(name, value);
  }

  /** The Content-Length the head declared, when it did (usage statistics count body bytes by it). */
  declaredLength: number | undefined;

  override writeHead(statusCode: number, reasonOrHeaders?: string | Headers, maybeHeaders?: Headers): this {
    const early = this.#early;
    const reason = typeof reasonOrHeaders === 'string' ? reasonOrHeaders : undefined;
    // As node:http: headers after an undefined reason are the headers.
    const given = typeof reasonOrHeaders === 'string' ? maybeHeaders : (reasonOrHeaders ?? maybeHeaders);
    this.declaredLength = contentLengthOf(given) ?? contentLengthOf(this.getHeader('content-length'));
    if (early === undefined || this.headersSent) return super.writeHead(statusCode, reason, given);
    this.#early = undefined;
    if (this.#progressive) {
      // Node's merge: the given headers win over set ones; the early ones only fill what is absent.
      for (let i = 0; i < early.length; i += 2)
        if (!this.hasHeader(early[i]!)) super.setHeader(early[i]!, early[i + 1]!);
      return super.writeHead(statusCode, reason, given);
    }
    const list: OutgoingHttpHeader[] = [];
    for (let i = 0; i < early.length; i += 2) if (!isGiven(given, early[i]!)) list.push(early[i]!, early[i + 1]!);
    if (Array.isArray(given)) appendList(list, given);
    else if (given) {
      for (const name in given) {
        const value = given[name];
        if (value !== undefined) list.push(name, value);
      }
    }
    return super.writeHead(statusCode, reason, list);
  }
}

/**
 * True when `headers` names `lower`. A raw list is compared without case; an object by its
 * lower-case key, one lookup (the gateway writes its header objects' names in lower case).
 */
function isGiven(headers: Headers | undefined, lower: string): boolean {
  if (headers === undefined) return false;
  if (!Array.isArray(headers)) return (headers as OutgoingHttpHeaders)[lower] !== undefined;
  for (const [name] of pairs(headers)) if (String(name).toLowerCase() === lower) return true;
  return false;
}

/** Appends a raw list (flat `[name, value, …]` or `[[name, value], …]`) to a flat one. */
function appendList(list: OutgoingHttpHeader[], headers: OutgoingHttpHeader[]): void {
  for (const [name, value] of pairs(headers)) list.push(name, value);
}

function* pairs(headers: OutgoingHttpHeader[]): Generator<[OutgoingHttpHeader, OutgoingHttpHeader]> {
  if (headers.length > 0 && Array.isArray(headers[0])) {
    for (const entry of headers as unknown as OutgoingHttpHeader[][]) yield [entry[0]!, entry[1]!];
    return;
  }
  for (let i = 0; i + 1 < headers.length; i += 2) yield [headers[i]!, headers[i + 1]!];
}

/**
 * `early` (name/value pairs, names in lower case) with `name: value` set: a name already there gets
 * the new value, so a header is sent once. Shared with the HTTP/2 response (http2-messages.ts).
 */
export function withEarlyHeader(early: string[] | undefined, name: string, value: string): string[] {
  const list = early ?? [];
  const lower = name.toLowerCase();
  for (let i = 0; i < list.length; i += 2) {
    if (list[i] === lower) {
      list[i + 1] = value;
      return list;
    }
  }
  list.push(lower, value);
  return list;
}

/** A response that keeps early headers for its status line: the gateway's, over HTTP/1.1 or HTTP/2. */
interface EarlyHeaders {
  addEarlyHeader(name: string, value: string): void;
}

/** Adds an early header when `res` keeps them (a gateway response), else sets it the ordinary way. */
export function addEarlyHeader(res: ServerResponse, name: string, value: string): void {
  const early = res as ServerResponse & Partial<EarlyHeaders>;
  if (typeof early.addEarlyHeader === 'function') early.addEarlyHeader(name, value);
  else res.setHeader(name, value);
}

/** The Content-Length among headers given to writeHead (an object, a flat list) or a set header's value. */
function contentLengthOf(headers: Headers | number | string | string[] | undefined): number | undefined {
  let value: unknown = headers;
  if (Array.isArray(headers)) {
    value = undefined;
    for (let i = 0; i + 1 < headers.length; i += 2)
      if (String(headers[i]).toLowerCase() === 'content-length') value = headers[i + 1];
  } else if (typeof headers === 'object' && headers !== null) {
    value = undefined;
    for (const name in headers)
      if (name.toLowerCase() === 'content-length') value = (headers as Record<string, unknown>)[name];
  }
  const n = Number(value);
  return value !== undefined && value !== '' && Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}
