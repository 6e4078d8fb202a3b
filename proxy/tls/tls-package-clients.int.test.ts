/**
 * The package clients of docs/clients.md over HTTPS with a custom CA (docs/tls.md), on a real TLS
 * gateway: pip downloads an sdist trusting the CA through `--cert`; Maven uploads a jar (wagon's PUT)
 * and downloads it again trusting the CA through a JVM trust store, byte-exact. Without the CA
 * each refuses the gateway's certificate, so the CA is what lets them in.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent } from '../../test/support/content.ts';
import { httpsRequest } from '../../test/support/https-request.ts';
import { offlineSdist } from '../../test/support/python-sdist.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../test/harness/index.ts';

const REPO = 'tlspkgs';

/** A child's exit code and its output, stdout and stderr together; `missing` says how to get it. */
function runTool(
  command: string,
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; missing: string },
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', (err: NodeJS.ErrnoException) =>
      reject(new Error(err.code === 'ENOENT' ? `${command} is not on PATH; ${options.missing}` : err.message)),
    );
    child.on('close', (code) => resolve({ code, output }));
  });
}

const db = useTestDatabase();
let dir: string;
let ca: CertificateAuthority;
let owner: { principalId: string; key: string; keyId: string };
let gw: GatewayProcess & { https: string };

beforeAll(async () => {
  dir = await makeTempDir('arkvory-tls-clients-');
  ca = await createCertificateAuthority(dir);
  const served = await issueServerCertificate(ca, dir);
  await createRepository(db.pool, REPO);
  owner = await createServiceAccount(db.pool, { name: 'tls-packager', grants: { [REPO]: 'write' } });
  const started = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_TLS_CERT_FILE: served.certFile,
      ARKVORY_TLS_KEY_FILE: served.keyFile,
    },
    waitFor: 'none',
  });
  const origin = `https://127.0.0.1:${started.port}`;
  await waitUntil(async () => (await httpsRequest(`${origin}/health/status`, { ca: ca.certPem })).status === 200, {
    what: 'the gateway to serve over https',
    timeoutMs: 60_000,
    intervalMs: 100,
    retryOnError: true,
    process: started,
  });
  gw = Object.assign(started, { https: origin });
});

afterAll(() => gw?.stop());

describe('pip over HTTPS with a custom CA (--cert)', () => {
  it('downloads an sdist byte-exact; without the CA it refuses the certificate', async () => {
    const sdist = await offlineSdist(dir, 'pkg36');
    const asset = `/api/v1/repositories/${REPO}/packages/pkg36/1.0/assets/pkg36-1.0.tar.gz`;
    const put = await httpsRequest(`${gw.https}${asset}`, {
      ca: ca.certPem,
      method: 'PUT',
      headers: { ...bearer(owner.key), 'content-digest': contentDigest(sdist) },
      body: sdist,
    });
    expect(put.status).toBe(201);
    const url = `https://ci:${owner.key}@127.0.0.1:${new URL(gw.https).port}${asset}/content`;
    const pip = (out: string, trust: string[]) =>
      runTool(
        'python3',
        ['-m', 'pip', 'download', '--no-deps', '--no-index', '--disable-pip-version-check', ...trust, '-d', out, url],
        // No CA bundle of the environment may stand in for --cert, nor override it: requests prefers
        // REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE to pip's own setting.
        {
          env: {
            ...process.env,
            PIP_CERT: undefined,
            REQUESTS_CA_BUNDLE: undefined,
            CURL_CA_BUNDLE: undefined,
            SSL_CERT_FILE: undefined,
          },
          missing: 'python3 with pip is needed (apt-get install python3-pip)',
        },
      );
    const out = path.join(dir, 'pip-out');
    const ok = await pip(out, ['--cert', ca.certFile]);
    expect(ok.code, ok.output).toBe(0);
    expect((await readFile(path.join(out, 'content'))).equals(sdist)).toBe(true);
    const untrusted = await pip(path.join(dir, 'pip-untrusted'), []);
    expect(untrusted.code).not.toBe(0);
    expect(untrusted.output).toMatch(/CERTIFICATE_VERIFY_FAILED|certificate verify failed/);
  });
});

describe('Maven over HTTPS with a custom CA (a JVM trust store)', () => {
  // docs/clients.md's wagon commands, with the CA in a PKCS#12 trust store given to the JVM.
  it('uploads a jar and downloads it byte-exact; without the trust store it refuses the certificate', {
    timeout: 300_000,
  }, async () => {
    const trustStore = path.join(dir, 'truststore.p12');
    const keytool = await runTool(
      'keytool',
      [
        '-importcert',
        '-noprompt',
        '-alias',
        'arkvory-ca',
        '-file',
        ca.certFile,
        '-keystore',
        trustStore,
        '-storetype',
        'PKCS12',
        '-storepass',
        'trust-store',
      ],
      { missing: 'on Debian: apt-get install -y default-jdk-headless' },
    );
    expect(keytool.code, keytool.output).toBe(0);
    const settings = path.join(dir, 'settings.xml');
    await writeFile(
      settings,
      '<settings><servers><server><id>arkvory</id><username>ci</username><password>${env.ARKVORY_KEY}</password></server></servers></settings>\n',
    );
    const trusted = `-Djavax.net.ssl.trustStore=${trustStore} -Djavax.net.ssl.trustStorePassword=trust-store -Djavax.net.ssl.trustStoreType=PKCS12`;
    const mvn = (goal: string[], mavenOpts: string) =>
      runTool(
        'mvn',
        [
          '-B',
          '-s',
          settings,
          `-Dmaven.repo.local=${path.join(os.homedir(), '.m2', 'repository')}`,
          ...goal,
          '-Dwagon.serverId=arkvory',
          `-Dwagon.url=${gw.https}/api/v1/repositories/${REPO}/packages/app/1.0`,
        ],
        {
          cwd: dir,
          env: { ...process.env, ARKVORY_KEY: owner.key, MAVEN_OPTS: mavenOpts },
          missing: 'on Debian: apt-get install -y maven',
        },
      );
    const jar = randomContent(70_000);
    const local = path.join(dir, 'app-1.0.jar');
    await writeFile(local, jar);
    const upload = await mvn(
      [
        'org.codehaus.mojo:wagon-maven-plugin:2.0.2:upload-single',
        `-Dwagon.fromFile=${local}`,
        '-Dwagon.toFile=assets/app-1.0.jar',
      ],
      trusted,
    );
    expect(upload.code, upload.output.slice(-3000)).toBe(0);
    const fetched = path.join(dir, 'fetched', 'app-1.0.jar');
    const download = await mvn(
      [
        'org.codehaus.mojo:wagon-maven-plugin:2.0.2:download-single',
        '-Dwagon.fromFile=assets/app-1.0.jar/content',
        `-Dwagon.toFile=${fetched}`,
      ],
      trusted,
    );
    expect(download.code, download.output.slice(-3000)).toBe(0);
    expect((await readFile(fetched)).equals(jar)).toBe(true);

    const refused = path.join(dir, 'refused', 'app-1.0.jar');
    const untrusted = await mvn(
      [
        'org.codehaus.mojo:wagon-maven-plugin:2.0.2:download-single',
        '-Dwagon.fromFile=assets/app-1.0.jar/content',
        `-Dwagon.toFile=${refused}`,
      ],
      '',
    );
    expect(untrusted.code).not.toBe(0);
    expect(untrusted.output).toMatch(/PKIX path building failed|unable to find valid certification path/);
    expect(existsSync(refused)).toBe(false);
  });
});
