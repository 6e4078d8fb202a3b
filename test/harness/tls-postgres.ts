/**
 * A PostgreSQL of its own that accepts TLS connections only (`ssl=on`, an `hba_file` of `hostssl`
 * lines): the embedded cluster of proxy/server/embedded-database.ts, started in `dir` with a server
 * certificate from tls-certs.ts. A plain connection is refused by the server, so a client that
 * gets in spoke TLS. No vitest here: the caller stops it.
 */
import { chmod, chown, copyFile, mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { startEmbeddedDatabase } from '../../proxy/server/embedded-database.ts';
import { postgresIds } from '../../proxy/server/postgres-account.ts';
import { postgresSettings } from './postgres-settings.ts';
import type { IssuedCertificate } from './tls-certs.ts';

export interface TlsPostgres {
  /** `postgres://…@127.0.0.1:<port>/postgres?require_auth=scram-sha-256`, without sslmode: the caller adds the one it tests (`&sslmode=`). */
  readonly url: string;
  stop(): Promise<void>;
}

export async function startTlsPostgres(dir: string, certificate: IssuedCertificate): Promise<TlsPostgres> {
  const tlsDir = path.join(dir, 'pg-tls');
  await mkdir(tlsDir, { recursive: true });
  const certFile = path.join(tlsDir, 'server.crt');
  const keyFile = path.join(tlsDir, 'server.key');
  const hbaFile = path.join(tlsDir, 'pg_hba.conf');
  await copyFile(certificate.certFile, certFile);
  await copyFile(certificate.keyFile, keyFile);
  // Password logins over TLS only: no `host` line, so a plain connection gets "no pg_hba.conf entry".
  await writeFile(hbaFile, 'hostssl all all 127.0.0.1/32 scram-sha-256\n');
  // PostgreSQL refuses a key readable by others; it must be owned by the account it runs as.
  await chmod(keyFile, 0o600);
  const ids = os.userInfo().uid === 0 ? await postgresIds() : undefined;
  if (ids) {
    await chmod(tlsDir, 0o755);
    for (const file of [certFile, keyFile, hbaFile]) await chown(file, ids.uid, ids.gid);
  }
  const log = pino({ level: 'warn' });
  const database = await startEmbeddedDatabase(path.join(dir, 'pg-data'), log, {
    postgresFlags: postgresSettings({
      ssl: 'on',
      ssl_cert_file: certFile,
      ssl_key_file: keyFile,
      ssl_min_protocol_version: 'TLSv1.2',
      hba_file: hbaFile,
    }),
  });
  return { url: database.url, stop: () => database.stop() };
}
