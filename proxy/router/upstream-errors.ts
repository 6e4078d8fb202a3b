/**
 * How the router names a gateway's failure before it answered: which errors mean the gateway is down
 * (only a failed connect does), and the client-facing error for each.
 */
import { GatewayError } from '../server/errors.ts';
import type { RequestClass } from './route-class.ts';

/** Connect failures: the only errors that mark a gateway unreachable (a reset may be one request's). */
export const CONNECT_FAILURES = new Set([
  'ECONNREFUSED',
  'ECONNECT_TIMEOUT',
  // undici's connect timeout (GETs go through undici: dispatched-exchange.ts).
  'UND_ERR_CONNECT_TIMEOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * Failures of the router's own resources when it connects to a gateway: out of descriptors
 * (process, system) or of local ports. Not the gateway's fault: never recorded against it (no
 * ejection, not unreachable) nor logged as its failure; the client gets a 503 to retry.
 */
export const OWN_FAILURES = new Set(['EMFILE', 'ENFILE', 'EADDRNOTAVAIL']);

/** The answer when the router's bound on requests being proxied is reached (router-server.ts). */
export const ROUTER_BUSY = new GatewayError(
  'unavailable',
  'The router has too many requests in progress; retry shortly.',
  { headers: { 'retry-after': '1' } },
);

/**
 * A client's request the HTTP client refused to send (undici's request validation, node:http's
 * header checks). forwardable.ts finds these before dispatch; this is the net behind it, so a rule
 * it misses is still the client's 400, not a 502 with a stack in the log.
 */
export const REFUSED_AS_MALFORMED = new Set([
  'UND_ERR_INVALID_ARG',
  'UND_ERR_NOT_SUPPORTED',
  'ERR_INVALID_CHAR',
  'ERR_INVALID_HTTP_TOKEN',
  'ERR_HTTP_INVALID_HEADER_VALUE',
  'ERR_UNESCAPED_CHARACTERS',
]);

/** No byte from the gateway for the idle timeout (the router's own cut; `upstreamFailure` names it). */
export class UpstreamTimeout extends Error {
  override readonly name = 'UpstreamTimeout';
}

/**
 * A connection to a gateway not established within the router's connect timeout. Its errno-style
 * code is the kernel's vocabulary (`CONNECT_FAILURES`), not a catalogue code: it never reaches a client.
 */
export class ConnectTimeout extends Error {
  override readonly name = 'ConnectTimeout';
  readonly code = 'ECONNECT_TIMEOUT';
}

/** The answer for a request whose gateway failed before its response head. */
export function upstreamFailure(err: Error, idleTimeoutMs: number): GatewayError {
  if (REFUSED_AS_MALFORMED.has((err as NodeJS.ErrnoException).code ?? ''))
    return new GatewayError('malformed_request', 'The request cannot be forwarded as sent; fix its head.');
  if (OWN_FAILURES.has((err as NodeJS.ErrnoException).code ?? ''))
    return new GatewayError('unavailable', 'The router is out of connections to its gateways; retry shortly.', {
      headers: { 'retry-after': '1' },
      cause: err,
    });
  if (err instanceof UpstreamTimeout)
    return new GatewayError(
      'gateway_timeout',
      `The gateway did not answer within ${Math.round(idleTimeoutMs / 1000)} s.`,
      { cause: err },
    );
  return new GatewayError('gateway_unreachable', 'The gateway could not be reached.', { cause: err });
}

/** The answer when the gateway's head cannot be relayed on the client's connection (node:http2 refused it). */
export function unrelayableHead(err: unknown): GatewayError {
  return new GatewayError('gateway_unreachable', "The gateway's answer cannot be carried over this connection.", {
    cause: err,
  });
}

/** The answer when no gateway of the needed kind is healthy. */
export function noGateway(kind: RequestClass): GatewayError {
  return new GatewayError(
    'unavailable',
    kind === 'content-read'
      ? 'No gateway is healthy; try again shortly.'
      : 'The writer is not available; reads keep working, writes must wait until it is back.',
    { headers: { 'retry-after': '2' } },
  );
}
