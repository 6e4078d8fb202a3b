/**
 * Request heads Node could not parse or that took too long: answered 408 (head timeout), 401 (an
 * Authorization line with bytes HTTP does not allow) or 400 (anything else malformed), then the
 * connection closes. Never a crash, and logged at debug: the client's doing, not a fault of ours;
 * counted by the answer's code (`arkvory_http_client_faults_total` on a gateway).
 *
 * A head that fails while an earlier request's answer on the connection is already under way (a
 * pipelined request parsed as the body streams) is not answered: the 400 would land inside that
 * body. The connection is cut instead, as Node does without a listener.
 */
import type http from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { unauthorized } from '../../../policy/auth/authenticator.ts';
import { HEAD_TIMEOUT, MALFORMED_REQUEST } from '../errors.ts';
import { sendErrorOnSocket, toHttpError } from '../http-errors.ts';
import { answerHeadersOf } from '../listener.ts';
import { stateOf } from './connection-state.ts';

/** The parser's error: its code, and the bytes it had read when it gave up. */
export interface ClientError {
  readonly code?: string;
  readonly rawPacket?: Buffer;
}

/** True when the error is the header timeout (the head took longer than `headersTimeoutMs`). */
export function isHeadTimeout(err: ClientError): boolean {
  return err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
}

/**
 * The error a client error is answered with. The head took longer than the header timeout: 408,
 * the client's doing (nginx does the same). Bytes the parser refuses inside Authorization are
 * credentials that cannot be valid: the same 401 as any other bad key, so a caller learns nothing
 * from the difference.
 */
export function clientErrorAnswer(err: ClientError): Error {
  if (isHeadTimeout(err)) return HEAD_TIMEOUT;
  return err.rawPacket !== undefined && hasMalformedAuthorization(err.rawPacket) ? unauthorized() : MALFORMED_REQUEST;
}

/** True when the raw request head has an Authorization line with bytes HTTP does not allow. */
export function hasMalformedAuthorization(raw: Buffer): boolean {
  const head = raw.toString('latin1');
  const match = /(?:^|\n)authorization:([^\n]*)/i.exec(head);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  return match !== null && /[\x00-\x08\x0a-\x1f\x7f]/.test(match[1]!.replace(/\r$/, ''));
}

/**
 * Answers `server`'s client errors (the gateway's and the router's alike) when the socket still can;
 * `answered` hears the code of each answer that was written.
 */
export function answerClientErrors(server: http.Server, log: Logger, answered?: (code: string) => void): void {
  const extra = answerHeadersOf(server);
  server.on('clientError', (err: NodeJS.ErrnoException & ClientError, socket: Socket) => {
    if (isHeadTimeout(err)) log.debug({ code: 'client_timeout', phase: 'head' }, 'request head timed out');
    else log.debug({ code: err.code }, 'client error');
    if (stateOf(socket)?.res?.headersSent) {
      socket.destroy();
      return;
    }
    const answer = clientErrorAnswer(err);
    if (sendErrorOnSocket(socket, answer, extra)) answered?.(toHttpError(answer).code);
  });
}
