/**
 * The one place a listening server is made, for every role (gateway roles, router, rules service):
 * plain `node:http` by default, `node:https` with the served certificate when TLS is configured.
 * HTTP/2 will be added here (`http2.createSecureServer({ allowHTTP1: true })`), so callers never
 * choose the protocol themselves.
 */
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import type { Logger } from 'pino';
import type { ServedTls } from '../tls/served-tls.ts';

export interface ListenerOptions {
  /** Options of the HTTP layer (timeouts, ServerResponse class): proxy/server/front-door.ts's `serverOptions`. */
  readonly http: http.ServerOptions;
  /** The certificate to serve; undefined = plain HTTP. */
  readonly tls: ServedTls | undefined;
  readonly log: Logger;
}

export function createListener(options: ListenerOptions): http.Server {
  if (!options.tls) return http.createServer(options.http);
  const server = https.createServer({
    ...options.http,
    ...options.tls.serverOptions(),
    // A client that never finishes its handshake holds a socket no longer than one that never sends its head.
    handshakeTimeout: options.http.headersTimeout ?? 30_000,
  });
  options.tls.attach(server);
  // No renegotiation: a connection's client certificate is read once (proxy/tls/peer-certificate.ts)
  // and must not change under it; TLS 1.2 renegotiation is also a cheap CPU attack on a server.
  server.on('secureConnection', (socket: tls.TLSSocket) => socket.disableRenegotiation());
  const { log } = options;
  // A failed handshake (a port scanner, a client without our CA, TLS 1.0) is the client's doing:
  // debug, and the socket is destroyed by Node.
  server.on('tlsClientError', (err: NodeJS.ErrnoException) => {
    log.debug({ code: 'tls_handshake_failed', reason: err.code ?? err.message }, 'TLS handshake failed');
  });
  return server;
}

/** The URL scheme a server answers on, for the "listening" line. */
export function schemeOf(server: http.Server): 'http' | 'https' {
  return server instanceof tls.Server ? 'https' : 'http';
}

/**
 * The event a connection's HTTP life starts with: for TLS the handshake must be done first
 * (`secureConnection`, whose socket is the one requests carry), else `connection`.
 */
export function connectionEvent(server: http.Server): 'connection' | 'secureConnection' {
  return server instanceof tls.Server ? 'secureConnection' : 'connection';
}
