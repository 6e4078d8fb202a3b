/**
 * Which requests the router can forward at all, decided before any gateway is picked (pure, no I/O).
 *
 * The rules are undici's request validation (lib/core/request.js, `Request` and `processHeader`,
 * undici 8) plus RFC 9112 §3.2, which asks a server to answer 400 to more than one Host or a Host
 * with an invalid value. Node's parser already refuses most of them (bad tokens, control bytes, a
 * repeated Content-Length), but not a repeated Host, and the parser's leniency is a flag away
 * (`insecureHTTPParser`): checked here, a request undici would refuse is answered 400 with the
 * reason instead of 502 `upstream_unreachable` with undici's stack in the log.
 *
 * What undici refuses and where it stands here:
 * - a path not starting with `/` (or an absolute URL), or with a byte outside 0x21–0xff: `invalid_target`;
 * - a method that is not a token: `invalid_method`;
 * - a header name that is not a token: `invalid_header_name`; a value with a control byte: `invalid_header_value`;
 * - a second Host: `duplicate_host`; a second Content-Length: `duplicate_content_length`, one that
 *   is not digits only: `invalid_content_length`;
 * - `Transfer-Encoding`, `Keep-Alive`, `Upgrade`, `Expect` and a `Connection` with invalid tokens:
 *   never reach undici (hop-by-hop, dropped by forwarded.ts; a GET with a body goes over node:http);
 * - RFC 9112 adds a Host value that is no `host[:port]`: `invalid_host`.
 *
 * Not undici's: a second `Authorization` (`duplicate_authorization`, answered 400
 * `duplicate_authorization` as the gateway answers it): the gateway would act on the first line, a
 * proxy beside it perhaps on another (proxy/server/authorization-header.ts). Nor is an HTTP/2
 * `Host` that differs from `:authority` (`authority_mismatch`, found by http2-head.ts).
 */

import { GATEWAY_ERRORS } from '../server/errors.ts';

export const CLIENT_FAULT_KINDS = [
  'duplicate_host',
  'invalid_host',
  'duplicate_content_length',
  'invalid_content_length',
  'invalid_header_name',
  'invalid_header_value',
  'invalid_target',
  'invalid_method',
  'duplicate_authorization',
  /** HTTP/2: a `Host` naming another authority than `:authority` (http2-head.ts). */
  'authority_mismatch',
  /** Refused by Node's HTTP parser before a request existed (the server's `clientError`). */
  'malformed_head',
  /** A head the router took that the gateways' parser would refuse once the forwarding headers are in (`upstreamHeadBytes`). */
  'head_too_large',
] as const;
export type ClientFaultKind = (typeof CLIENT_FAULT_KINDS)[number];

export interface ClientFault {
  readonly kind: ClientFaultKind;
  /** Client-safe: names the rule, never echoes the header's value. */
  readonly message: string;
  /** The error code of the 400; `malformed_request` unless the gateway has a code of its own for it. */
  readonly code?: 'duplicate_authorization';
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** undici's `headerCharRegex`: anything but HTAB, visible ASCII and obs-text. */
const INVALID_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
/** undici's `invalidPathRegex`. */
const INVALID_PATH = /[^\u0021-\u00ff]/;
/** RFC 3986 reg-name / IPv4 / IP-literal characters, and a port. Empty is allowed (RFC 9112 §3.2). */
const HOST_VALUE = /^[A-Za-z0-9._~!$&'()*+,;=%[\]:-]*$/;
const DIGITS = /^[0-9]+$/;

const fault = (kind: ClientFaultKind, message: string): ClientFault => ({ kind, message });
const DUPLICATE_AUTHORIZATION: ClientFault = {
  kind: 'duplicate_authorization',
  code: 'duplicate_authorization',
  message: GATEWAY_ERRORS.entries.duplicate_authorization.message,
};

/**
 * A head that, as the router forwards it (its forwarding headers added, an HTTP/2 header list
 * written out as HTTP/1.1), is past what the gateways' node:http takes: refused here, as the
 * gateway would refuse it (400), but before it costs a gateway connection, which the gateway
 * closes after a head it cannot parse, and with a line that says why.
 */
export const HEAD_TOO_LARGE: ClientFault = fault(
  'head_too_large',
  'The request head, with the forwarding headers the router adds, is larger than a gateway accepts.',
);

/**
 * The bytes of a head as node:http's parser counts them against its `maxHeaderSize` (the target,
 * every header name and value; not the method, the separators or the line ends): a gateway refuses
 * the head when this reaches the limit.
 */
export function upstreamHeadBytes(target: string, headers: readonly string[]): number {
  let bytes = target.length;
  for (let i = 0; i < headers.length; i++) bytes += headers[i]!.length;
  return bytes;
}

/**
 * The reason the request cannot be forwarded, or undefined (the usual case). `rawHeaders` is
 * `req.rawHeaders`: name, value, … as received.
 */
export function findClientFault(
  method: string,
  target: string,
  rawHeaders: readonly string[],
): ClientFault | undefined {
  if (!TOKEN.test(method)) return fault('invalid_method', 'The request method is not a valid token.');
  const originForm = target.charCodeAt(0) === 47; /* '/' */
  if (
    (!originForm &&
      !target.startsWith('http://') &&
      !target.startsWith('https://') &&
      !(target === '*' && method === 'OPTIONS')) ||
    INVALID_PATH.test(target)
  )
    return fault(
      'invalid_target',
      'The request target must be a path starting with "/" with no spaces or control bytes.',
    );
  let hosts = 0;
  let lengths = 0;
  let authorizations = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    const value = rawHeaders[i + 1] ?? '';
    if (!TOKEN.test(name)) return fault('invalid_header_name', 'A header name is not a valid token.');
    if (INVALID_VALUE.test(value))
      return fault('invalid_header_value', `The ${headerLabel(name)} header holds a control character.`);
    if (name.length === 4 && name.toLowerCase() === 'host') {
      if (++hosts > 1) return fault('duplicate_host', 'The request has more than one Host header (RFC 9112 §3.2).');
      if (!HOST_VALUE.test(value))
        return fault('invalid_host', 'The Host header is not a host name with an optional port.');
    } else if (name.length === 14 && name.toLowerCase() === 'content-length') {
      if (++lengths > 1)
        return fault('duplicate_content_length', 'The request has more than one Content-Length header.');
      if (!DIGITS.test(value))
        return fault('invalid_content_length', 'The Content-Length header is not a decimal number.');
    } else if (name.length === 13 && name.toLowerCase() === 'authorization') {
      if (++authorizations > 1) return DUPLICATE_AUTHORIZATION;
    }
  }
  return undefined;
}

/** The header's name for a message when it is a plain token of sane length, else a neutral word. */
function headerLabel(name: string): string {
  return name.length <= 64 && TOKEN.test(name) ? name : 'a';
}
