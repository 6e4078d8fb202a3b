/**
 * A router on TLS (HTTP/1.1 and HTTP/2 on one port) in front of one gateway, for tests that speak to
 * it with raw sockets: its own certificate authority, probes rare, every request line logged (its
 * 4xx lines past their budget go to debug), and ready once `forwards` says a request went through.
 */
import { createCertificateAuthority, issueServerCertificate, waitUntil } from '../harness/index.ts';
import { makeTempDir, startGateway, type GatewayProcess } from './gateway.ts';

export interface TlsRouter {
  readonly router: GatewayProcess;
  /** The certificate authority's PEM, to verify the router with. */
  readonly ca: string;
}

export async function startTlsRouter(
  gateway: GatewayProcess,
  options: {
    /** Whether a request through the router (at `router.port`, verified with `ca`) was forwarded. */
    forwards: (router: GatewayProcess, ca: string) => Promise<boolean>;
    /** Runs the router under this command (e.g. `prlimit`). */
    wrap?: string[];
  },
): Promise<TlsRouter> {
  const dir = await makeTempDir('arkvory-tls-router-');
  const authority = await createCertificateAuthority(dir);
  const certificate = await issueServerCertificate(authority, dir);
  const router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: gateway.url,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
      ARKVORY_TLS_CERT_FILE: certificate.certFile,
      ARKVORY_TLS_KEY_FILE: certificate.keyFile,
      ARKVORY_LOG_LEVEL: 'debug',
    },
    ...(options.wrap ? { wrap: options.wrap } : {}),
    // The harness waits over plain HTTP: ready once a proxied request is answered over TLS.
    waitFor: 'none',
    timeoutMs: 60_000,
  });
  const ca = authority.certPem;
  await waitUntil(() => options.forwards(router, ca), {
    what: 'the TLS router to forward',
    timeoutMs: 30_000,
    process: router,
    retryOnError: true,
  });
  return { router, ca };
}
