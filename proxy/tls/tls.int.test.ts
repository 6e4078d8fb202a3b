/**
 * TLS on real gateway processes, with certificates made for this run (test/harness/tls-certs.ts):
 * real clients (curl, wget, aria2c) with a custom CA, byte-exact GET, Range and upload; the start
 * refused on a broken pair; reload on file change and SIGHUP (a broken new pair keeps the old one
 * and is counted); rotation under load with zero failed requests; client certificates as
 * principals, an unbinding, a disabled principal and a certificate's expiry reaching open keep-alive
 * and HTTP/2 connections within the 2 s bound, a flood of refused certificates logged within the
 * client-fault budget; credentials refused over plain HTTP; whose word on the client's scheme counts
 * (a trusted proxy's, never a client's: the console cookie, pre-signed links, credentials in clear);
 * and Strict-Transport-Security,
 * x-request-id and nosniff on the answers Node would give by itself (an unmet Expect, CONNECT).
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { freeLoopbackPort } from '../../test/harness/index.ts';
import { http2Request } from '../../test/support/http2-request.ts';
import { httpsRequest } from '../../test/support/https-request.ts';
import { curlHead } from '../../test/support/curl-head.ts';
import { startHeaderLoggingProxy } from '../../test/support/header-logging-proxy.ts';
import { CLIENT_FAULT_LOG } from '../../lib/log-budget.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  type IssuedCertificate,
  issueCertificate,
  issueClientAuthority,
  issueClientCertificate,
  issueServerCertificate,
  replaceFileAtomically,
  waitUntil,
} from '../../test/harness/index.ts';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const REPO = 'tlsrepo';
const SAN = 'URI:spiffe://example.org/ci';

const db = useTestDatabase();
let dir: string;
let ca: CertificateAuthority;
let server: IssuedCertificate;
let certFile: string;
let keyFile: string;
let owner: { principalId: string; key: string; name: string };
const payload = randomContent(3 * MiB + 123);
const target = `/api/v1/repositories/${REPO}/artifacts/blob.bin`;
const mtlsTarget = `/api/v1/repositories/${REPO}/artifacts/mtls.bin`;

beforeAll(async () => {
  dir = await makeTempDir('arkvory-tls-');
  ca = await createCertificateAuthority(dir);
  server = await issueServerCertificate(ca, dir);
  // The files a gateway serves are copies: the rotation tests replace them.
  certFile = path.join(dir, 'served.crt');
  keyFile = path.join(dir, 'served.key');
  await writeFile(certFile, server.certPem);
  await writeFile(keyFile, server.keyPem);
  await createRepository(db.pool, REPO);
  owner = await createServiceAccount(db.pool, { name: 'tls-owner', grants: { [REPO]: 'write' } });
});

function tlsEnv(extra: Record<string, string> = {}): Record<string, string> {
  return { ARKVORY_DATABASE_URL: db.url, ARKVORY_TLS_CERT_FILE: certFile, ARKVORY_TLS_KEY_FILE: keyFile, ...extra };
}

/** Starts a gateway with TLS and waits until it answers over https. */
async function startTlsGateway(env: Record<string, string>): Promise<GatewayProcess & { https: string }> {
  const gw = await startGateway({ env, waitFor: 'none' });
  const url = `https://127.0.0.1:${gw.port}`;
  await waitUntil(async () => (await httpsRequest(`${url}/health/status`, { ca: ca.certPem })).status === 200, {
    what: 'the gateway to serve over https',
    timeoutMs: 60_000,
    intervalMs: 100,
    retryOnError: true,
    process: gw,
  });
  return Object.assign(gw, { https: url });
}

/** What the TLS listener's gateway is given in ARKVORY_TLS_HSTS (names in another case, no space), and sends. */
const HSTS_GIVEN = 'Max-Age=31536000;includeSubDomains';
const HSTS_SENT = 'max-age=31536000; includeSubDomains';

/** `curl -D -` output with the body: its last head parsed and the body after it. */
function parseCurl(stdout: string): {
  status: number;
  version: string;
  headers: Record<string, string>;
  counts: Record<string, number>;
  body: string;
} {
  const split = stdout.lastIndexOf('\r\n\r\n');
  const [statusLine, ...lines] = stdout.slice(0, split).split('\r\n\r\n').at(-1)!.split('\r\n');
  const headers: Record<string, string> = {};
  const counts: Record<string, number> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    headers[name] = line.slice(colon + 1).trim();
    counts[name] = (counts[name] ?? 0) + 1;
  }
  const [protocol, status] = statusLine!.split(' ');
  return {
    status: Number(status),
    version: protocol!.replace('HTTP/', ''),
    headers,
    counts,
    body: stdout.slice(split + 4),
  };
}

describe('TLS listener', () => {
  let gw: GatewayProcess & { https: string };
  let caFile: string;
  beforeAll(async () => {
    caFile = ca.certFile;
    gw = await startTlsGateway(tlsEnv({ ARKVORY_TLS_HSTS: HSTS_GIVEN }));
  });
  afterAll(() => gw.stop());

  it('ARKVORY_TLS_HSTS: Strict-Transport-Security once on every answer, HTTP/1.1 and HTTP/2 (success, 304, errors, the console, a head the parser refused)', async () => {
    const file = path.join(dir, 'hsts.txt');
    await writeFile(file, 'strict\n');
    const artifact = `${gw.https}/api/v1/repositories/${REPO}/artifacts/hsts.txt`;
    const auth = ['-H', `authorization: Bearer ${owner.key}`];
    const put = await curlHead(artifact, caFile, '1.1', [...auth, '-X', 'PUT', '--data-binary', `@${file}`]);
    expect(put.status).toBe(201);
    expect(put.headers['strict-transport-security']).toBe(HSTS_SENT);
    for (const version of ['1.1', '2'] as const) {
      const got = await curlHead(`${artifact}/content`, caFile, version, auth);
      expect([got.status, got.version]).toEqual([200, version]);
      const answers = {
        200: got,
        304: await curlHead(`${artifact}/content`, caFile, version, [
          ...auth,
          '-H',
          `if-none-match: ${got.headers.etag}`,
        ]),
        401: await curlHead(`${artifact}/content`, caFile, version),
        404: await curlHead(`${gw.https}/no/such/route`, caFile, version),
        405: await curlHead(`${gw.https}/health/live`, caFile, version, ['-X', 'DELETE']),
        console: await curlHead(`${gw.https}/console/`, caFile, version),
        health: await curlHead(`${gw.https}/health/live`, caFile, version),
      };
      for (const [what, answer] of Object.entries(answers)) {
        const label = `${what} over HTTP/${version}: ${answer.status}`;
        if (/^\d+$/.test(what)) expect(answer.status, label).toBe(Number(what));
        expect(answer.headers['strict-transport-security'], label).toBe(HSTS_SENT);
        expect(answer.counts['strict-transport-security'], label).toBe(1);
      }
    }
    // A head Node's parser refuses is answered by the front door on the bare TLS socket: it too.
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = tls.connect(
        { host: '127.0.0.1', port: gw.port, ca: ca.certPem, servername: 'localhost', ALPNProtocols: ['http/1.1'] },
        () => socket.write('GARBAGE \0\0 HTTP/9\r\n\r\n'),
      );
      let text = '';
      socket.on('data', (d) => (text += d.toString()));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    expect(reply).toMatch(/^HTTP\/1\.1 400/);
    expect(reply).toContain(`\r\nstrict-transport-security: ${HSTS_SENT}\r\n`);
  });

  it('ARKVORY_TLS_HSTS, x-request-id and nosniff on the answers Node would give by itself: an unmet Expect (417) and CONNECT (405), HTTP/2 and HTTP/1.1', async () => {
    const codes: Record<string, number> = { expectation_failed: 417, connect_refused: 405 };
    const ours = (label: string, status: number, headers: Record<string, unknown>, body: string, code: string) => {
      expect(status, label).toBe(codes[code]);
      expect(headers['strict-transport-security'], label).toBe(HSTS_SENT);
      expect(headers['x-content-type-options'], label).toBe('nosniff');
      expect(headers['x-request-id'], label).toMatch(/^[0-9a-f-]{36}$/);
      expect(JSON.parse(body).code, label).toBe(code);
    };
    const body = path.join(dir, 'expect-body.txt');
    for (const version of ['2', '1.1'] as const) {
      // curl sends the Expect it is given and waits for the answer: Node's code, not a route, answers it.
      const { stdout } = await run('curl', [
        '-sS',
        `--http${version}`,
        '--cacert',
        caFile,
        '-D',
        '-',
        '-H',
        'expect: teapot',
        `${gw.https}/health/live`,
      ]);
      const expectation = parseCurl(stdout);
      expect(expectation.version, `HTTP/${version}`).toBe(version === '2' ? '2' : '1.1');
      expect(expectation.counts['strict-transport-security']).toBe(1);
      ours(
        `Expect over HTTP/${version}`,
        expectation.status,
        expectation.headers,
        expectation.body,
        'expectation_failed',
      );
    }
    await writeFile(body, 'refused unread\n');
    const put = await curlHead(`${gw.https}/health/live`, caFile, '2', [
      '-H',
      'expect: teapot',
      '--data-binary',
      `@${body}`,
    ]);
    expect([put.status, put.headers['strict-transport-security']]).toEqual([417, HSTS_SENT]);
    // CONNECT over HTTP/1.1: node:http dropped the connection without an answer.
    const { stdout: connect1 } = await run('curl', [
      '-sS',
      '--http1.1',
      '--cacert',
      caFile,
      '-D',
      '-',
      '-X',
      'CONNECT',
      `${gw.https}/health/live`,
    ]);
    const refused1 = parseCurl(connect1);
    ours('CONNECT over HTTP/1.1', refused1.status, refused1.headers, refused1.body, 'connect_refused');
    // CONNECT over HTTP/2 has no :path (RFC 9113 §8.5), which this curl cannot send: node:http2's client.
    const session = http2.connect(gw.https, { ca: ca.certPem });
    try {
      const refused2 = await new Promise<{ status: number; headers: http2.IncomingHttpHeaders; body: string }>(
        (resolve, reject) => {
          const stream = session.request({ ':method': 'CONNECT', ':authority': 'example.org:443' });
          let headers: http2.IncomingHttpHeaders = {};
          let text = '';
          stream.on('response', (h) => (headers = h));
          stream.on('data', (c: Buffer) => (text += c.toString()));
          stream.on('end', () => resolve({ status: Number(headers[':status']), headers, body: text }));
          stream.on('error', reject);
        },
      );
      ours('CONNECT over HTTP/2', refused2.status, refused2.headers, refused2.body, 'connect_refused');
    } finally {
      session.close();
    }
  });

  it('curl --http1.1 --cacert: upload, full GET and Range are byte-exact', async () => {
    const upload = path.join(dir, 'upload.bin');
    await writeFile(upload, payload);
    const put = await run('curl', [
      '-sS',
      '--http1.1',
      '--cacert',
      caFile,
      '-o',
      '/dev/null',
      '-w',
      '%{http_code} %{ssl_verify_result} %{http_version}',
      '-X',
      'PUT',
      '-H',
      `authorization: Bearer ${owner.key}`,
      '-H',
      `content-digest: ${contentDigest(payload)}`,
      '--data-binary',
      `@${upload}`,
      `${gw.https}${target}`,
    ]);
    expect(put.stdout).toBe('201 0 1.1');
    const whole = path.join(dir, 'whole.bin');
    await run('curl', [
      '-sSf',
      '--http1.1',
      '--cacert',
      caFile,
      '-H',
      `authorization: Bearer ${owner.key}`,
      '-o',
      whole,
      `${gw.https}${target}/content`,
    ]);
    expect(sha256(await readFile(whole))).toBe(sha256(payload));
    const part = await run(
      'curl',
      [
        '-sS',
        '--http1.1',
        '--cacert',
        caFile,
        '-H',
        `authorization: Bearer ${owner.key}`,
        '-r',
        '1000-1999',
        '-o',
        '-',
        '-w',
        '',
        `${gw.https}${target}/content`,
      ],
      { encoding: 'buffer' },
    );
    expect(Buffer.from(part.stdout).equals(payload.subarray(1000, 2000))).toBe(true);
    // Without the CA the certificate is not trusted: curl refuses (exit 60), nothing is served.
    await expect(run('curl', ['-sS', '--http1.1', `${gw.https}/health/live`])).rejects.toMatchObject({ code: 60 });
  });

  it('wget and aria2c with a custom CA download byte-exact', async () => {
    const viaWget = path.join(dir, 'wget.bin');
    await run('wget', [
      '-q',
      `--ca-certificate=${caFile}`,
      `--header=authorization: Bearer ${owner.key}`,
      '-O',
      viaWget,
      `${gw.https}${target}/content`,
    ]);
    expect(sha256(await readFile(viaWget))).toBe(sha256(payload));
    await run('aria2c', [
      '-q',
      '-x4',
      '-s4',
      '--min-split-size=1M',
      `--ca-certificate=${caFile}`,
      `--header=authorization: Bearer ${owner.key}`,
      '-d',
      dir,
      '-o',
      'aria.bin',
      `${gw.https}${target}/content`,
    ]);
    expect(sha256(await readFile(path.join(dir, 'aria.bin')))).toBe(sha256(payload));
  });

  it('offers TLS 1.2 and 1.3 only, with ALPN h2 (preferred) and http/1.1, and session resumption', async () => {
    // s_client reads stdin until it ends: closed at once, it prints the session and quits.
    const probe = (args: string[]) =>
      new Promise<string>((resolve) => {
        const child = execFile(
          'openssl',
          ['s_client', '-connect', `127.0.0.1:${gw.port}`, '-CAfile', caFile, ...args],
          { timeout: 10_000 },
          (_err, stdout) => resolve(String(stdout)),
        );
        child.stdin?.end();
      });
    // Refused: no session comes out of the handshake (OpenSSL prints a NONE cipher).
    for (const old of ['-tls1', '-tls1_1']) expect(await probe([old])).toMatch(/Cipher is \(NONE\)|Cipher\s*: 0000/);
    const v12 = await probe(['-tls1_2', '-alpn', 'h2,http/1.1']);
    expect(v12).toMatch(/Protocol\s*: TLSv1\.2/);
    expect(v12).toMatch(/ALPN protocol: h2/);
    expect(await probe(['-tls1_2', '-alpn', 'http/1.1'])).toMatch(/ALPN protocol: http\/1\.1/);
    expect(v12).toMatch(/Cipher\s*: ECDHE-/);
    const sessionFile = path.join(dir, 'session.pem');
    await probe(['-tls1_2', '-sess_out', sessionFile]);
    expect(await probe(['-tls1_2', '-sess_in', sessionFile])).toMatch(/^Reused, TLSv1\.2/m);
  });
  it('testssl.sh: no SSL, no TLS 1.0/1.1, no weak cipher, no vulnerability flagged', async () => {
    const json = path.join(dir, 'testssl.json');
    // Protocols, cipher categories and the vulnerability checks only (-p -s -U): the rest is slow.
    await run(
      'testssl',
      ['--quiet', '--warnings', 'off', '--color', '0', '-p', '-s', '-U', '--jsonfile', json, gw.https],
      {
        timeout: 240_000,
      },
    ).catch((err: { code?: number }) => {
      // testssl.sh exits non-zero when it flags something: the findings below say what.
      if (typeof err.code !== 'number') throw err;
    });
    const findings = JSON.parse(await readFile(json, 'utf8')) as Array<{
      id: string;
      severity: string;
      finding: string;
    }>;
    const finding = (id: string) => findings.find((f) => f.id === id)?.finding;
    for (const id of ['SSLv2', 'SSLv3', 'TLS1', 'TLS1_1']) expect(finding(id), id).toMatch(/^not offered/);
    expect(finding('TLS1_2')).toMatch(/^offered/);
    expect(finding('TLS1_3')).toMatch(/^offered/);
    for (const id of [
      'cipherlist_NULL',
      'cipherlist_aNULL',
      'cipherlist_EXPORT',
      'cipherlist_LOW',
      'cipherlist_3DES_IDEA',
    ])
      expect(finding(id), id).toMatch(/^not offered/);
    for (const id of [
      'heartbleed',
      'CCS',
      'ticketbleed',
      'ROBOT',
      'POODLE_SSL',
      'SWEET32',
      'FREAK',
      'DROWN',
      'LOGJAM',
      'BEAST',
      'LUCKY13',
      'RC4',
    ])
      expect(
        findings.some((f) => f.id === id),
        `${id} was checked`,
      ).toBe(true);
    expect(findings.filter((f) => !['OK', 'INFO'].includes(f.severity))).toEqual([]);
  }, 300_000);
});

describe('certificate reload', () => {
  it('refuses to start with a key that does not match, an expired certificate, an unreadable file', async () => {
    const other = await issueServerCertificate(ca, dir, 'other');
    const expired = await issueCertificate(ca, dir, 'expired', { sans: ['IP:127.0.0.1'], expired: true });
    for (const [cert, key, reason] of [
      [server.certFile, other.keyFile, 'the private key does not match the certificate'],
      [expired.certFile, expired.keyFile, 'the certificate expired at 2020-01-02T00:00:00.000Z'],
      [path.join(dir, 'missing.crt'), server.keyFile, 'cannot read ARKVORY_TLS_CERT_FILE'],
    ] as const) {
      const gw = await startGateway({
        env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TLS_CERT_FILE: cert, ARKVORY_TLS_KEY_FILE: key },
        waitFor: 'none',
      });
      expect(await gw.exited).toBe(1);
      expect(gw.logs()).toContain(`arkvory: cannot start: TLS: ${reason}`);
    }
  });

  it('serves a new pair after a file change and after SIGHUP; a broken pair keeps the old one and is counted', async () => {
    const gw = await startTlsGateway(tlsEnv());
    const serialNow = async () => (await httpsRequest(`${gw.https}/health/live`, { ca: ca.certPem })).serial;
    expect(await serialNow()).toBe(server.serial);

    const second = await issueServerCertificate(ca, dir, 'second');
    await replaceFileAtomically(keyFile, second.keyPem);
    await replaceFileAtomically(certFile, second.certPem);
    await waitUntil(async () => (await serialNow()) === second.serial, {
      what: 'the certificate reload',
      timeoutMs: 5000,
      intervalMs: 100,
    });

    // A broken key (the cert stays the second one): rejected, still the second serial, counted.
    await replaceFileAtomically(keyFile, 'not a key\n');
    await waitUntil(async () => gw.logs().includes('"code":"tls_reload_failed"'), {
      what: 'the failed reload to be logged',
      timeoutMs: 5000,
      intervalMs: 100,
    });
    expect(await serialNow()).toBe(second.serial);
    const metrics = (await httpsRequest(`${gw.https}/metrics`, { ca: ca.certPem })).body.toString();
    expect(metrics).toMatch(/^arkvory_tls_reload_failures_total [1-9]/m);
    expect(metrics).toContain(`arkvory_tls_certificate_expiry_timestamp_seconds{serial="${second.serial}"}`);
    const failure = gw.logLines().find((l) => l.code === 'tls_reload_failed');
    expect(failure?.reason).toMatch(/the key file holds no usable PEM private key/);

    // A valid pair made for TLS clients (extendedKeyUsage clientAuth, the wrong file deployed): every
    // client would refuse it in the handshake, so it is not served either.
    const clientPair = await issueCertificate(ca, dir, 'client-usage', {
      sans: ['DNS:localhost', 'IP:127.0.0.1'],
      usage: 'client',
    });
    await replaceFileAtomically(keyFile, clientPair.keyPem);
    await replaceFileAtomically(certFile, clientPair.certPem);
    await waitUntil(
      async () => gw.logLines().some((l) => l.code === 'tls_reload_failed' && /serverAuth/.test(String(l.reason))),
      {
        what: 'the reload of a client certificate to be refused',
        timeoutMs: 5000,
        intervalMs: 100,
      },
    );
    expect(await serialNow()).toBe(second.serial);

    // SIGHUP with a good pair: served at once.
    const third = await issueServerCertificate(ca, dir, 'third');
    await writeFile(certFile, third.certPem);
    await writeFile(keyFile, third.keyPem);
    gw.child.kill('SIGHUP');
    await waitUntil(async () => (await serialNow()) === third.serial, {
      what: 'the certificate reload',
      timeoutMs: 5000,
      intervalMs: 100,
    });
    await gw.stop();
    await writeFile(certFile, server.certPem);
    await writeFile(keyFile, server.keyPem);
  });

  it('the router and the rules service give their certificate and failed reloads on ARKVORY_METRICS_PORT', async () => {
    const notAfter = (pem: string) => Math.floor(new X509Certificate(pem).validToDate.getTime() / 1000);
    for (const [role, extra] of [
      [
        'router',
        { ARKVORY_ROUTER_BACKENDS: 'http://127.0.0.1:9', ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000' },
      ],
      ['rules-service', { ARKVORY_DATABASE_URL: db.url }],
    ] as const) {
      // Files of its own: breaking them must not touch the other tests' pair.
      const ownCert = path.join(dir, `${role}.crt`);
      const ownKey = path.join(dir, `${role}.key`);
      await writeFile(ownCert, server.certPem);
      await writeFile(ownKey, server.keyPem);
      const metricsPort = await freeLoopbackPort();
      const proc = await startGateway({
        env: {
          ARKVORY_ROLE: role,
          ARKVORY_TLS_CERT_FILE: ownCert,
          ARKVORY_TLS_KEY_FILE: ownKey,
          ARKVORY_METRICS_PORT: String(metricsPort),
          ARKVORY_TLS_HSTS: 'max-age=600',
          ...extra,
        },
        waitFor: 'none',
      });
      const scrape = async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      await waitUntil(async () => (await scrape()).includes('arkvory_tls_certificate_expiry_timestamp_seconds{'), {
        what: `the ${role}'s metrics port`,
        timeoutMs: 45_000,
        intervalMs: 100,
        retryOnError: true,
        process: proc,
      });
      // Its TLS listener sends Strict-Transport-Security (the router's own answers included); the
      // plain-HTTP metrics port of the same process never does (RFC 6797 §7.2).
      for (const version of ['1.1', '2'] as const) {
        const live = await curlHead(`https://127.0.0.1:${proc.port}/health/live`, ca.certFile, version);
        expect([live.status, live.headers['strict-transport-security']], `${role} HTTP/${version}`).toEqual([
          200,
          'max-age=600',
        ]);
      }
      expect((await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).headers.has('strict-transport-security')).toBe(
        false,
      );
      const before = await scrape();
      expect(before).toContain(
        `arkvory_tls_certificate_expiry_timestamp_seconds{serial="${server.serial}"} ${notAfter(server.certPem)}`,
      );
      expect(before).toMatch(/^arkvory_tls_reload_failures_total 0$/m);
      expect(before).toMatch(/^arkvory_http_open_connections \d+$/m);
      expect(before).toMatch(/^arkvory_http2_sessions_total \d+$/m);
      // A broken key: the old pair stays served, and the failure is counted where an alert sees it.
      await replaceFileAtomically(ownKey, 'not a key\n');
      await waitUntil(async () => /^arkvory_tls_reload_failures_total 1$/m.test(await scrape()), {
        what: `the ${role}'s failed reload to be counted`,
        timeoutMs: 15_000,
        intervalMs: 100,
      });
      expect(await scrape()).toContain(`arkvory_tls_certificate_expiry_timestamp_seconds{serial="${server.serial}"}`);
      await proc.stop();
    }
  }, 150_000);

  it('rotation under load: 1,000 requests over 20 s, files swapped twice, zero failures, new handshakes see the new serial', async () => {
    // Admission wide enough for a machine too loaded to keep up with one request per 20 ms: what is
    // measured is the rotation, not the per-principal bound (429 `busy` past 4 slots and 64 waiting).
    const gw = await startTlsGateway(
      tlsEnv({ ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '256', ARKVORY_ADMISSION_QUEUE_LENGTH: '1000' }),
    );
    const rotTarget = `/api/v1/repositories/${REPO}/artifacts/rotation.bin`;
    const small = randomContent(4096);
    const put = await httpsRequest(`${gw.https}${rotTarget}`, {
      ca: ca.certPem,
      method: 'PUT',
      headers: { ...bearer(owner.key), 'content-digest': contentDigest(small) },
      body: small,
    });
    expect(put.status).toBe(201);
    const next = [await issueServerCertificate(ca, dir, 'rot1'), await issueServerCertificate(ca, dir, 'rot2')];
    // The pair it started with is served before any swap (under load the handshakes of the first
    // seconds may otherwise all be answered after the first swap).
    const first = await httpsRequest(`${gw.https}${rotTarget}/content`, { ca: ca.certPem, headers: bearer(owner.key) });
    expect(first.status).toBe(200);
    expect(first.serial).toBe(server.serial);
    const started = performance.now();
    const results: Array<{
      atMs: number;
      sentAt: number;
      doneAt: number;
      status: number;
      serial: string | undefined;
      error?: string;
    }> = [];
    const swaps = (async () => {
      for (const [i, pair] of next.entries()) {
        await sleep(i === 0 ? 6000 : 7000);
        await replaceFileAtomically(keyFile, pair.keyPem);
        await replaceFileAtomically(certFile, pair.certPem);
      }
    })();
    const inflight: Promise<void>[] = [];
    for (let i = 0; i < 1000; i++) {
      const due = i * 20;
      const wait = due - (performance.now() - started);
      if (wait > 0) await sleep(wait);
      const atMs = performance.now() - started;
      const sentAt = Date.now();
      inflight.push(
        httpsRequest(`${gw.https}${rotTarget}/content`, { ca: ca.certPem, headers: bearer(owner.key) }).then(
          (r) => {
            const doneAt = Date.now();
            results.push({ atMs, sentAt, doneAt, status: r.status, serial: r.serial });
            if (r.status === 200 && !r.body.equals(small))
              results.push({ atMs, sentAt, doneAt, status: -1, serial: r.serial });
          },
          (err: Error) =>
            void results.push({ atMs, sentAt, doneAt: Date.now(), status: 0, serial: undefined, error: err.message }),
        ),
      );
    }
    await Promise.all(inflight);
    await swaps;
    await gw.stop();
    await writeFile(certFile, server.certPem);
    await writeFile(keyFile, server.keyPem);
    expect(results.filter((r) => r.status !== 200)).toEqual([]);
    expect(results).toHaveLength(1000);
    // Each swap is taken once both files are in (the key alone does not match the served certificate).
    // When a swap was taken is the gateway's own line, logged once its servers hold the new pair; a
    // fixed delay after writing the files would instead time a loaded machine's scheduler.
    const reloadedAt = (serial: string) =>
      Math.max(
        ...gw
          .logLines()
          .filter((l) => l.msg === 'TLS certificate reloaded' && l.serial === serial)
          .map((l) => Date.parse(String(l.time))),
      );
    const reloads = next.map((pair) => reloadedAt(pair.serial));
    expect(reloads.every(Number.isFinite), 'a "TLS certificate reloaded" line for each new pair').toBe(true);
    expect(reloads[0]).toBeLessThan(reloads[1]!);
    // A request sent after a reload was logged handshakes on that pair, or, if it was still
    // handshaking when the next one was taken, on the next.
    for (const r of results) {
      const allowed =
        r.sentAt > reloads[1]!
          ? [next[1]!.serial]
          : r.sentAt > reloads[0]!
            ? r.doneAt < reloads[1]!
              ? [next[0]!.serial]
              : [next[0]!.serial, next[1]!.serial]
            : undefined;
      if (allowed) expect(allowed, `request at ${Math.round(r.atMs)} ms`).toContain(r.serial);
    }
    expect(new Set([first.serial, ...results.map((r) => r.serial)])).toEqual(
      new Set([server.serial, next[0]!.serial, next[1]!.serial]),
    );
  }, 60_000);
});

describe('client certificates (mutual TLS)', () => {
  let gw: GatewayProcess & { https: string };
  let bound: IssuedCertificate;
  let unbound: IssuedCertificate;
  let foreign: IssuedCertificate;
  const agentFor = (cert: IssuedCertificate) =>
    new https.Agent({ keepAlive: true, maxSockets: 1, ca: ca.certPem, cert: cert.certPem, key: cert.keyPem });

  beforeAll(async () => {
    const ci = await createServiceAccount(db.pool, { name: 'mtls-ci', grants: { [REPO]: 'read' } });
    expect(ci.name).toBe('mtls-ci');
    bound = await issueClientCertificate(ca, dir, 'client-ci', SAN);
    unbound = await issueClientCertificate(ca, dir, 'client-other', 'URI:spiffe://example.org/other');
    const otherCa = await createCertificateAuthority(path.join(dir, 'other-ca'), 'other-ca');
    foreign = await issueClientCertificate(otherCa, path.join(dir, 'other-ca'), 'client-foreign', SAN);
    gw = await startTlsGateway(tlsEnv({ ARKVORY_TLS_CLIENT_CA_FILE: ca.certFile }));
    const put = await httpsRequest(`${gw.https}${mtlsTarget}`, {
      ca: ca.certPem,
      method: 'PUT',
      headers: { ...bearer(owner.key), 'content-digest': contentDigest(payload) },
      body: payload,
    });
    expect(put.status).toBe(201);
    const bind = await runCli(['principals', 'bind-cert', 'mtls-ci', 'spiffe://example.org/ci', '--scopes', 'read'], {
      ARKVORY_DATABASE_URL: db.url,
    });
    expect(bind.code, bind.stderr).toBe(0);
    expect(JSON.parse(bind.stdout)).toMatchObject({ san: SAN, principalName: 'mtls-ci', scopes: ['read'] });
  });
  afterAll(() => gw.stop());

  it('a bound certificate is its principal (grants apply); an unbound or foreign one is 401 with the reason logged', async () => {
    const agent = agentFor(bound);
    const ok = await httpsRequest(`${gw.https}${mtlsTarget}/content`, { ca: ca.certPem, agent });
    expect(ok.status).toBe(200);
    expect(sha256(ok.body)).toBe(sha256(payload));
    // Read only: the grant and the binding's scopes apply as for a key.
    const write = await httpsRequest(`${gw.https}/api/v1/repositories/${REPO}/artifacts/other.bin`, {
      ca: ca.certPem,
      agent,
      method: 'PUT',
      headers: { 'content-digest': contentDigest(Buffer.from('x')) },
      body: Buffer.from('x'),
    });
    expect(write.status).toBe(403);
    agent.destroy();
    for (const [cert, reason] of [
      [unbound, 'no principal is bound to URI:spiffe://example.org/other'],
      [foreign, 'the client certificate was not verified'],
    ] as const) {
      const a = agentFor(cert);
      const refused = await httpsRequest(`${gw.https}${mtlsTarget}/content`, { ca: ca.certPem, agent: a });
      a.destroy();
      expect(refused.status).toBe(401);
      expect(JSON.parse(refused.body.toString()).code).toBe('unauthorized');
      // The log line is written by the gateway process and read through its pipe: it may trail the answer.
      await waitUntil(() => gw.logs().includes(reason), {
        what: `the log to give the reason (${reason})`,
        timeoutMs: 5000,
      });
    }
    // A key still works on a connection that shows no certificate.
    expect(
      (await httpsRequest(`${gw.https}${mtlsTarget}/content`, { ca: ca.certPem, headers: bearer(owner.key) })).status,
    ).toBe(200);
  });

  it("a principal's certificate signed as a CA cannot name another principal: its own and a leaf it issued with another's SAN are 401, the reason logged", async () => {
    // A careless issuer signed CA:TRUE for this one; OpenSSL verifies what its holder then issues.
    const holderDir = path.join(dir, 'ca-holder');
    await mkdir(holderDir, { recursive: true });
    const { certificate, authority } = await issueClientAuthority(
      ca,
      holderDir,
      'ca-holder',
      'URI:spiffe://example.org/ca-holder',
    );
    // Sent as the forged leaf followed by the holder's certificate: the chain reaches the client CA.
    const forged = await issueClientCertificate(authority, holderDir, 'forged-ci', SAN);
    for (const [cert, reason] of [
      [forged, 'the client certificate was not issued by a CA of ARKVORY_TLS_CLIENT_CA_FILE'],
      [certificate, 'the client certificate is a CA certificate (basicConstraints CA:TRUE)'],
    ] as const) {
      const a = agentFor(cert);
      const refused = await httpsRequest(`${gw.https}${mtlsTarget}/content`, { ca: ca.certPem, agent: a });
      a.destroy();
      expect(refused.status, reason).toBe(401);
      expect(JSON.parse(refused.body.toString()).code).toBe('unauthorized');
      await waitUntil(() => gw.logs().includes(reason), {
        what: `the log to give the reason (${reason})`,
        timeoutMs: 5000,
      });
    }
    const line = gw.logLines().find((l) => String(l.reason).startsWith('the client certificate is a CA certificate'));
    // A client's fault, as the other refusals: not an error.
    expect(line).toMatchObject({ msg: 'client certificate refused', code: 'unauthorized' });
    expect(line!.level).toBe('info');
  });

  it("a certificate whose SANs are bound to two principals is 401 (the reason logged); beside an unbound SAN, a bound one is its principal's", async () => {
    await createServiceAccount(db.pool, { name: 'mtls-second', grants: { [REPO]: 'read' } });
    const bind = await runCli(['principals', 'bind-cert', 'mtls-second', 'spiffe://example.org/second'], {
      ARKVORY_DATABASE_URL: db.url,
    });
    expect(bind.code, bind.stderr).toBe(0);
    const issue = (name: string, sans: string[]) =>
      issueCertificate(ca, dir, name, { sans, usage: 'client', keyType: 'ec' });
    const both = await issue('client-both', [SAN, 'URI:spiffe://example.org/second']);
    const withUnbound = await issue('client-with-unbound', ['DNS:unbound.example.org', SAN]);
    const ambiguous = agentFor(both);
    const refused = await httpsRequest(`${gw.https}${mtlsTarget}/content`, { ca: ca.certPem, agent: ambiguous });
    ambiguous.destroy();
    expect(refused.status).toBe(401);
    const reason = `the certificate's names ${SAN}, URI:spiffe://example.org/second are bound to different principals`;
    await waitUntil(() => gw.logs().includes(reason), { what: 'the log to give the reason', timeoutMs: 5000 });
    const one = agentFor(withUnbound);
    const ok = await httpsRequest(`${gw.https}${mtlsTarget}/content`, { ca: ca.certPem, agent: one });
    one.destroy();
    expect(ok.status).toBe(200);
    expect(sha256(ok.body)).toBe(sha256(payload));
  });

  it('unbinding refuses the next request on an open keep-alive connection within 2 s', async () => {
    const agent = agentFor(bound);
    const first = await httpsRequest(`${gw.https}${mtlsTarget}`, { ca: ca.certPem, agent, method: 'HEAD' });
    expect(first.status).toBe(200);
    const unbind = await runCli(['principals', 'unbind-cert', 'mtls-ci', SAN], { ARKVORY_DATABASE_URL: db.url });
    expect(unbind.code, unbind.stderr).toBe(0);
    const unboundAt = performance.now();
    let last = first;
    while (last.status === 200 && performance.now() - unboundAt < 5000) {
      await sleep(50);
      last = await httpsRequest(`${gw.https}${mtlsTarget}`, { ca: ca.certPem, agent, method: 'HEAD' });
      expect(last.localPort).toBe(first.localPort); // the same connection throughout
    }
    const tookMs = performance.now() - unboundAt;
    agent.destroy();
    expect(last.status).toBe(401);
    // The bound of key revocation (policy/auth/authenticator.ts), plus one polling step of this loop.
    expect(tookMs).toBeLessThan(2000 + 100);
    const rebind = await runCli(['principals', 'bind-cert', 'mtls-ci', SAN], { ARKVORY_DATABASE_URL: db.url });
    expect(rebind.code, rebind.stderr).toBe(0);
  });

  /**
   * HEAD of the artifact on `session` until it is no longer 200 (at most 5 s): its status and how long
   * after `sinceMs` that was. The session must stay the same connection throughout.
   */
  const untilRefusedOnHttp2 = async (session: http2.ClientHttp2Session, sinceMs: number) => {
    let status = 200;
    while (status === 200 && performance.now() - sinceMs < 5000) {
      await sleep(50);
      status = (await http2Request(gw.https, ca.certPem, mtlsTarget, { method: 'HEAD', session })).status;
      expect(session.closed || session.destroyed).toBe(false);
    }
    return { status, tookMs: performance.now() - sinceMs };
  };
  const http2SessionFor = (cert: IssuedCertificate) => {
    const session = http2.connect(gw.https, { ca: ca.certPem, cert: cert.certPem, key: cert.keyPem });
    session.on('error', () => {});
    return session;
  };

  it('on an open HTTP/2 connection, disabling the principal and unbinding its certificate each refuse the next request within 2 s', async () => {
    const session = http2SessionFor(bound);
    try {
      const head = () => http2Request(gw.https, ca.certPem, mtlsTarget, { method: 'HEAD', session });
      expect((await head()).status).toBe(200);
      const disable = await runCli(['principals', 'disable', 'mtls-ci'], { ARKVORY_DATABASE_URL: db.url });
      expect(disable.code, disable.stderr).toBe(0);
      const disabled = await untilRefusedOnHttp2(session, performance.now());
      expect(disabled.status).toBe(401);
      // The bound of key revocation (policy/auth/authenticator.ts), plus one polling step.
      expect(disabled.tookMs).toBeLessThan(2000 + 100);
      const enable = await runCli(['principals', 'enable', 'mtls-ci'], { ARKVORY_DATABASE_URL: db.url });
      expect(enable.code, enable.stderr).toBe(0);
      await waitUntil(async () => (await head()).status === 200, { what: 'the enabled principal', timeoutMs: 5000 });

      const unbind = await runCli(['principals', 'unbind-cert', 'mtls-ci', SAN], { ARKVORY_DATABASE_URL: db.url });
      expect(unbind.code, unbind.stderr).toBe(0);
      const unbound = await untilRefusedOnHttp2(session, performance.now());
      expect(unbound.status).toBe(401);
      expect(unbound.tookMs).toBeLessThan(2000 + 100);
    } finally {
      session.close();
      const rebind = await runCli(['principals', 'bind-cert', 'mtls-ci', SAN, '--scopes', 'read'], {
        ARKVORY_DATABASE_URL: db.url,
      });
      expect(rebind.code, rebind.stderr).toBe(0);
    }
  });

  it('a certificate that expires while its connections stay open is refused at their next request, HTTP/1.1 and HTTP/2', async () => {
    const shortSan = 'URI:spiffe://example.org/short-lived';
    // Whole seconds: a certificate's validity has no finer grain.
    const notAfterMs = Math.ceil((Date.now() + 10_000) / 1000) * 1000;
    const short = await issueClientCertificate(ca, dir, 'client-short', shortSan, { notAfter: new Date(notAfterMs) });
    expect(Date.parse(new X509Certificate(short.certPem).validTo)).toBe(notAfterMs);
    const bind = await runCli(['principals', 'bind-cert', 'mtls-ci', shortSan, '--scopes', 'read'], {
      ARKVORY_DATABASE_URL: db.url,
    });
    expect(bind.code, bind.stderr).toBe(0);
    const agent = agentFor(short);
    const session = http2SessionFor(short);
    try {
      const overHttp1 = () => httpsRequest(`${gw.https}${mtlsTarget}`, { ca: ca.certPem, agent, method: 'HEAD' });
      await waitUntil(async () => (await overHttp1()).status === 200, {
        what: 'the bound certificate',
        timeoutMs: 5000,
      });
      const first = await overHttp1();
      expect(first.status).toBe(200);
      expect((await http2Request(gw.https, ca.certPem, mtlsTarget, { method: 'HEAD', session })).status).toBe(200);
      expect(Date.now()).toBeLessThan(notAfterMs);

      // Both asked every 200 ms until refused: an idle keep-alive connection would be closed meanwhile,
      // and a new one refused at its handshake, not by the check of an open connection's certificate.
      const http2Head = () => http2Request(gw.https, ca.certPem, mtlsTarget, { method: 'HEAD', session });
      const refusedAfterMs: { http1?: number; http2?: number } = {};
      while (
        (refusedAfterMs.http1 === undefined || refusedAfterMs.http2 === undefined) &&
        Date.now() < notAfterMs + 5000
      ) {
        await sleep(200);
        const [h1, h2] = await Promise.all([overHttp1(), http2Head()]);
        expect(h1.localPort).toBe(first.localPort); // the same connections throughout
        expect(session.closed || session.destroyed).toBe(false);
        if (h1.status !== 200) {
          expect(h1.status).toBe(401);
          refusedAfterMs.http1 ??= Date.now() - notAfterMs;
        }
        if (h2.status !== 200) {
          expect(h2.status).toBe(401);
          refusedAfterMs.http2 ??= Date.now() - notAfterMs;
        }
      }
      // Served until it expired, refused within the bound of key revocation after (plus a polling
      // step). (Its log line may be over the client-fault budget the tests before spent: not asserted.)
      expect(refusedAfterMs.http1).toBeGreaterThanOrEqual(0);
      expect(refusedAfterMs.http1).toBeLessThan(2000 + 300);
      expect(refusedAfterMs.http2).toBeGreaterThanOrEqual(0);
      expect(refusedAfterMs.http2).toBeLessThan(2000 + 300);
    } finally {
      agent.destroy();
      session.close();
      const unbind = await runCli(['principals', 'unbind-cert', 'mtls-ci', shortSan], { ARKVORY_DATABASE_URL: db.url });
      expect(unbind.code, unbind.stderr).toBe(0);
    }
  });

  it('ARKVORY_TLS_CLIENT_CERT=require: a key alone is not enough; health checks still answer', async () => {
    await gw.stop(); // one writer per database
    const strict = await startTlsGateway(
      tlsEnv({ ARKVORY_TLS_CLIENT_CA_FILE: ca.certFile, ARKVORY_TLS_CLIENT_CERT: 'require' }),
    );
    const keyOnly = await httpsRequest(`${strict.https}${mtlsTarget}`, {
      ca: ca.certPem,
      method: 'HEAD',
      headers: bearer(owner.key),
    });
    expect(keyOnly.status).toBe(401);
    // The refusal's log line is written after the answer: wait for it rather than race it.
    await waitUntil(() => strict.logs().includes('no client certificate was sent'), {
      what: 'the log line of the refused key-only request',
      timeoutMs: 5000,
    });
    const agent = agentFor(unbound);
    const keyAndCert = await httpsRequest(`${strict.https}${mtlsTarget}`, {
      ca: ca.certPem,
      agent,
      method: 'HEAD',
      headers: bearer(owner.key),
    });
    expect(keyAndCert.status).toBe(200);
    expect((await httpsRequest(`${strict.https}/health/live`, { ca: ca.certPem })).status).toBe(200);
    // Public routes other than the health checks want the certificate too: /metrics, the console.
    for (const route of ['/metrics', '/console/', '/console/session']) {
      expect((await httpsRequest(`${strict.https}${route}`, { ca: ca.certPem })).status, route).toBe(401);
      expect((await httpsRequest(`${strict.https}${route}`, { ca: ca.certPem, agent })).status, route).toBe(200);
    }
    agent.destroy();
    await strict.stop();
  });
});

describe('refused client certificates under a flood', () => {
  it('100 requests without a certificate and 50 with an unverified one, each from another forwarded address: a bounded number of lines', async () => {
    const otherCa = await createCertificateAuthority(path.join(dir, 'flood-ca'), 'flood-ca');
    const unverified = await issueClientCertificate(otherCa, path.join(dir, 'flood-ca'), 'client-flood', SAN);
    // No trusted proxy: every forged X-Forwarded-For is a ban key of its own, so no ban ends the flood.
    const strict = await startTlsGateway(
      tlsEnv({
        ARKVORY_TLS_CLIENT_CA_FILE: ca.certFile,
        ARKVORY_TLS_CLIENT_CERT: 'require',
        ARKVORY_TRUSTED_PROXIES: 'none',
      }),
    );
    const linesBefore = strict.logLines().length;
    // /metrics is public: no failure count, no ban, only the certificate check.
    for (let i = 0; i < 100; i++)
      expect((await httpsRequest(`${strict.https}/metrics`, { ca: ca.certPem })).status).toBe(401);
    const agent = new https.Agent({ ca: ca.certPem, cert: unverified.certPem, key: unverified.keyPem });
    for (let i = 0; i < 50; i++) {
      const refused = await httpsRequest(`${strict.https}${mtlsTarget}`, {
        ca: ca.certPem,
        agent,
        method: 'HEAD',
        headers: { 'x-forwarded-for': `198.51.100.${i + 1}` },
      });
      expect(refused.status).toBe(401);
    }
    agent.destroy();
    // Once the line of a request sent after the flood is in, every line the flood caused is too.
    expect(
      (
        await httpsRequest(`${strict.https}/health/live`, {
          ca: ca.certPem,
          headers: { 'x-request-id': 'after-flood' },
        })
      ).status,
    ).toBe(200);
    await waitUntil(() => strict.logLines().some((l) => l.clientReqId === 'after-flood'), {
      what: 'the line of the request after the flood',
      timeoutMs: 5000,
    });
    const lines = strict.logLines().slice(linesBefore);
    const refusals = lines.filter((l) => l.msg === 'client certificate refused');
    // The reason is still there for the first few; the rest are only counted.
    expect(refusals.length).toBeGreaterThan(0);
    expect(refusals.length).toBeLessThanOrEqual(CLIENT_FAULT_LOG.linesPerInterval);
    expect(refusals[0]).toMatchObject({
      level: 'info',
      code: 'unauthorized',
      reason: 'no client certificate was sent',
    });
    expect(lines.length).toBeLessThan(30);
    await strict.stop();
  });
});

describe('credentials over plain HTTP', () => {
  it('ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS: 403 tls_required when a trusted proxy says the client used http; loopback and https pass', async () => {
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS: '1',
        ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
      },
    });
    const list = (headers: Record<string, string>) => fetch(`${gw.url}/api/v1/repositories`, { headers });
    const viaPlainProxy = await fetch(`${gw.url}/api/v1/repositories`, {
      headers: { ...bearer(owner.key), 'x-forwarded-proto': 'http', 'x-forwarded-for': '192.0.2.7' },
    });
    expect(viaPlainProxy.status).toBe(403);
    expect(((await viaPlainProxy.json()) as { code: string }).code).toBe('tls_required');
    expect(
      (await list({ ...bearer(owner.key), 'x-forwarded-proto': 'https', 'x-forwarded-for': '192.0.2.7' })).status,
    ).toBe(200);
    expect((await list(bearer(owner.key))).status).toBe(200); // loopback client, no proxy
    // Credentials public routes read are refused in clear too: the /metrics token; and a console
    // session (opened here by a loopback client behind the https proxy, so its cookie is the
    // __Host- one, then sent by one behind the plain-HTTP proxy).
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const inClear = { 'x-forwarded-proto': 'http', 'x-forwarded-for': '192.0.2.7' };
    const overTls = { 'x-forwarded-proto': 'https', 'x-forwarded-for': '192.0.2.7' };
    const signIn = await fetch(`${gw.url}/console/session`, {
      method: 'POST',
      headers: { ...bearer(admin.key), 'x-forwarded-proto': 'https' },
    });
    expect(signIn.status).toBe(201);
    const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!;
    expect(cookie).toMatch(/^__Host-arkvory_console=/);
    for (const [route, credential] of [
      ['/metrics', { authorization: 'Bearer a-metrics-token' }],
      ['/console/session', { cookie }],
      ['/console/api/status', { cookie }],
    ] as const) {
      const refused = await fetch(`${gw.url}${route}`, { headers: { ...credential, ...inClear } });
      expect(refused.status, route).toBe(403);
      expect(((await refused.json()) as { code: string }).code, route).toBe('tls_required');
      expect((await fetch(`${gw.url}${route}`, { headers: { ...credential, ...overTls } })).status, route).toBe(200);
    }
    await gw.stop();
  });
  it('behind a trusted proxy that reaches the gateway over TLS (the router to an https gateway), its X-Forwarded-Proto still decides', async () => {
    const gw = await startTlsGateway(
      tlsEnv({ ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS: '1', ARKVORY_TRUSTED_PROXIES: '127.0.0.1' }),
    );
    const router = await startGateway({
      env: {
        ARKVORY_ROLE: 'router',
        ARKVORY_ROUTER_BACKENDS: gw.https,
        ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '200',
        ARKVORY_TLS_CA_FILE: ca.certFile,
      },
    });
    // The client's key reached the router in clear: the router says so (X-Forwarded-Proto: http).
    const viaRouter = await fetch(`${router.url}/api/v1/repositories`, { headers: bearer(owner.key) });
    expect(viaRouter.status).toBe(403);
    expect(((await viaRouter.json()) as { code: string }).code).toBe('tls_required');
    // The same from any TLS-speaking proxy in front; one that says https, or none, is served.
    const overTls = (headers: Record<string, string>) =>
      httpsRequest(`${gw.https}/api/v1/repositories`, {
        ca: ca.certPem,
        headers: { ...bearer(owner.key), ...headers },
      });
    expect((await overTls({ 'x-forwarded-proto': 'http', 'x-forwarded-for': '192.0.2.7' })).status).toBe(403);
    expect((await overTls({ 'x-forwarded-proto': 'https', 'x-forwarded-for': '192.0.2.7' })).status).toBe(200);
    expect((await overTls({})).status).toBe(200);
    await router.stop();
    await gw.stop();
  });
});

/** A peer that is not 127.0.0.1 (the trusted proxy below): the same host, another loopback address. */
const UNTRUSTED_PEER = '127.0.0.2';

/**
 * One request from `localAddress`, over https when `url` says so (trusting the test CA): the status,
 * the Set-Cookie header and the body.
 */
function exchangeFrom(
  localAddress: string,
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string | Buffer } = {},
): Promise<{ status: number; setCookie: string; location: string | undefined; body: string }> {
  const { request } = url.startsWith('https:') ? https : http;
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { localAddress, method: options.method ?? 'GET', headers: options.headers, agent: false, ca: ca.certPem },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            setCookie: (res.headers['set-cookie'] ?? []).join('\n'),
            location: res.headers.location,
            body: Buffer.concat(chunks).toString(),
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** An artifact of REPO for pre-signed links, uploaded through `base`. */
async function uploadForLinks(base: string, name: string): Promise<string> {
  const target = `/api/v1/repositories/${REPO}/artifacts/${name}`;
  const body = randomContent(1000);
  const put = await exchangeFrom('127.0.0.1', `${base}${target}`, {
    method: 'PUT',
    headers: { ...bearer(owner.key), 'content-digest': contentDigest(body) },
    body,
  });
  expect(put.status).toBe(201);
  return target;
}

/** The console's session cookie and a pre-signed link's URL, each asked from `peer` with `headers`. */
async function cookieAndLink(
  peer: string,
  base: string,
  target: string,
  key: string,
  headers: Record<string, string>,
): Promise<{ cookie: string; url: string }> {
  const signIn = await exchangeFrom(peer, `${base}/console/session`, {
    method: 'POST',
    headers: { ...bearer(key), ...headers },
  });
  const link = await exchangeFrom(peer, `${base}${target}/presign`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json', ...headers },
    body: '{}',
  });
  expect([signIn.status, link.status], `${signIn.body} ${link.body}`).toEqual([201, 201]);
  return { cookie: signIn.setCookie, url: (JSON.parse(link.body) as { url: string }).url };
}

/**
 * The trusted proxy of these tests: on loopback like every test peer, so the loopback exemption
 * (plain HTTP that never left the host) lets through what it does not mark as http; what it says is
 * http is refused all the same.
 */
const TRUSTED_PROXY = '127.0.0.3';

const SECURE_COOKIE = /^__Host-arkvory_console=[^\n]*;\s*Secure/i;
const PLAIN_COOKIE = /^arkvory_console=[^\n]*$/;

describe('the scheme a request arrived with, over plain HTTP: one rule for the console cookie, pre-signed links and credentials in clear', () => {
  let gw: GatewayProcess;
  let base: string;
  let admin: { key: string };
  let target: string;
  beforeAll(async () => {
    admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'], grants: { [REPO]: 'read' } });
    gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REFUSE_PLAIN_HTTP_CREDENTIALS: '1',
        ARKVORY_TRUSTED_PROXIES: `127.0.0.1,${TRUSTED_PROXY}`,
      },
    });
    base = `http://127.0.0.1:${gw.port}`;
    target = await uploadForLinks(base, 'scheme-plain.bin');
  });
  afterAll(() => gw.stop());

  it('a peer that is no trusted proxy saying https (X-Forwarded-Proto or Forwarded) gets no Secure cookie and http links', async () => {
    const claims: Record<string, string>[] = [
      { 'x-forwarded-proto': 'https' },
      { 'x-forwarded-proto': 'http, https' },
      { forwarded: 'for=192.0.2.7;proto=https' },
    ];
    for (const claim of claims) {
      const { cookie, url } = await cookieAndLink(UNTRUSTED_PEER, base, target, admin.key, claim);
      expect(cookie, JSON.stringify(claim)).toMatch(PLAIN_COOKIE);
      expect(cookie, JSON.stringify(claim)).not.toMatch(/Secure/i);
      expect(url, JSON.stringify(claim)).toMatch(/^http:\/\//);
    }
  });

  it("a trusted proxy that sends Forwarded alone (HAProxy option forwarded): its own last element's proto= decides, for credentials in clear too", async () => {
    const list = (headers: Record<string, string>) =>
      exchangeFrom(TRUSTED_PROXY, `${base}/api/v1/repositories`, {
        headers: { ...bearer(owner.key), ...headers },
      });
    expect((await list({ forwarded: 'for=192.0.2.7;proto=https' })).status).toBe(200);
    const inClear = await list({ forwarded: 'for=192.0.2.7;proto=http' });
    expect([inClear.status, (JSON.parse(inClear.body) as { code: string }).code]).toEqual([403, 'tls_required']);
    // Only the proxy's own element counts: one further left is what its client wrote.
    expect((await list({ forwarded: 'for=192.0.2.1;proto=https, for=192.0.2.7;proto=http' })).status).toBe(403);
    expect((await list({ forwarded: 'for=192.0.2.1;proto=http, for=192.0.2.7;proto=https' })).status).toBe(200);
    // A proxy that sets Forwarded passes X-Forwarded-Proto on as its client wrote it (HAProxy does):
    // the client's `https` there does not unsay the proxy's own `http`.
    for (const xfp of ['https', 'http, https']) {
      const claimed = await list({ forwarded: 'for=192.0.2.7;proto=http', 'x-forwarded-proto': xfp });
      expect([xfp, claimed.status]).toEqual([xfp, 403]);
    }
    const { cookie, url } = await cookieAndLink('127.0.0.1', base, target, admin.key, {
      forwarded: 'for=192.0.2.7;proto=https',
    });
    expect(cookie).toMatch(SECURE_COOKIE);
    expect(url).toMatch(/^https:\/\//);
  });

  it("a trusted proxy's X-Forwarded-Proto of several entries: its own, the last, decides everywhere", async () => {
    const viaHttps = { 'x-forwarded-proto': 'http, https', 'x-forwarded-for': '192.0.2.7' };
    const viaHttp = { 'x-forwarded-proto': 'https, http', 'x-forwarded-for': '192.0.2.7' };
    const list = (headers: Record<string, string>) =>
      exchangeFrom('127.0.0.1', `${base}/api/v1/repositories`, { headers: { ...bearer(owner.key), ...headers } });
    expect((await list(viaHttps)).status).toBe(200);
    expect((await list(viaHttp)).status).toBe(403);
    const { cookie, url } = await cookieAndLink('127.0.0.1', base, target, admin.key, viaHttps);
    expect(cookie).toMatch(SECURE_COOKIE);
    expect(url).toMatch(/^https:\/\//);
  });

  it("a trusted proxy publishing the gateway under a path (a real nginx at /arkvory/ saying X-Forwarded-Prefix): its links carry the prefix and work through it; anyone else's prefix is ignored", async () => {
    const proxy = await startHeaderLoggingProxy(base, { pathPrefix: '/arkvory/', forwardedPrefix: true });
    try {
      const made = await exchangeFrom('127.0.0.1', `${proxy.url}/arkvory${target}/presign`, {
        method: 'POST',
        headers: { ...bearer(admin.key), 'content-type': 'application/json', 'x-forwarded-prefix': '/elsewhere' },
        body: '{}',
      });
      expect(made.status, made.body).toBe(201);
      const link = JSON.parse(made.body) as { url: string; path: string };
      // Signed and checked on the path the gateway sees; only the URL handed out has the prefix.
      expect(link.path).toMatch(new RegExp(`^${target}/content\\?X-Arkvory-Key=`));
      expect(link.url).toBe(`${proxy.url}/arkvory${link.path}`);
      const got = await fetch(link.url);
      expect(got.status).toBe(200);
      expect((await got.arrayBuffer()).byteLength).toBe(1000);
      expect((await proxy.requests()).filter((r) => r.request.includes('/content')).map((r) => r.status)).toEqual([
        200,
      ]);
    } finally {
      await proxy.stop();
    }
    // A peer that is no trusted proxy names no prefix, whatever it sends.
    const untrusted = await exchangeFrom(UNTRUSTED_PEER, `${base}${target}/presign`, {
      method: 'POST',
      headers: { ...bearer(admin.key), 'content-type': 'application/json', 'x-forwarded-prefix': '/arkvory' },
      body: '{}',
    });
    expect(untrusted.status).toBe(201);
    expect((JSON.parse(untrusted.body) as { url: string }).url).toMatch(new RegExp(`^${base}${target}/content\\?`));
  });

  it("a trusted proxy's X-Forwarded-Host (else its own Forwarded element's host=) names the links' host; a client's own, or one the proxy contradicts, does not", async () => {
    // A proxy that reaches the gateway by its own address (nginx's default Host is $proxy_host)
    // and names its client's host in X-Forwarded-Host.
    const linkFrom = async (peer: string, headers: Record<string, string>) =>
      (await cookieAndLink(peer, base, target, admin.key, { 'x-forwarded-proto': 'https', ...headers })).url;
    const link = new RegExp(`^https://tools\\.example\\.com:8443${target}/content\\?X-Arkvory-Key=`);
    expect(await linkFrom(TRUSTED_PROXY, { 'x-forwarded-host': 'tools.example.com:8443' })).toMatch(link);
    // Its own entry is the last one; entries further left are what its client sent.
    expect(await linkFrom(TRUSTED_PROXY, { 'x-forwarded-host': 'evil.example, tools.example.com:8443' })).toMatch(link);
    expect(
      await linkFrom(TRUSTED_PROXY, { forwarded: 'for=192.0.2.7;host="tools.example.com:8443";proto=https' }),
    ).toMatch(link);
    expect(
      await linkFrom(TRUSTED_PROXY, {
        forwarded: 'for=192.0.2.7;proto=https;host=tools.example.com:8443',
        'x-forwarded-host': 'TOOLS.example.com:8443',
      }),
    ).toMatch(/^https:\/\/TOOLS\.example\.com:8443\//);
    // The gateway's own origin stands for: a client's X-Forwarded-Host or Forwarded host=, a proxy whose
    // two headers disagree (one of them its client's, passed on), and a value that is no host.
    const own = new RegExp(`^https://127\\.0\\.0\\.1:${gw.port}${target}/content\\?`);
    for (const headers of [
      { 'x-forwarded-host': 'evil.example' } as Record<string, string>,
      { forwarded: 'for=192.0.2.7;host=evil.example;proto=https' },
    ])
      expect(await linkFrom(UNTRUSTED_PEER, headers), JSON.stringify(headers)).toMatch(
        new RegExp(`^http://127\\.0\\.0\\.1:${gw.port}${target}/content\\?`),
      );
    for (const headers of [
      { forwarded: 'for=192.0.2.7;host=tools.example.com;proto=https', 'x-forwarded-host': 'evil.example' } as Record<
        string,
        string
      >,
      { 'x-forwarded-host': 'evil.example/phish?' },
      { 'x-forwarded-host': 'user@evil.example' },
      { 'x-forwarded-host': 'evil.example:99999999' },
    ])
      expect(await linkFrom(TRUSTED_PROXY, headers), JSON.stringify(headers)).toMatch(own);
  });

  it("multipart session URLs (url, Location) honour a trusted proxy's prefix (a real nginx at /arkvory/), and the session is reached through it; anyone else's is ignored", async () => {
    const proxy = await startHeaderLoggingProxy(base, { pathPrefix: '/arkvory/', forwardedPrefix: true });
    const multipartTarget = `/api/v1/repositories/${REPO}/artifacts/prefixed-multipart.bin`;
    try {
      // The owner writes: a session opened through the proxy is named, and reached, under its prefix.
      const opened = await exchangeFrom('127.0.0.1', `${proxy.url}/arkvory${multipartTarget}/uploads`, {
        method: 'POST',
        headers: { ...bearer(owner.key), 'content-type': 'application/json' },
        body: '{}',
      });
      expect(opened.status, opened.body).toBe(201);
      const session = JSON.parse(opened.body) as { url: string; upload: string };
      expect(session.url).toBe(`/arkvory/api/v1/repositories/${REPO}/uploads/${session.upload}`);
      expect(opened.location).toBe(session.url);
      const polled = await exchangeFrom('127.0.0.1', `${proxy.url}${session.url}`, { headers: bearer(owner.key) });
      expect(polled.status, polled.body).toBe(200);
      expect((JSON.parse(polled.body) as { url: string }).url).toBe(session.url);
      const aborted = await exchangeFrom('127.0.0.1', `${proxy.url}${session.url}`, {
        method: 'DELETE',
        headers: bearer(owner.key),
      });
      expect(aborted.status, aborted.body).toBeLessThan(300);
    } finally {
      await proxy.stop();
    }
    // A peer that is no trusted proxy names no prefix, whatever it sends.
    const untrusted = await exchangeFrom(UNTRUSTED_PEER, `${base}${multipartTarget}/uploads`, {
      method: 'POST',
      headers: { ...bearer(owner.key), 'content-type': 'application/json', 'x-forwarded-prefix': '/arkvory' },
      body: '{}',
    });
    expect(untrusted.status, untrusted.body).toBe(201);
    const own = JSON.parse(untrusted.body) as { url: string };
    expect(own.url).toMatch(/^\/api\/v1\/repositories\//);
    expect(untrusted.location).toBe(own.url);
    await exchangeFrom(UNTRUSTED_PEER, `${base}${own.url}`, { method: 'DELETE', headers: bearer(owner.key) });
  });

  it("a whole upload's Location and contentUrl, and an artifact's metadata, carry a trusted proxy's prefix (a real nginx at /arkvory/); anyone else's is ignored", async () => {
    const proxy = await startHeaderLoggingProxy(base, { pathPrefix: '/arkvory/', forwardedPrefix: true });
    const uploaded = `/api/v1/repositories/${REPO}/artifacts/prefixed-whole.bin`;
    const body = Buffer.from('a'.repeat(100));
    try {
      const put = await exchangeFrom('127.0.0.1', `${proxy.url}/arkvory${uploaded}`, {
        method: 'PUT',
        headers: { ...bearer(owner.key), 'content-digest': contentDigest(body) },
        body,
      });
      expect(put.status, put.body).toBe(201);
      expect(put.location).toBe(`/arkvory${uploaded}`);
      const contentUrl = (JSON.parse(put.body) as { contentUrl: string }).contentUrl;
      expect(contentUrl).toBe(`/arkvory${uploaded}/content`);
      const metadata = await exchangeFrom('127.0.0.1', `${proxy.url}${put.location}`, { headers: bearer(owner.key) });
      expect((JSON.parse(metadata.body) as { contentUrl: string }).contentUrl).toBe(contentUrl);
      const got = await exchangeFrom('127.0.0.1', `${proxy.url}${contentUrl}`, { headers: bearer(owner.key) });
      expect([got.status, got.body.length]).toEqual([200, 100]);
    } finally {
      await proxy.stop();
    }
    const direct = await exchangeFrom(UNTRUSTED_PEER, `${base}${uploaded}`, {
      headers: { ...bearer(owner.key), 'x-forwarded-prefix': '/arkvory' },
    });
    expect((JSON.parse(direct.body) as { contentUrl: string }).contentUrl).toBe(`${uploaded}/content`);
  });

  it("the console behind a trusted proxy's prefix (a real nginx at /arkvory/): its redirect, its assets and its plain-HTTP cookie's path are under the prefix; anyone else's is ignored", async () => {
    const proxy = await startHeaderLoggingProxy(base, { pathPrefix: '/arkvory/', forwardedPrefix: true });
    try {
      const redirect = await exchangeFrom('127.0.0.1', `${proxy.url}/arkvory/console`);
      expect([redirect.status, redirect.location]).toEqual([308, '/arkvory/console/']);
      const page = await exchangeFrom('127.0.0.1', `${proxy.url}/arkvory/console/`);
      const assets = [...page.body.matchAll(/(?:href|src)="([^"]+)"/g)].map((m) => m[1]!);
      expect(assets).toHaveLength(2);
      for (const asset of assets) {
        const got = await exchangeFrom('127.0.0.1', new URL(asset, `${proxy.url}/arkvory/console/`).toString());
        expect([asset, got.status]).toEqual([asset, 200]);
      }
      const signIn = await exchangeFrom('127.0.0.1', `${proxy.url}/arkvory/console/session`, {
        method: 'POST',
        headers: bearer(admin.key),
      });
      expect(signIn.status, signIn.body).toBe(201);
      expect(signIn.setCookie).toMatch(/^arkvory_console=[^;]+; Path=\/arkvory\/console; HttpOnly/);
    } finally {
      await proxy.stop();
    }
    const redirect = await exchangeFrom(UNTRUSTED_PEER, `${base}/console`, {
      headers: { 'x-forwarded-prefix': '/arkvory' },
    });
    expect(redirect.location).toBe('/console/');
    const signIn = await exchangeFrom(UNTRUSTED_PEER, `${base}/console/session`, {
      method: 'POST',
      headers: { ...bearer(admin.key), 'x-forwarded-prefix': '/arkvory' },
    });
    expect(signIn.setCookie).toMatch(/^arkvory_console=[^;]+; Path=\/console; HttpOnly/);
  });
});

describe('ARKVORY_PUBLIC_URL: where clients reach the gateways, whatever a request says', () => {
  it("names the origin and prefix of pre-signed links, multipart session URLs and the console redirect; a hostile Host, a proxy's X-Forwarded-Host or -Prefix change nothing", async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'], grants: { [REPO]: 'read' } });
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
        ARKVORY_PUBLIC_URL: 'https://tools.example.com/arkvory/',
      },
    });
    try {
      const base = `http://127.0.0.1:${gw.port}`;
      const target = await uploadForLinks(base, 'public-url.bin');
      const presign = (peer: string, headers: Record<string, string>) =>
        exchangeFrom(peer, `${base}${target}/presign`, {
          method: 'POST',
          headers: { ...bearer(admin.key), 'content-type': 'application/json', ...headers },
          body: '{}',
        });
      for (const [peer, headers] of [
        [UNTRUSTED_PEER, { host: 'evil.example' }],
        [UNTRUSTED_PEER, { host: 'evil.example', 'x-forwarded-host': 'evil.example', 'x-forwarded-prefix': '/x' }],
        [
          '127.0.0.1',
          { 'x-forwarded-host': 'other.example', 'x-forwarded-proto': 'http', 'x-forwarded-prefix': '/other' },
        ],
      ] as const) {
        const made = await presign(peer, headers);
        expect(made.status, made.body).toBe(201);
        const link = JSON.parse(made.body) as { url: string; path: string };
        expect(link.url, JSON.stringify(headers)).toBe(`https://tools.example.com/arkvory${link.path}`);
      }
      const opened = await exchangeFrom(
        UNTRUSTED_PEER,
        `${base}/api/v1/repositories/${REPO}/artifacts/pu.bin/uploads`,
        {
          method: 'POST',
          headers: { ...bearer(owner.key), host: 'evil.example', 'content-type': 'application/json' },
          body: '{}',
        },
      );
      expect(opened.status, opened.body).toBe(201);
      const session = JSON.parse(opened.body) as { url: string; upload: string };
      expect([session.url, opened.location]).toEqual([
        `/arkvory/api/v1/repositories/${REPO}/uploads/${session.upload}`,
        session.url,
      ]);
      await exchangeFrom(UNTRUSTED_PEER, `${base}${session.url.slice('/arkvory'.length)}`, {
        method: 'DELETE',
        headers: bearer(owner.key),
      });
      expect((await exchangeFrom(UNTRUSTED_PEER, `${base}/console`)).location).toBe('/arkvory/console/');
    } finally {
      await gw.stop();
    }
  });
});

describe('the scheme a request arrived with, over TLS', () => {
  it('a peer that is no trusted proxy saying http (X-Forwarded-Proto or Forwarded) still gets a Secure cookie and https links; a trusted one is believed', async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'], grants: { [REPO]: 'read' } });
    const gw = await startTlsGateway(tlsEnv({ ARKVORY_TRUSTED_PROXIES: '127.0.0.1' }));
    try {
      const target = await uploadForLinks(gw.https, 'scheme-tls.bin');
      const claims: Record<string, string>[] = [
        { 'x-forwarded-proto': 'http' },
        { 'x-forwarded-proto': 'https, http' },
        { forwarded: 'for=192.0.2.7;proto=http' },
      ];
      for (const claim of claims) {
        const { cookie, url } = await cookieAndLink(UNTRUSTED_PEER, gw.https, target, admin.key, claim);
        expect(cookie, JSON.stringify(claim)).toMatch(SECURE_COOKIE);
        expect(url, JSON.stringify(claim)).toMatch(/^https:\/\//);
      }
      // The same words from the trusted proxy (a plain-HTTP router in front of this https writer) are its client's hop.
      const { cookie, url } = await cookieAndLink('127.0.0.1', gw.https, target, admin.key, {
        'x-forwarded-proto': 'http',
      });
      expect(cookie).toMatch(PLAIN_COOKIE);
      expect(url).toMatch(/^http:\/\//);
    } finally {
      await gw.stop();
    }
  });
});

describe('TLS to other roles and to Redis (ARKVORY_TLS_CA_FILE)', () => {
  it('the router reaches an https gateway and verifies it against the CA file; without the CA the gateway is unusable', async () => {
    const gw = await startTlsGateway(tlsEnv({ ARKVORY_TLS_HSTS: 'max-age=600' }));
    const routerEnv = (extra: Record<string, string>) => ({
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: gw.https,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '200',
      ...extra,
    });
    const router = await startGateway({ env: routerEnv({ ARKVORY_TLS_CA_FILE: ca.certFile }) });
    const viaRouter = await fetch(`${router.url}/api/v1/repositories`, { headers: bearer(owner.key) });
    expect(viaRouter.status).toBe(200);
    expect(((await viaRouter.json()) as { repositories: Array<{ name: string }> }).repositories).toContainEqual(
      expect.objectContaining({ name: REPO }),
    );
    // The gateway's Strict-Transport-Security is never relayed over the router's plain HTTP (RFC 6797 §7.2).
    const direct = await curlHead(`${gw.https}/api/v1/repositories`, ca.certFile, '1.1', [
      '-H',
      `authorization: Bearer ${owner.key}`,
    ]);
    expect(direct.headers['strict-transport-security']).toBe('max-age=600');
    expect(viaRouter.headers.has('strict-transport-security')).toBe(false);
    // The rest of the gateway's head is relayed as it came (the router reaches it over HTTP/2 here).
    for (const name of ['content-type', 'content-length', 'x-content-type-options', 'cache-control'])
      expect([name, viaRouter.headers.get(name)]).toEqual([name, direct.headers[name] ?? null]);
    expect(direct.headers['content-type']).toMatch(/^application\/json/);
    // The gateway is verified as the address the router was given, whatever Host the client sent:
    // a GET naming the router's public name (which the gateway's certificate does not hold) is
    // served, and a client cannot choose the name the gateway's certificate is checked against.
    for (const host of ['arkvory.example.org', 'attacker.example', 'arkvory.example.org']) {
      const named = await new Promise<number>((resolve, reject) => {
        http
          .get(`${router.url}/api/v1/repositories`, { headers: { host, ...bearer(owner.key) } }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          })
          .on('error', reject);
      });
      expect([host, named]).toEqual([host, 200]);
    }
    await router.stop();
    // No CA: the gateway's certificate is not trusted, so the router never finds it healthy.
    const blind = await startGateway({ env: routerEnv({}), waitFor: 'listening' });
    const status = await fetch(`${blind.url}/health/status`);
    expect(status.status).toBe(503);
    await blind.stop();
    await gw.stop();
  });

  it('a gateway keeps its rate-limit counters in a Redis reached over rediss:// with the CA file', async () => {
    const redisCert = await issueServerCertificate(ca, dir, 'redis');
    const port = await freeLoopbackPort();
    const redis = spawn(
      'redis-server',
      [
        '--port',
        '0',
        '--tls-port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--tls-cert-file',
        redisCert.certFile,
        '--tls-key-file',
        redisCert.keyFile,
        '--tls-ca-cert-file',
        ca.certFile,
        '--tls-auth-clients',
        'no',
      ],
      { stdio: 'ignore' },
    );
    try {
      const url = `rediss://127.0.0.1:${port}`;
      const gw = await startTlsGateway(
        tlsEnv({ ARKVORY_REDIS_URL: url, ARKVORY_TLS_CA_FILE: ca.certFile, ARKVORY_REDIS_KEY_PREFIX: 'arkvory:tls:' }),
      );
      for (let i = 0; i < 3; i++)
        expect(
          (await httpsRequest(`${gw.https}/api/v1/repositories`, { ca: ca.certPem, headers: bearer(owner.key) }))
            .status,
        ).toBe(200);
      const keys = await run('redis-cli', [
        '--tls',
        '--cacert',
        ca.certFile,
        '-p',
        String(port),
        '--scan',
        '--pattern',
        'arkvory:tls:*',
      ]);
      expect(keys.stdout.trim().length).toBeGreaterThan(0);
      await gw.stop();
    } finally {
      redis.kill('SIGTERM');
    }
  });
});
