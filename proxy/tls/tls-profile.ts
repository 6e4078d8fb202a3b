/**
 * The TLS profile of every listener: Mozilla's "intermediate" configuration (TLS 1.2 and 1.3,
 * forward-secret AEAD suites only), which every client this gateway serves (curl, wget, aria2c,
 * Maven, pip, apt, browsers of the last years) speaks. Nothing here reads files or sockets.
 */

export const TLS_MIN_VERSION = 'TLSv1.2' as const;
export const TLS_MAX_VERSION = 'TLSv1.3' as const;

/**
 * TLS 1.3 suites first (OpenSSL takes them from the same string in Node), then Mozilla's
 * intermediate TLS 1.2 list without its DHE entries: ECDHE covers every client above, and DHE would
 * need a DH parameter file to manage for no client that lacks ECDHE.
 */
export const INTERMEDIATE_CIPHERS = [
  'TLS_AES_128_GCM_SHA256',
  'TLS_AES_256_GCM_SHA384',
  'TLS_CHACHA20_POLY1305_SHA256',
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

/** Mozilla intermediate's groups, in its order. */
export const ECDH_CURVES = 'X25519:prime256v1:secp384r1';

/**
 * ALPN offered to clients: HTTP/2 first, HTTP/1.1 on the same port (proxy/server/listener.ts's
 * `http2.createSecureServer({ allowHTTP1: true })`; a client that offers no ALPN gets HTTP/1.1).
 */
export const ALPN_PROTOCOLS: readonly string[] = ['h2', 'http/1.1'];

/** Seconds a TLS session (ticket or cached id) may be resumed (nginx's ssl_session_timeout is 300 s too). */
export const SESSION_TIMEOUT_SECONDS = 300;

/** The client-certificate modes of ARKVORY_TLS_CLIENT_CERT. */
export const CLIENT_CERT_MODES = ['off', 'optional', 'require'] as const;
export type ClientCertMode = (typeof CLIENT_CERT_MODES)[number];
