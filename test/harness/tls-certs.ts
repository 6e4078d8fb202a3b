/**
 * Certificates made per test run with the openssl command line (no vitest here): a test CA, server
 * certificates for 127.0.0.1/localhost, client certificates with a SAN URI (a SPIFFE id) or DNS
 * name, and deliberately broken material (expired, mismatched key). Every file lives in `dir`,
 * which the caller removes. Serials are random, so a rotation test can tell two leaves apart.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface CertificateAuthority {
  readonly name: string;
  readonly certFile: string;
  readonly keyFile: string;
  readonly certPem: string;
}

export interface IssuedCertificate {
  readonly certFile: string;
  readonly keyFile: string;
  readonly certPem: string;
  readonly keyPem: string;
  /** Upper-case hex, as X509Certificate.serialNumber prints it. */
  readonly serial: string;
}

export interface IssueOptions {
  /** Subject alternative names in openssl syntax: `DNS:localhost`, `IP:127.0.0.1`, `URI:spiffe://…`. */
  readonly sans: readonly string[];
  readonly commonName?: string;
  /** Days of validity from now (default 2). */
  readonly days?: number;
  /** Valid only on 2020-01-01: a certificate that has expired. */
  readonly expired?: boolean;
  /** Valid from an hour ago until this moment (whole seconds): a certificate that expires during a test. */
  readonly notAfter?: Date;
  readonly usage?: 'server' | 'client';
  /** Key type: RSA 2048 (default) or EC P-256. */
  readonly keyType?: 'rsa' | 'ec';
  /** basicConstraints CA:TRUE and keyCertSign beside its usage: a certificate that can issue others. */
  readonly authority?: boolean;
}

async function openssl(args: string[], cwd: string): Promise<string> {
  const { stdout } = await run('openssl', args, { cwd, maxBuffer: 1 << 20 });
  return stdout;
}

function newSerial(): string {
  // 16 random bytes, first bit clear: a positive serial with no leading zero byte.
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0]! & 0x7f) | 0x10;
  return bytes.toString('hex').toUpperCase();
}

async function newKey(file: string, keyType: 'rsa' | 'ec', cwd: string): Promise<void> {
  if (keyType === 'ec')
    await openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', file], cwd);
  else await openssl(['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', file], cwd);
}

/** A self-signed CA in `dir/<name>.crt` and `.key`, valid `days` from now (default 2). */
export async function createCertificateAuthority(
  dir: string,
  name = 'arkvory-test-ca',
  days = 2,
): Promise<CertificateAuthority> {
  await mkdir(dir, { recursive: true });
  const keyFile = path.join(dir, `${name}.key`);
  const certFile = path.join(dir, `${name}.crt`);
  await newKey(keyFile, 'ec', dir);
  await openssl(
    [
      'req',
      '-x509',
      '-new',
      '-key',
      keyFile,
      '-out',
      certFile,
      '-days',
      String(days),
      '-subj',
      `/CN=${name}`,
      '-set_serial',
      `0x${newSerial()}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  return { name, certFile, keyFile, certPem: await readFile(certFile, 'utf8') };
}

/** A leaf signed by `ca`, written as `dir/<name>.crt` (leaf then CA: a full chain) and `dir/<name>.key`. */
export async function issueCertificate(
  ca: CertificateAuthority,
  dir: string,
  name: string,
  options: IssueOptions,
): Promise<IssuedCertificate> {
  const keyFile = path.join(dir, `${name}.key`);
  const csrFile = path.join(dir, `${name}.csr`);
  const leafFile = path.join(dir, `${name}.leaf.crt`);
  const certFile = path.join(dir, `${name}.crt`);
  const extFile = path.join(dir, `${name}.ext`);
  await newKey(keyFile, options.keyType ?? 'rsa', dir);
  await openssl(['req', '-new', '-key', keyFile, '-out', csrFile, '-subj', `/CN=${options.commonName ?? name}`], dir);
  const usage = options.usage ?? 'server';
  await writeFile(
    extFile,
    [
      `basicConstraints=critical,CA:${options.authority ? 'TRUE' : 'FALSE'}`,
      `keyUsage=critical,digitalSignature${options.keyType === 'ec' ? '' : ',keyEncipherment'}${options.authority ? ',keyCertSign' : ''}`,
      `extendedKeyUsage=${usage === 'server' ? 'serverAuth' : 'clientAuth'}`,
      `subjectAltName=${options.sans.join(',')}`,
      '',
    ].join('\n'),
  );
  const serial = newSerial();
  // A validity chosen to the second: OpenSSL 3.4+ sets it with `x509 -not_before/-not_after`; older
  // ones only through `openssl ca` (signWithCaBetween).
  const window = options.expired
    ? { start: '20200101000000Z', end: '20200102000000Z' }
    : options.notAfter
      ? { start: opensslTime(new Date(options.notAfter.getTime() - 3600_000)), end: opensslTime(options.notAfter) }
      : undefined;
  const validity = window
    ? ['-not_before', window.start, '-not_after', window.end]
    : ['-days', String(options.days ?? 2)];
  const args = [
    'x509',
    '-req',
    '-in',
    csrFile,
    '-CA',
    ca.certFile,
    '-CAkey',
    ca.keyFile,
    '-set_serial',
    `0x${serial}`,
    '-extfile',
    extFile,
    '-out',
    leafFile,
  ];
  try {
    await openssl([...args, ...validity], dir);
  } catch (err) {
    if (!window) throw err;
    await signWithCaBetween(ca, dir, name, csrFile, extFile, serial, leafFile, window);
  }
  const leafPem = await readFile(leafFile, 'utf8');
  await writeFile(certFile, leafPem + ca.certPem);
  return { certFile, keyFile, certPem: leafPem + ca.certPem, keyPem: await readFile(keyFile, 'utf8'), serial };
}

/** A moment as OpenSSL's validity options take it: `YYYYMMDDHHMMSSZ`, UTC. */
function opensslTime(at: Date): string {
  return `${at.toISOString().slice(0, 19).replace(/[-T:]/g, '')}Z`;
}

/** `openssl ca` with an explicit -startdate/-enddate (the one way older OpenSSL sets a validity to the second). */
async function signWithCaBetween(
  ca: CertificateAuthority,
  dir: string,
  name: string,
  csrFile: string,
  extFile: string,
  serial: string,
  outFile: string,
  window: { start: string; end: string },
): Promise<void> {
  const caDir = path.join(dir, `${name}.ca-db`);
  await mkdir(caDir, { recursive: true });
  await writeFile(path.join(caDir, 'index.txt'), '');
  await writeFile(path.join(caDir, 'serial'), `${serial}\n`);
  const conf = path.join(caDir, 'ca.cnf');
  await writeFile(
    conf,
    [
      '[ca]',
      'default_ca = test',
      '[test]',
      `database = ${path.join(caDir, 'index.txt')}`,
      `serial = ${path.join(caDir, 'serial')}`,
      `new_certs_dir = ${caDir}`,
      'default_md = sha256',
      'policy = any',
      'unique_subject = no',
      'copy_extensions = none',
      '[any]',
      'commonName = supplied',
      '',
    ].join('\n'),
  );
  await openssl(
    [
      'ca',
      '-batch',
      '-config',
      conf,
      '-cert',
      ca.certFile,
      '-keyfile',
      ca.keyFile,
      '-in',
      csrFile,
      '-out',
      outFile,
      '-extfile',
      extFile,
      '-startdate',
      window.start,
      '-enddate',
      window.end,
      '-notext',
    ],
    dir,
  );
}

/**
 * An intermediate CA signed by `root`, valid from an hour ago until `notAfter` (whole seconds): its
 * `certPem` is the intermediate alone, so a leaf issued by it (`issueCertificate`) carries leaf then
 * intermediate, and a peer trusting `root` alone verifies the chain.
 */
export async function createIntermediateAuthority(
  root: CertificateAuthority,
  dir: string,
  name: string,
  notAfter: Date,
): Promise<CertificateAuthority> {
  const keyFile = path.join(dir, `${name}.key`);
  const csrFile = path.join(dir, `${name}.csr`);
  const certFile = path.join(dir, `${name}.crt`);
  const extFile = path.join(dir, `${name}.ext`);
  await newKey(keyFile, 'ec', dir);
  await openssl(['req', '-new', '-key', keyFile, '-out', csrFile, '-subj', `/CN=${name}`], dir);
  await writeFile(extFile, 'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n');
  const window = { start: opensslTime(new Date(Date.now() - 3600_000)), end: opensslTime(notAfter) };
  await signWithCaBetween(root, dir, name, csrFile, extFile, newSerial(), certFile, window);
  return { name, certFile, keyFile, certPem: await readFile(certFile, 'utf8') };
}

/** A server certificate for 127.0.0.1 and localhost. */
export function issueServerCertificate(
  ca: CertificateAuthority,
  dir: string,
  name = 'server',
  options: Partial<IssueOptions> = {},
): Promise<IssuedCertificate> {
  return issueCertificate(ca, dir, name, { sans: ['DNS:localhost', 'IP:127.0.0.1'], usage: 'server', ...options });
}

/** A client certificate naming `san` (e.g. `URI:spiffe://example.org/ci`, `DNS:builder.example.org`). */
export function issueClientCertificate(
  ca: CertificateAuthority,
  dir: string,
  name: string,
  san: string,
  options: Pick<IssueOptions, 'notAfter'> = {},
): Promise<IssuedCertificate> {
  return issueCertificate(ca, dir, name, { sans: [san], usage: 'client', keyType: 'ec', ...options });
}

/**
 * A client certificate naming `san` that is also a CA (CA:TRUE, keyCertSign, clientAuth), as a careless
 * issuer may sign one for a principal: `authority` issues leaves with its key (`issueClientCertificate`),
 * each then sent as leaf followed by this certificate.
 */
export async function issueClientAuthority(
  ca: CertificateAuthority,
  dir: string,
  name: string,
  san: string,
): Promise<{ certificate: IssuedCertificate; authority: CertificateAuthority }> {
  const certificate = await issueCertificate(ca, dir, name, {
    sans: [san],
    usage: 'client',
    keyType: 'ec',
    authority: true,
  });
  const certFile = path.join(dir, `${name}.leaf.crt`);
  const authority = { name, certFile, keyFile: certificate.keyFile, certPem: await readFile(certFile, 'utf8') };
  return { certificate, authority };
}

/**
 * Replaces `target`'s content atomically (write beside it, then rename), as a deploy tool or
 * cert-manager does, so a reader never sees half a file.
 */
export async function replaceFileAtomically(target: string, content: string): Promise<void> {
  const temp = `${target}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(temp, content, { mode: 0o600 });
  await rename(temp, target);
}
