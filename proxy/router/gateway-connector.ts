/**
 * How the router's undici pool connects to an `https://` gateway: the certificate is verified against
 * the host of ARKVORY_ROUTER_BACKENDS (its name, sent as SNI; an IP address against the certificate's
 * IP SANs, with no SNI), never against the Host the client sent. undici otherwise takes the TLS name
 * from each request's Host header: a GET for the router's public name was refused by a gateway
 * certificate made for its own name (a 502), and a client chose the name the gateway's certificate was
 * checked against (any certificate the CAs trust for it passed), and by alternating names closed the
 * pool's connections ("servername changed").
 */
import { isIP } from 'node:net';
import { buildConnector } from 'undici';

/** The name a gateway's certificate must hold: its host as configured, or undefined for an IP address (no SNI). */
export function gatewayServerName(hostname: string): string | undefined {
  return isIP(hostname) === 0 ? hostname : undefined;
}

/** undici's own connector, with the TLS name fixed to the gateway's configured host. */
export function gatewayConnector(hostname: string, connectTimeoutMs: number): buildConnector.connector {
  const connect = buildConnector({ timeout: connectTimeoutMs });
  const servername = gatewayServerName(hostname);
  return (options, callback) => {
    // Without a name undici falls back to the pool's own host, which for an IP address is none.
    const { servername: _fromRequest, ...rest } = options;
    connect(servername === undefined ? rest : { ...rest, servername }, callback);
  };
}
