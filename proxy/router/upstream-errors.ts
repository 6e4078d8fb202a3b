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
  if (err instanceof UpstreamTimeout)
    return new GatewayError(
      'gateway_timeout',
      `The gateway did not answer within ${Math.round(idleTimeoutMs / 1000)} s.`,
      { cause: err },
    );
  return new GatewayError('gateway_unreachable', 'The gateway could not be reached.', { cause: err });
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
