/**
 * TLS from a gateway to the servers it depends on, each a real server that speaks TLS only, with a
 * CA made for this run and trusted through ARKVORY_TLS_CA_FILE: nginx serving the static-HTTP store
 * over https, MinIO serving S3 over https (`--certs-dir`), and a PostgreSQL with `ssl=on` and a
 * `hostssl`-only hba reached with `sslmode=verify-full` by the gateway and by the CLI. Uploads and
 * downloads go through a real gateway process and are compared byte for byte; a CA that did not
 * sign the peer's certificate refuses the start with a message naming the variable to fix.
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import tls from 'node:tls';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  openPool,
  startTlsPostgres,
  type TlsPostgres,
} from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { startS3Server } from '../../test/support/s3-server.ts';
import { startStaticStore } from '../../test/support/static-store.ts';

const MiB = 1024 * 1024;
const REPO = 'tlspeers';

let dir: string;
let ca: CertificateAuthority;
/** A CA that signed nothing here: trusting it alone must not make any peer trusted. */
let otherCa: CertificateAuthority;

beforeAll(async () => {
  dir = await makeTempDir('arkvory-tls-peers-');
  ca = await createCertificateAuthority(dir);
  otherCa = await createCertificateAuthority(dir, 'other-ca');
  // MinIO's readiness probe in this process connects as the gateway does: with the CA trusted.
  tls.setDefaultCACertificates([...tls.getCACertificates('default'), ca.certPem]);
});

/** A database of its own (a database is bound to one storage root) with the repository and its owner. */
async function seededDatabase(): Promise<{ url: string; key: string; drop(): Promise<void> }> {
  const db = await createTestDatabase();
  await createRepository(db.pool, REPO);
  const owner = await createServiceAccount(db.pool, { name: 'tls-peers-owner', grants: { [REPO]: 'write' } });
  return { url: db.url, key: owner.key, drop: () => db.drop() };
}

/** `body` in 1 MiB chunks: sent without Content-Length (chunked), so the store cannot PUT it in one piece. */
async function* chunksOf(body: Buffer): AsyncIterable<Buffer> {
  for (let at = 0; at < body.length; at += MiB) yield body.subarray(at, at + MiB);
}

/**
 * PUT `body` as `id` through the gateway (`chunked`: without Content-Length), then a full GET and a
 * Range GET, each byte-exact.
 */
async function roundTrip(gw: GatewayProcess, key: string, id: string, body: Buffer, chunked = false): Promise<void> {
  const url = `${gw.url}/api/v1/repositories/${REPO}/artifacts/${id}`;
  const put = await request(url, {
    method: 'PUT',
    headers: { ...bearer(key), 'content-digest': contentDigest(body) },
    body: chunked ? chunksOf(body) : body,
  });
  expect(put.status, put.body.toString()).toBe(201);
  const full = await request(`${url}/content`, { headers: bearer(key) });
  expect(full.status).toBe(200);
  expect(full.body.length).toBe(body.length);
  expect(sha256(full.body)).toBe(sha256(body));
  const from = 1 * MiB + 7;
  const to = body.length - 11;
  const range = await request(`${url}/content`, { headers: { ...bearer(key), range: `bytes=${from}-${to}` } });
  expect(range.status).toBe(206);
  expect(range.headers['content-range']).toBe(`bytes ${from}-${to}/${body.length}`);
  expect(range.body.equals(body.subarray(from, to + 1))).toBe(true);
}

/** Starts a gateway expected to refuse its start; resolves with its stderr. */
async function refusedStart(env: Record<string, string>): Promise<string> {
  const gw = await startGateway({ env, waitFor: 'none' });
  const code = await gw.exited;
  expect(code, gw.logs()).toBe(1);
  return gw.stderr();
}

describe('the static-HTTP store over https (nginx with TLS, WebDAV writes)', () => {
  it('uploads and downloads byte-exact with ARKVORY_TLS_CA_FILE; without it the writer refuses to start, saying why', async () => {
    const certificate = await issueServerCertificate(ca, dir, 'nginx');
    const nginx = await startStaticStore({
      tls: { certFile: certificate.certFile, keyFile: certificate.keyFile, caPem: ca.certPem },
    });
    expect(nginx.url.startsWith('https://')).toBe(true);
    const db = await seededDatabase();
    onTestFinished(() => db.drop());
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_STORAGE_URL: nginx.url };

    const dataDir = await makeTempDir();
    const stderr = await refusedStart({ ...env, ARKVORY_TLS_CA_FILE: otherCa.certFile, ARKVORY_DATA_DIR: dataDir });
    expect(stderr).toMatch(/SELF_SIGNED_CERT_IN_CHAIN|self-signed certificate in certificate chain/);

    const gw = await startGateway({ env: { ...env, ARKVORY_TLS_CA_FILE: ca.certFile }, timeoutMs: 60_000 });
    await roundTrip(gw, db.key, 'static.bin', randomContent(5 * MiB + 321));
    // The blob went through nginx's TLS port (it has no other): WebDAV PUT and the reads are logged.
    const log = await nginx.accessLog();
    expect(log).toMatch(/^20[14] \d+ "PUT \/arkvory\/tmp\//m);
    expect(log).toMatch(/^20[06] \d+ "GET \/arkvory\/blobs\/sha256\//m);
    await gw.stop();
    await nginx.stop();
  });
});

describe('the S3 store over https (MinIO with --certs-dir)', () => {
  it('uploads (single and multipart) and downloads byte-exact with ARKVORY_TLS_CA_FILE; a foreign CA refuses the start', async () => {
    const certificate = await issueServerCertificate(ca, dir, 'minio');
    const minio = await startS3Server('minio', {
      tls: { certFile: certificate.certFile, keyFile: certificate.keyFile },
    });
    try {
      expect(minio.endpoint.startsWith('https://')).toBe(true);
      const db = await seededDatabase();
      onTestFinished(() => db.drop());
      const env = { ARKVORY_DATABASE_URL: db.url, ...minio.env('arkvory/') };

      const stderr = await refusedStart({
        ...env,
        ARKVORY_TLS_CA_FILE: otherCa.certFile,
        ARKVORY_DATA_DIR: await makeTempDir(),
      });
      expect(stderr).toMatch(/SELF_SIGNED_CERT_IN_CHAIN|self-signed certificate in certificate chain/);

      const gw = await startGateway({ env: { ...env, ARKVORY_TLS_CA_FILE: ca.certFile }, timeoutMs: 60_000 });
      await roundTrip(gw, db.key, 's3.bin', randomContent(6 * MiB + 99));
      // No Content-Length: the store sends it as an S3 multipart upload, part by part over TLS.
      const parted = randomContent(20 * MiB + 5);
      await roundTrip(gw, db.key, 's3-parts.bin', parted, true);
      const keys: string[] = [];
      for await (const entry of minio.client().list('arkvory/')) if (entry.object) keys.push(entry.object.key);
      const blob = keys.find((k) => k.includes('blobs/sha256/') && k.endsWith(sha256(parted)));
      expect(blob, keys.join('\n')).toBeDefined();
      // A multipart upload's ETag ends in -<parts>.
      const head = await minio.client().request({ method: 'HEAD', key: blob! });
      await head.body.dump();
      expect(String(head.headers.etag)).toMatch(/-[2-9]\d*"?$/);
      await gw.stop();
    } finally {
      await minio.destroy();
    }
  });
});

describe('PostgreSQL with ssl=on and sslmode=verify-full', () => {
  let postgres: TlsPostgres;
  let pgDir: string;
  const verifyFull = () => `${postgres.url}&sslmode=verify-full`;

  beforeAll(async () => {
    pgDir = await makeTempDir('arkvory-tls-pg-');
    const certificate = await issueServerCertificate(ca, pgDir, 'postgres');
    postgres = await startTlsPostgres(pgDir, certificate);
  });
  afterAll(async () => {
    await postgres?.stop();
    await rm(pgDir, { recursive: true, force: true });
  });

  it('the server takes TLS connections only: a plain one is refused by its hba', async () => {
    const plain = new pg.Client({ connectionString: `${postgres.url}&sslmode=disable` });
    await expect(plain.connect()).rejects.toThrow(/no pg_hba.conf entry .* no encryption/);
    await plain.end().catch(() => {});
  });

  it('the CLI (migrate, principals) applies ARKVORY_TLS_CA_FILE; without it, or with a foreign CA, it says what to fix', async () => {
    const env = { ARKVORY_DATABASE_URL: verifyFull(), ARKVORY_DATA_DIR: await makeTempDir() };
    for (const caFile of [undefined, otherCa.certFile]) {
      const refused = await runCli(['migrate'], { ...env, ARKVORY_TLS_CA_FILE: caFile });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(
        /PostgreSQL at 127\.0\.0\.1:\d+ refused: its TLS certificate is not signed by a CA this process trusts \(SELF_SIGNED_CERT_IN_CHAIN.*put the CA that signed it in ARKVORY_TLS_CA_FILE/,
      );
      const principals = await runCli(['principals', 'list'], { ...env, ARKVORY_TLS_CA_FILE: caFile });
      expect(principals.code).not.toBe(0);
      expect(principals.stderr).toMatch(/not signed by a CA this process trusts/);
    }
    const migrated = await runCli(['migrate'], { ...env, ARKVORY_TLS_CA_FILE: ca.certFile });
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(migrated.stdout).toMatch(/applied \d+ migration\(s\)|schema is up to date/);
    const created = await runCli(['principals', 'create', 'tls-cli'], { ...env, ARKVORY_TLS_CA_FILE: ca.certFile });
    expect(created.code, created.stderr).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({ name: 'tls-cli', disabled: false });
    // An unusable CA file stops a command before it connects, with one line.
    const broken = await runCli(['principals', 'list'], { ...env, ARKVORY_TLS_CA_FILE: path.join(pgDir, 'none.crt') });
    expect(broken.code).toBe(1);
    expect(broken.stderr).toMatch(/^arkvory: cannot read ARKVORY_TLS_CA_FILE .*none\.crt \(ENOENT\)\n$/);
  });

  it('a gateway on sslmode=verify-full with the CA serves over TLS connections only; a foreign CA refuses the start, saying why', async () => {
    const env = { ARKVORY_DATABASE_URL: verifyFull(), ARKVORY_DATA_DIR: await makeTempDir() };
    // The schema first (the CLI test may run alone).
    expect((await runCli(['migrate'], { ...env, ARKVORY_TLS_CA_FILE: ca.certFile })).code).toBe(0);

    const stderr = await refusedStart({ ...env, ARKVORY_TLS_CA_FILE: otherCa.certFile });
    expect(stderr).toMatch(
      /^arkvory: cannot start: PostgreSQL at 127\.0\.0\.1:\d+ refused: its TLS certificate is not signed by a CA this process trusts \(SELF_SIGNED_CERT_IN_CHAIN: .*\); put the CA that signed it in ARKVORY_TLS_CA_FILE/m,
    );

    const gw = await startGateway({ env: { ...env, ARKVORY_TLS_CA_FILE: ca.certFile } });
    // A principal and a grant made through the TLS connection of the CLI, used by the gateway.
    const admin = openPool(`${postgres.url}&sslmode=verify-full&sslrootcert=${ca.certFile}`, 1);
    try {
      await createRepository(admin, REPO);
      const tlsOwner = await createServiceAccount(admin, { name: 'tls-pg-owner', grants: { [REPO]: 'write' } });
      const body = randomContent(2 * MiB + 17);
      const url = `${gw.url}/api/v1/repositories/${REPO}/artifacts/pg.bin`;
      const put = await request(url, {
        method: 'PUT',
        headers: { ...bearer(tlsOwner.key), 'content-digest': contentDigest(body) },
        body,
      });
      expect(put.status, put.body.toString()).toBe(201);
      const got = await request(`${url}/content`, { headers: bearer(tlsOwner.key) });
      expect(sha256(got.body)).toBe(sha256(body));
      // Every connection the gateway holds is encrypted (the hba allows no other, and the server says so).
      const { rows } = await admin.query<{ ssl: boolean; version: string }>(
        `SELECT s.ssl, s.version FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
          WHERE a.application_name LIKE 'arkvory-%'`,
      );
      expect(rows.length).toBeGreaterThan(0);
      for (const row of rows) expect(row).toMatchObject({ ssl: true, version: expect.stringMatching(/^TLSv1\.[23]$/) });
    } finally {
      await admin.end();
    }
    await gw.stop();
  });
});
