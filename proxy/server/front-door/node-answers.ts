/**
 * The answers node:http and node:http2 give by themselves when no listener takes their event, given
 * here instead so that they are answers of ours like any other: the JSON error with `x-request-id`
 * and `nosniff`, and the listener's own headers (Strict-Transport-Security, listener-headers.ts).
 *
 * - `checkExpectation`: an `Expect` other than `100-continue`, HTTP/1.1 and HTTP/2. Node answered an
 *   empty 417 itself (its head did pass our `writeHead`, but carried nothing else of ours).
 * - `connect`: a CONNECT. node:http2 answered an empty 405 itself; node:http dropped an HTTP/1.1
 *   connection without a word. Both now get 405 `connect_refused`; an HTTP/1.1 one is answered on
 *   its socket, which node:http has handed over, and the connection closes.
 *
 * The request never reaches the routes (no route serves CONNECT, and an unmet Expect must not run
 * one: its body is refused unread). An HTTP/2 stream answered here is reset once the answer is out,
 * as any early answer (front-door/http2.ts). `unknownProtocol` needs nothing: with `allowHTTP1` a
 * client without ALPN, or with `http/1.1`, is node:http's, and one offering neither fails the TLS
 * handshake (no_application_protocol) before any HTTP is spoken.
 */
import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { GatewayError } from '../errors.ts';
import { sendError, sendErrorOnSocket } from '../http-errors.ts';
import { isHttp2 } from '../http2-messages.ts';
import { answerHeadersOf } from '../listener.ts';
import { LINGER } from './lingering-close.ts';

/**
 * Answers `server`'s unmet expectations and CONNECT requests (the gateway's and the router's alike);
 * `answered` hears the code of each (client faults: no principal was ever looked at).
 */
export function answerNodeAnswers(server: http.Server, log: Logger, answered?: (code: string) => void): void {
  const extra = answerHeadersOf(server);
  server.on('checkExpectation', (_req: http.IncomingMessage, res: http.ServerResponse) => {
    log.debug({ code: 'expectation_failed' }, 'Expect not met');
    sendError(res, refusal('expectation_failed'));
    answered?.('expectation_failed');
  });
  // HTTP/2: (request, response); HTTP/1.1: (request, socket, head) with the socket node:http let go.
  server.on('connect', (req: http.IncomingMessage, target: http.ServerResponse | Duplex) => {
    log.debug({ code: 'connect_refused' }, 'CONNECT refused');
    if (isHttp2(req)) sendError(target as http.ServerResponse, refusal('connect_refused'));
    else if (!refuseOnSocket(target as Duplex, extra)) return;
    answered?.('connect_refused');
  });
}

/**
 * The HTTP/1.1 CONNECT's answer on the socket node:http let go (sendErrorOnSocket gives it an
 * x-request-id of its own), then closed. No timeout of node:http's watches that socket any more: what
 * the client sends after is read and dropped (a close with unread bytes would reset the answer
 * away) for at most LINGER.ms, then the socket is destroyed whatever the client does.
 */
function refuseOnSocket(socket: Duplex, extra: ReturnType<typeof answerHeadersOf>): boolean {
  if (!sendErrorOnSocket(socket, new GatewayError('connect_refused'), extra)) return false;
  socket.resume();
  const timer = setTimeout(() => socket.destroy(), LINGER.ms);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  return true;
}

/** Every answer carries an `x-request-id`; these have no request of ours, so a fresh one. */
function refusal(code: 'expectation_failed' | 'connect_refused'): GatewayError {
  return new GatewayError(code, undefined, { headers: { 'x-request-id': randomUUID() } });
}
