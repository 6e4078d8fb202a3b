/**
 * The TLS variables (docs/tls.md), in the shape of variables.ts's table, which lists them (its
 * VariableSpec type is not imported here: that would be an import cycle; the spread checks the shape).
 */
export const TLS_VARIABLES = [
  {
    name: 'ARKVORY_TLS_CERT_FILE',
    kind: { type: 'string' },
    doc: 'PEM certificate chain (leaf first) this process serves HTTPS with, on its one port; with ARKVORY_TLS_KEY_FILE. Reloaded on change and on SIGHUP without a restart (docs/tls.md). Each TLS file is a regular file of at most 1 MiB. Unset: plain HTTP.',
  },
  {
    name: 'ARKVORY_TLS_KEY_FILE',
    kind: { type: 'string' },
    doc: 'PEM private key of ARKVORY_TLS_CERT_FILE. A key that does not match, an unreadable file, one over 1 MiB or no regular file (a named pipe, a link to /dev/zero) or an expired certificate refuses the start (and a reload keeps the old pair).',
  },
  {
    name: 'ARKVORY_TLS_CLIENT_CA_FILE',
    kind: { type: 'string' },
    doc: 'PEM CA bundle whose client certificates a gateway verifies (mutual TLS): a verified certificate bound to a principal (`arkvory principals bind-cert`) authenticates it when a CA of this file signed it itself and it is no CA certificate (an intermediate CA goes in the file beside its root; one only the client sends names no principal). Needs ARKVORY_TLS_CERT_FILE; not for the router.',
  },
  {
    name: 'ARKVORY_TLS_CLIENT_CERT',
    kind: { type: 'enum', values: ['optional', 'require'] },
    defaultValue: 'optional',
    doc: 'With ARKVORY_TLS_CLIENT_CA_FILE: `optional` (a certificate is asked for; keys, Basic and links work without one) or `require` (every request but the health checks needs a verified client certificate, else 401).',
  },
  {
    name: 'ARKVORY_TLS_HSTS',
    kind: { type: 'string' },
    doc: 'The `Strict-Transport-Security` value every answer of this TLS listener carries (RFC 6797), e.g. `max-age=31536000; includeSubDomains`: `max-age` (seconds, required), `includeSubDomains`, `preload`; anything else refuses the start (exit 2). Needs ARKVORY_TLS_CERT_FILE; never sent over plain HTTP. Unset: not sent, since a browser that saw it refuses plain HTTP to the whole host name for max-age (docs/tls.md).',
  },
  {
    name: 'ARKVORY_TLS_CA_FILE',
    kind: { type: 'string' },
    doc: 'PEM CA bundle trusted, besides the system CAs, for every connection this process opens: the router to `https://` gateways, the static-HTTP and S3 stores, PostgreSQL (`sslmode=verify-full`), Redis (`rediss://`), the rules service. A regular file of at most 1 MiB.',
  },
  {
    name: 'ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS',
    kind: { type: 'bool' },
    defaultValue: '0',
    doc: 'A gateway answers 403 `tls_required` to credentials (Bearer, Basic, a pre-signed link) that arrive over plain HTTP from a non-loopback address (behind a proxy of ARKVORY_TRUSTED_PROXIES: as it says, in the last entry of its X-Forwarded-Proto or else in the proto= of its own Forwarded element, even when the proxy itself connects over TLS; the headers of any other peer are ignored), instead of serving them (a client sending its key in clear learns it at once). Not applied by the router: set it on the gateways behind it.',
  },
] as const;
