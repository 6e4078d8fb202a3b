/**
 * ARKVORY_TLS_CA_FILE: CAs trusted, besides Node's defaults (its bundle, plus NODE_EXTRA_CA_CERTS),
 * by every TLS connection this process opens without naming its own CAs: undici (the router's
 * gateways, the static-HTTP and S3 stores, the rules service), pg (`sslmode=verify-full`) and
 * ioredis (`rediss://`). One setting for all of them instead of one per driver, each with its own
 * spelling; a connection that names its CAs (pg's `sslrootcert=`) keeps them.
 */
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import { StartupError } from '../server/startup-failure.ts';
import { splitPemChain } from './certificate-pair.ts';
import { readTlsFileSync } from './tls-file.ts';

/** Adds the file's certificates to the default CAs of this process; a bad file refuses the start. */
export function trustOutboundCertificateAuthorities(file: string): number {
  // At most 1 MiB, a regular file (tls-file.ts): a link to /dev/zero would hang the start.
  const read = readTlsFileSync(file, 'ARKVORY_TLS_CA_FILE');
  if (typeof read === 'string') throw new StartupError(read);
  const pem = read.toString('utf8');
  const certs = splitPemChain(pem);
  if (certs.length === 0) throw new StartupError(`ARKVORY_TLS_CA_FILE ${file} holds no PEM certificate`);
  for (const cert of certs) {
    try {
      new X509Certificate(cert);
    } catch (err) {
      throw new StartupError(`ARKVORY_TLS_CA_FILE ${file}: a certificate cannot be parsed (${(err as Error).message})`);
    }
  }
  tls.setDefaultCACertificates([...tls.getCACertificates('default'), ...certs]);
  return certs.length;
}
