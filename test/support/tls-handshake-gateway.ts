/**
 * A real TLS gateway for the handshake-flood tests, and what they send it: a new HTTPS connection's
 * request (its status, or the error's code) and the start of a ClientHello that never finishes.
 */
import https from 'node:https';
import { createCertificateAuthority, issueServerCertificate, waitUntil } from '../harness/index.ts';
import { makeTempDir, startGateway, type GatewayProcess } from './gateway.ts';

/** The first bytes of a TLS record carrying a ClientHello, and nothing more: a handshake begun, never finished. */
export const PARTIAL_CLIENT_HELLO = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);

export interface TlsHandshakeGateway {
  readonly gw: GatewayProcess;
  /** The PEM of the CA that issued the gateway's certificate, for clients that verify it. */
  readonly ca: string;
  /** One HTTPS request on a new connection (a new handshake): its status, or the error's code. */
  healthStatus(): Promise<number | string>;
}

/** A gateway serving TLS with a certificate of a new CA, once it answers HTTPS. */
export async function startTlsHandshakeGateway(options: {
  databaseUrl: string;
  env?: Record<string, string>;
  wrap?: string[];
}): Promise<TlsHandshakeGateway> {
  const dir = await makeTempDir('arkvory-handshakes-');
  const ca = await createCertificateAuthority(dir);
  const certificate = await issueServerCertificate(ca, dir);
  const gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: options.databaseUrl,
      ARKVORY_TLS_CERT_FILE: certificate.certFile,
      ARKVORY_TLS_KEY_FILE: certificate.keyFile,
      ...options.env,
    },
    ...(options.wrap ? { wrap: options.wrap } : {}),
    waitFor: 'none',
  });
  const healthStatus = () =>
    new Promise<number | string>((resolve) => {
      const req = https.get(
        `https://127.0.0.1:${gw.port}/health/status`,
        { ca: ca.certPem, agent: false, timeout: 5000 },
        (res) => res.resume().on('end', () => resolve(res.statusCode ?? 0)),
      );
      req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
      req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    });
  await waitUntil(async () => (await healthStatus()) === 200, {
    what: 'the TLS gateway to serve',
    timeoutMs: 30_000,
    process: gw,
  });
  return { gw, ca: ca.certPem, healthStatus };
}
