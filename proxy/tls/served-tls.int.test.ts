/**
 * Reloads of the served TLS files against a real listener (createListener) and real TLS clients,
 * with certificates made by openssl for this run: a chain OpenSSL refuses is rejected without a
 * crash and reported once; a corrected chain under the same leaf is served; the client CA is judged
 * apart from the pair, and once it changes neither a resumed session nor an open connection keeps
 * a verdict made against a CA taken out of trust. Which verified client certificates name a
 * principal (none signed as a CA, none issued by an intermediate the file lacks), and TLS files over
 * 1 MiB or not regular files kept out.
 */
import { X509Certificate } from 'node:crypto';
import { chmod, copyFile, rm, symlink, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../../policy/clock.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  createIntermediateAuthority,
  type IssuedCertificate,
  issueCertificate,
  issueClientAuthority,
  issueClientCertificate,
  issueServerCertificate,
  makeTempDir,
} from '../../test/harness/index.ts';
import { createListener } from '../server/listener.ts';
import { splitPemChain } from './certificate-pair.ts';
import { peerCertificateOf } from './peer-certificate.ts';
import { ServedTls, type ServedTlsOptions, type TlsListenerConfig } from './served-tls.ts';

interface Listening {
  served: ServedTls;
  port: number;
  /** Server-side sockets, in the order their handshakes finished. */
  sockets: tls.TLSSocket[];
  lines: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

async function listen(config: TlsListenerConfig, options: Partial<ServedTlsOptions> = {}): Promise<Listening> {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  // No watch or poll unless a test calls start(): each test reloads when it means to.
  const served = await ServedTls.open(config, { clock: systemClock, log, ...options });
  const server = createListener({ http: {}, tls: served, log });
  const sockets: tls.TLSSocket[] = [];
  server.on('secureConnection', (socket: tls.TLSSocket) => sockets.push(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    served,
    port,
    sockets,
    lines,
    close: async () => {
      served.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Connected {
  socket: tls.TLSSocket;
  /** The TLS 1.3 ticket, once the server sent it. */
  session: Promise<Buffer>;
}

function connect(
  port: number,
  ca: CertificateAuthority,
  options: { client?: IssuedCertificate; session?: Buffer } = {},
): Promise<Connected> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host: '127.0.0.1',
      port,
      ca: ca.certPem,
      ALPNProtocols: ['http/1.1'],
      ...(options.client ? { cert: options.client.certPem, key: options.client.keyPem } : {}),
      ...(options.session ? { session: options.session } : {}),
    });
    const session = new Promise<Buffer>((got) => socket.once('session', got));
    socket.once('secureConnect', () => resolve({ socket, session }));
    socket.once('error', reject);
  });
}

/** A PEM block whose DER is cut short: it splits as a certificate, OpenSSL cannot decode it. */
function damaged(pem: string): string {
  const lines = pem.trim().split('\n');
  return `${[lines[0], lines[1], lines[2], lines.at(-1)].join('\n')}\n`;
}

let dir: string;
let ca: CertificateAuthority;
let first: IssuedCertificate;
let certFile: string;
let keyFile: string;
let open: Listening[] = [];
const clients: tls.TLSSocket[] = [];

beforeEach(async () => {
  dir = await makeTempDir('arkvory-served-tls-');
  ca = await createCertificateAuthority(dir);
  first = await issueServerCertificate(ca, dir, 'first');
  certFile = path.join(dir, 'served.crt');
  keyFile = path.join(dir, 'served.key');
  await writeFile(certFile, first.certPem);
  await writeFile(keyFile, first.keyPem);
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  for (const l of open.splice(0)) await l.close();
  open = [];
});

async function started(
  config: Partial<TlsListenerConfig> = {},
  options: Partial<ServedTlsOptions> = {},
): Promise<Listening> {
  const l = await listen({ certFile, keyFile, clientCaFile: undefined, clientCert: 'optional', ...config }, options);
  open.push(l);
  return l;
}

async function servedSerial(port: number): Promise<string> {
  const { socket } = await connect(port, ca);
  clients.push(socket);
  return socket.getPeerCertificate().serialNumber;
}

/** The server's side of `client`'s connection (its handshake may finish there a moment later). */
async function serverSide(l: Listening, client: tls.TLSSocket): Promise<tls.TLSSocket> {
  for (let i = 0; i < 100; i++) {
    const found = l.sockets.find((s) => s.remotePort === client.localPort);
    if (found) return found;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`no server socket for the client port ${client.localPort}`);
}

const failures = (l: Listening) => l.lines.filter((line) => line.code === 'tls_reload_failed');

describe('ServedTls reload', () => {
  it('rejects a chain OpenSSL refuses (a damaged intermediate) without a crash, and reports the same files once', async () => {
    const l = await started();
    const second = await issueServerCertificate(ca, dir, 'second');
    await writeFile(certFile, second.certPem + damaged(ca.certPem));
    await writeFile(keyFile, second.keyPem);
    expect(await l.served.reload('test')).toBe('rejected');
    expect(await servedSerial(l.port)).toBe(first.serial);
    expect(l.served.certificate.serial).toBe(first.serial);
    expect(l.served.reloadFailures).toBe(1);
    expect(failures(l)).toHaveLength(1);
    expect(failures(l)[0]!.reason).toMatch(/^OpenSSL refuses the certificate chain or key \(/);
    // The same broken files seen again (another event, a poll): no second error, no second count.
    expect(await l.served.reload('file change')).toBe('rejected');
    expect(l.served.reloadFailures).toBe(1);
    expect(failures(l)).toHaveLength(1);
    // Fixed: served, and the failure state is over.
    await writeFile(certFile, second.certPem);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(await servedSerial(l.port)).toBe(second.serial);
    expect(l.served.lastError).toBeUndefined();
  });

  it('refuses to open with a chain OpenSSL refuses', async () => {
    await writeFile(certFile, first.certPem + damaged(ca.certPem));
    await expect(started()).rejects.toThrow(/^TLS: OpenSSL refuses the certificate chain or key \(/);
  });

  it('serves a corrected chain under the same leaf', async () => {
    const [leafOnly] = splitPemChain(first.certPem);
    await writeFile(certFile, `${leafOnly}\n`);
    const l = await started();
    expect(l.served.certificate.chainLength).toBe(1);
    // The issuer added beside the same leaf and key: a new chain, served to new handshakes.
    await writeFile(certFile, `${leafOnly}\n${ca.certPem}`);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(l.served.certificate.chainLength).toBe(2);
    const { socket } = await connect(l.port, ca);
    clients.push(socket);
    expect(socket.getPeerCertificate().serialNumber).toBe(first.serial);
  });

  it('a renewed pair not yet valid by this host clock is served once it is, with no further change to the files', async () => {
    // This host's clock a little behind the CA's: frozen now, and the renewal issued in a later second.
    const clock = new ManualClock(Date.now(), 0);
    const l = await started({}, { clock, pollIntervalMs: 50 });
    await new Promise((resolve) => setTimeout(resolve, 1050 - (clock.wallMs() % 1000)));
    const renewal = await issueServerCertificate(ca, dir, 'renewal');
    await writeFile(keyFile, renewal.keyPem);
    await writeFile(certFile, renewal.certPem);
    expect(await l.served.reload('test')).toBe('rejected');
    expect(failures(l)[0]!.reason).toMatch(/the certificate is not valid before/);
    l.served.start();
    clock.advance(60_000);
    // The files stay as they are: the poll tries the standing failure again.
    for (let i = 0; i < 200 && l.served.certificate.serial !== renewal.serial; i++)
      await new Promise((resolve) => setTimeout(resolve, 25));
    expect(l.served.certificate.serial).toBe(renewal.serial);
    expect(await servedSerial(l.port)).toBe(renewal.serial);
    // Reported once, however many polls tried it.
    expect(failures(l)).toHaveLength(1);
  });

  it('takes a new client CA while the pair is broken; resumed sessions and open connections follow it', async () => {
    const caFile = path.join(dir, 'clients.pem');
    const caB = await createCertificateAuthority(dir, 'arkvory-test-ca-b');
    await copyFile(ca.certFile, caFile);
    const l = await started({ clientCaFile: caFile });
    const client = await issueClientCertificate(ca, dir, 'client-a', 'URI:spiffe://example.org/a');
    const clientB = await issueClientCertificate(caB, dir, 'client-b', 'URI:spiffe://example.org/b');

    const full = await connect(l.port, ca, { client });
    clients.push(full.socket);
    const ticket = await full.session;
    const openSocket = await serverSide(l, full.socket);
    expect(peerCertificateOf(openSocket)).toMatchObject({ kind: 'verified' });
    // Resumption works before the change (so the refusal below is the change's doing).
    const resumed = await connect(l.port, ca, { client, session: ticket });
    clients.push(resumed.socket);
    expect(resumed.socket.isSessionReused()).toBe(true);

    // A half-written renewal (the key is garbage) and a CA taken out of trust, read together.
    await writeFile(keyFile, 'not a key\n');
    await writeFile(caFile, caB.certPem);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(l.served.certificate.serial).toBe(first.serial);
    expect(failures(l)).toHaveLength(1);
    expect(failures(l)[0]!.reason).toMatch(/the key file holds no usable PEM private key/);
    expect(l.lines.some((line) => line.msg === 'TLS client CA reloaded')).toBe(true);

    // The connection opened under CA A: no longer verified.
    expect(peerCertificateOf(openSocket)).toEqual({
      kind: 'unverified',
      reason: 'the client certificate was verified against a CA no longer in ARKVORY_TLS_CLIENT_CA_FILE',
    });
    // The old ticket resumes nothing: a full handshake, which CA B does not verify.
    const afterChange = await connect(l.port, ca, { client, session: ticket });
    clients.push(afterChange.socket);
    expect(afterChange.socket.isSessionReused()).toBe(false);
    expect(peerCertificateOf(await serverSide(l, afterChange.socket))).toMatchObject({ kind: 'unverified' });
    // A certificate of CA B: verified, and it stays so.
    const fromB = await connect(l.port, ca, { client: clientB });
    clients.push(fromB.socket);
    const bSocket = await serverSide(l, fromB.socket);
    expect(peerCertificateOf(bSocket)).toMatchObject({ kind: 'verified', sans: ['URI:spiffe://example.org/b'] });
    // A CA file that keeps CA B (CA A back beside it): the CA B connection stays verified.
    await writeFile(caFile, caB.certPem + ca.certPem);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(peerCertificateOf(bSocket)).toMatchObject({ kind: 'verified' });
  });

  it('a certificate issued by an intermediate CA names a principal only while that intermediate and its root are in the file', async () => {
    const caFile = path.join(dir, 'clients.pem');
    const caB = await createCertificateAuthority(dir, 'arkvory-test-ca-b');
    const intermediate = await createIntermediateAuthority(ca, dir, 'intermediate', new Date(Date.now() + 86_400_000));
    // The client sends its leaf and the intermediate.
    const client = await issueClientCertificate(intermediate, dir, 'client-i', 'URI:spiffe://example.org/i');
    await writeFile(caFile, ca.certPem + intermediate.certPem);
    const l = await started({ clientCaFile: caFile });
    const conn = await connect(l.port, ca, { client });
    clients.push(conn.socket);
    const socket = await serverSide(l, conn.socket);
    expect(peerCertificateOf(socket)).toMatchObject({ kind: 'verified', sans: ['URI:spiffe://example.org/i'] });
    // A second CA beside them (a CA rotation begins): nothing was taken out of trust.
    await writeFile(caFile, ca.certPem + intermediate.certPem + caB.certPem);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(peerCertificateOf(socket)).toMatchObject({ kind: 'verified' });
    const later = await connect(l.port, ca, { client });
    clients.push(later.socket);
    const laterSocket = await serverSide(l, later.socket);
    expect(peerCertificateOf(laterSocket)).toMatchObject({ kind: 'verified' });
    // The root taken out, the intermediate kept (a new handshake would fail): no open connection keeps its verdict.
    await writeFile(caFile, intermediate.certPem + caB.certPem);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(peerCertificateOf(socket)).toMatchObject({ kind: 'unverified' });
    expect(peerCertificateOf(laterSocket)).toMatchObject({ kind: 'unverified' });
    // Connections made after the removal are judged by their own handshake (which CA B does not verify).
    const fromB = await connect(l.port, ca, {
      client: await issueClientCertificate(caB, dir, 'client-b2', 'URI:spiffe://example.org/b2'),
    });
    clients.push(fromB.socket);
    expect(peerCertificateOf(await serverSide(l, fromB.socket))).toMatchObject({ kind: 'verified' });
    // Both back, then the intermediate taken out while its root stays: its leaves are refused.
    await writeFile(caFile, ca.certPem + intermediate.certPem);
    expect(await l.served.reload('test')).toBe('swapped');
    const again = await connect(l.port, ca, { client });
    clients.push(again.socket);
    const againSocket = await serverSide(l, again.socket);
    expect(peerCertificateOf(againSocket)).toMatchObject({ kind: 'verified' });
    await writeFile(caFile, ca.certPem);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(peerCertificateOf(againSocket)).toMatchObject({ kind: 'unverified' });
    // With the root alone in the file, OpenSSL verifies the chain the client sends, but an
    // intermediate the client brings does not name principals.
    const rootOnly = await connect(l.port, ca, { client });
    clients.push(rootOnly.socket);
    const rootOnlySocket = await serverSide(l, rootOnly.socket);
    expect(rootOnlySocket.authorized).toBe(true);
    expect(peerCertificateOf(rootOnlySocket)).toEqual({ kind: 'unverified', reason: NOT_ISSUED_BY_THE_FILE });
  });

  it('a client certificate stops authenticating when the CA of its chain expires, not only when it does', async () => {
    const caFile = path.join(dir, 'clients.pem');
    const shortCa = await createCertificateAuthority(dir, 'arkvory-test-ca-short', 1);
    await copyFile(shortCa.certFile, caFile);
    // Two days, its CA one.
    const client = await issueClientCertificate(shortCa, dir, 'client-s', 'URI:spiffe://example.org/s');
    const l = await started({ clientCaFile: caFile });
    const conn = await connect(l.port, ca, { client });
    clients.push(conn.socket);
    const peer = peerCertificateOf(await serverSide(l, conn.socket));
    const caEnd = Date.parse(new X509Certificate(shortCa.certPem).validTo);
    expect(caEnd).toBeLessThan(Date.parse(new X509Certificate(client.certPem).validTo));
    expect(peer).toMatchObject({ kind: 'verified', notAfterMs: caEnd });
  });
});

const NOT_ISSUED_BY_THE_FILE =
  'the client certificate was not issued by a CA of ARKVORY_TLS_CLIENT_CA_FILE: an intermediate CA the client sends does not name principals (put it in the file to trust it)';

describe('which verified client certificates name a principal', () => {
  it("a CA:TRUE certificate is none, nor a leaf it issued with another principal's SAN, though OpenSSL verifies both", async () => {
    const caFile = path.join(dir, 'clients.pem');
    await copyFile(ca.certFile, caFile);
    const l = await started({ clientCaFile: caFile });
    // A principal's certificate its CA signed with CA:TRUE, and a leaf its holder issued naming another principal.
    const { certificate, authority } = await issueClientAuthority(
      ca,
      dir,
      'principal-ca',
      'URI:spiffe://example.org/a',
    );
    const forged = await issueClientCertificate(authority, dir, 'forged', 'URI:spiffe://example.org/b');
    const genuine = await issueClientCertificate(ca, dir, 'genuine', 'URI:spiffe://example.org/b');
    const judged = async (client: IssuedCertificate) => {
      const { socket } = await connect(l.port, ca, { client });
      clients.push(socket);
      const side = await serverSide(l, socket);
      // The handshake's verdict (OpenSSL's defaults): every one of them verified.
      expect(side.authorized).toBe(true);
      return peerCertificateOf(side);
    };
    expect(await judged(certificate)).toEqual({
      kind: 'unverified',
      reason:
        "the client certificate is a CA certificate (basicConstraints CA:TRUE): a principal's certificate must be an end-entity one",
    });
    expect(await judged(forged)).toEqual({ kind: 'unverified', reason: NOT_ISSUED_BY_THE_FILE });
    expect(await judged(genuine)).toMatchObject({ kind: 'verified', sans: ['URI:spiffe://example.org/b'] });
    // A server's certificate (extendedKeyUsage serverAuth alone) is refused by OpenSSL itself.
    const serverOnly = await issueCertificate(ca, dir, 'server-only', { sans: ['URI:spiffe://example.org/b'] });
    const { socket } = await connect(l.port, ca, { client: serverOnly });
    clients.push(socket);
    expect(peerCertificateOf(await serverSide(l, socket))).toEqual({
      kind: 'unverified',
      reason: 'the client certificate was not verified: INVALID_PURPOSE',
    });
  });
});

describe('TLS files over 1 MiB or not regular files', () => {
  it('refuse the start; on a reload the files served stay, reported as tls_reload_failed', async () => {
    // A valid chain padded with text after it, which OpenSSL reads past: only the size is wrong.
    const big = `${first.certPem}${'#'.repeat(1023)}\n`.padEnd(1024 * 1024 + 1, `${'#'.repeat(1023)}\n`);
    const bigFile = path.join(dir, 'big.crt');
    await writeFile(bigFile, big);
    await expect(
      listen({ certFile: bigFile, keyFile, clientCaFile: undefined, clientCert: 'optional' }),
    ).rejects.toThrow(
      `TLS: ARKVORY_TLS_CERT_FILE ${bigFile} is ${Buffer.byteLength(big)} bytes, more than the 1 MiB (1048576 bytes) a TLS file may be`,
    );
    const zero = path.join(dir, 'zero.key');
    await symlink('/dev/zero', zero);
    await expect(listen({ certFile, keyFile: zero, clientCaFile: undefined, clientCert: 'optional' })).rejects.toThrow(
      `TLS: ARKVORY_TLS_KEY_FILE ${zero} is not a regular file`,
    );
    const caFile = path.join(dir, 'clients.pem');
    await copyFile(ca.certFile, caFile);
    const l = await started({ clientCaFile: caFile });
    await writeFile(certFile, big);
    expect(await l.served.reload('test')).toBe('rejected');
    expect(l.served.certificate.serial).toBe(first.serial);
    expect(failures(l).at(-1)!.reason).toMatch(/ARKVORY_TLS_CERT_FILE .* more than the 1 MiB/);
    expect(await servedSerial(l.port)).toBe(first.serial);
    await writeFile(certFile, first.certPem);
    await rm(keyFile);
    await symlink('/dev/zero', keyFile);
    await rm(caFile);
    await symlink('/dev/zero', caFile);
    expect(await l.served.reload('test')).toBe('rejected');
    expect(failures(l).at(-1)!.reason).toMatch(
      /ARKVORY_TLS_KEY_FILE .* is not a regular file.*ARKVORY_TLS_CLIENT_CA_FILE .* is not a regular file/,
    );
    expect(await servedSerial(l.port)).toBe(first.serial);
  });
});

describe('the key file readable by every account', () => {
  const warnings = (l: Listening) => l.lines.filter((line) => line.code === 'tls_key_readable');

  it('is served with one warning naming the file and its mode, at start and when a reload swaps the pair in', async () => {
    await chmod(keyFile, 0o644);
    const l = await started();
    expect(warnings(l)).toEqual([expect.objectContaining({ level: 40, file: keyFile, mode: '0644' })]);
    expect(String(warnings(l)[0]!.msg)).toContain('give it mode 0600');
    const second = await issueServerCertificate(ca, dir, 'second-exposed');
    await writeFile(certFile, second.certPem);
    await writeFile(keyFile, second.keyPem);
    await chmod(keyFile, 0o604);
    expect(await l.served.reload('test')).toBe('swapped');
    expect(warnings(l).map((w) => w.mode)).toEqual(['0644', '0604']);
  });

  it('says nothing for 0600 and 0640', async () => {
    for (const mode of [0o600, 0o640]) {
      await chmod(keyFile, mode);
      const l = await started();
      expect(warnings(l)).toEqual([]);
    }
  });
});
