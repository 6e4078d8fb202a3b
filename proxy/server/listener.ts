/**
 * The one place a listening server is made, for every role (gateway roles, router, rules service):
 * plain `node:http` by default; with TLS configured, `http2.createSecureServer({ allowHTTP1: true })`,
 * which offers `h2` and `http/1.1` by ALPN on the same port and hands HTTP/1.1 connections to
 * node:http's own code (with these same options), so callers never choose the protocol themselves.
 * HTTP/2 streams reach the same `request` handler through node:http2's compatibility API
 * (proxy/server/http2-messages.ts); the front door bounds sessions and streams
 * (proxy/server/front-door/http2.ts).
 */
import type { Server, ServerOptions } from 'node:http';
import http from '../../lib/node-http.ts';
import http2 from 'node:http2';
import type { Socket } from 'node:net';
import tls from 'node:tls';
import type { Logger } from 'pino';
import type { ServedTls } from '../tls/served-tls.ts';
import { noteClientTrustAtAccept, trackClientTrust } from '../tls/peer-certificate.ts';
import { HTTP2_SESSION_LIMITS, HTTP2_SETTINGS } from './front-door/http2.ts';
import { Http2Request, Http2Response } from './http2-messages.ts';
import { type AnswerHeaders, http1AnsweringWith, http2AnsweringWith } from './listener-headers.ts';
import { HSTS_HEADER } from '../tls/hsts.ts';

export interface ListenerOptions {
  /** Options of the HTTP layer (timeouts, ServerResponse class): proxy/server/front-door.ts's `serverOptions`. */
  readonly http: ServerOptions;
  /** The certificate to serve; undefined = plain HTTP. */
  readonly tls: ServedTls | undefined;
  readonly log: Logger;
}

/**
 * The server. With TLS it is a node:http2 secure server, typed as the `http.Server` its callers
 * use: it emits the same `request`, `checkContinue`, `clientError` and `timeout` events (HTTP/1.1
 * connections are node:http's), and is given `closeAllConnections`, which it lacks.
 */
export function createListener(options: ListenerOptions): Server {
  if (!options.tls) return http.createServer(options.http);
  const { ServerResponse, IncomingMessage, ...http1 } = options.http;
  // Strict-Transport-Security on every answer of a TLS listener that sets it (never on plain HTTP,
  // RFC 6797 §7.2, which is why it is added here and nowhere else).
  const hsts = options.tls.hsts;
  const extra: AnswerHeaders = hsts === undefined ? [] : [[HSTS_HEADER, hsts]];
  const Response1 =
    extra.length > 0 ? http1AnsweringWith(ServerResponse ?? http.ServerResponse, extra) : ServerResponse;
  const server = http2.createSecureServer({
    ...http1,
    ...options.tls.serverOptions(),
    allowHTTP1: true,
    http1Options: {
      ...(Response1 ? { ServerResponse: Response1 } : {}),
      ...(IncomingMessage ? { IncomingMessage } : {}),
    },
    Http2ServerRequest: Http2Request,
    Http2ServerResponse: extra.length > 0 ? http2AnsweringWith(extra) : Http2Response,
    settings: { ...HTTP2_SETTINGS },
    ...HTTP2_SESSION_LIMITS,
    // A client that never finishes its handshake holds a socket no longer than one that never sends its head.
    handshakeTimeout: options.http.headersTimeout ?? 30_000,
  } as http2.SecureServerOptions);
  options.tls.attach(server);
  // No renegotiation: a connection's client certificate is read once (proxy/tls/peer-certificate.ts)
  // and must not change under it; TLS 1.2 renegotiation is also a cheap CPU attack on a server.
  const served = options.tls;
  const clientCerts = served.clientCertMode !== 'off';
  // The trust a handshake is verified against is the one current when its TCP connection is accepted.
  if (clientCerts) server.on('connection', (raw: Socket) => noteClientTrustAtAccept(raw, served));
  server.on('secureConnection', (socket: tls.TLSSocket) => {
    socket.disableRenegotiation();
    if (clientCerts) trackClientTrust(socket, served);
  });
  const { log } = options;
  // A failed handshake (a port scanner, a client without our CA, TLS 1.0) is the client's doing:
  // debug, and the socket is destroyed. (node:http2 would also report it as a `clientError`, which
  // the front door answers with an HTTP/1.1 400 on a socket that never spoke HTTP: not here.)
  server.removeAllListeners('tlsClientError');
  server.on('tlsClientError', (err: NodeJS.ErrnoException, socket: tls.TLSSocket) => {
    log.debug({ code: 'tls_handshake_failed', reason: err.code ?? err.message }, 'TLS handshake failed');
    socket.destroy();
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.once('close', () => sessions.delete(session));
  });
  const asHttp = server as unknown as Server;
  ANSWER_HEADERS.set(asHttp, extra);
  asHttp.closeAllConnections = () => {
    // HTTP/1.1 connections are tracked by node:http's code (allowHTTP1), sessions here.
    http.Server.prototype.closeAllConnections.call(asHttp);
    for (const session of sessions) session.destroy();
  };
  return asHttp;
}

const ANSWER_HEADERS = new WeakMap<Server, AnswerHeaders>();

/**
 * Headers every answer of `server` carries (listener-headers.ts): for the front door's answers
 * written on a bare socket, which no response object's `writeHead` sees.
 */
export function answerHeadersOf(server: Server): AnswerHeaders {
  return ANSWER_HEADERS.get(server) ?? [];
}

/** The URL scheme a server answers on, for the "listening" line. */
export function schemeOf(server: Server): 'http' | 'https' {
  return server instanceof tls.Server ? 'https' : 'http';
}

/**
 * The event a connection's HTTP life starts with: for TLS the handshake must be done first
 * (`secureConnection`, whose socket is the one requests carry), else `connection`.
 */
export function connectionEvent(server: Server): 'connection' | 'secureConnection' {
  return server instanceof tls.Server ? 'secureConnection' : 'connection';
}
