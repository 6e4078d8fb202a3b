/**
 * Multipart uploads, pre-signed links and the console over HTTP/2: a real gateway serving TLS,
 * driven by curl --http2 (every answer is checked to have come over HTTP/2), byte-exact.
 */
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../test/harness/index.ts';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const REPO = 'h2routes';

const db = useTestDatabase();
let dir: string;
let ca: CertificateAuthority;
let gw: GatewayProcess;
let origin: string;
let writerKey: string;
let adminKey: string;

interface CurlAnswer {
  status: number;
  /** The HTTP version curl spoke: "2" for HTTP/2. */
  version: string;
  headers: Record<string, string[]>;
  body: Buffer;
}

let calls = 0;

/** One request with `curl --http2` (after ALPN), headers and body kept apart. */
async function curl(
  target: string,
  options: { method?: string; headers?: Record<string, string>; body?: Buffer } = {},
): Promise<CurlAnswer> {
  const n = ++calls;
  const headerFile = path.join(dir, `h${n}`);
  const bodyFile = path.join(dir, `b${n}`);
  const args = ['-sS', '--http2', '--cacert', ca.certFile, '-D', headerFile, '-o', bodyFile];
  args.push('-w', '%{http_code} %{http_version}');
  // HEAD with -I: with -X HEAD curl would wait for the body the Content-Length announces.
  if (options.method === 'HEAD') args.push('-I');
  else if (options.method) args.push('-X', options.method);
  for (const [name, value] of Object.entries(options.headers ?? {})) args.push('-H', `${name}: ${value}`);
  if (options.body) {
    const upload = path.join(dir, `u${n}`);
    await writeFile(upload, options.body);
    args.push('--data-binary', `@${upload}`);
  }
  const { stdout } = await run('curl', [...args, `${origin}${target}`], { maxBuffer: 16 * MiB });
  const [status, version] = stdout.split(' ');
  const headers: Record<string, string[]> = {};
  for (const line of (await readFile(headerFile, 'utf8')).split('\r\n').slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).toLowerCase();
    (headers[name] ??= []).push(line.slice(colon + 1).trim());
  }
  return {
    status: Number(status),
    version: version!,
    headers,
    body: await readFile(bodyFile).catch(() => Buffer.alloc(0)),
  };
}

const json = (r: CurlAnswer) => JSON.parse(r.body.toString()) as Record<string, unknown>;
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

beforeAll(async () => {
  dir = await makeTempDir('arkvory-h2-routes-');
  ca = await createCertificateAuthority(dir);
  const cert = await issueServerCertificate(ca, dir);
  await createRepository(db.pool, REPO);
  ({ key: writerKey } = await createServiceAccount(db.pool, { name: 'h2-writer', grants: { [REPO]: 'write' } }));
  ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'h2-admin', scopes: ['admin'] }));
  gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TLS_CERT_FILE: cert.certFile, ARKVORY_TLS_KEY_FILE: cert.keyFile },
    waitFor: 'none',
  });
  origin = `https://127.0.0.1:${gw.port}`;
  await waitUntil(async () => (await curl('/health/status')).status === 200, {
    what: 'the gateway to serve HTTPS',
    timeoutMs: 60_000,
    retryOnError: true,
    process: gw,
  });
});

afterAll(() => gw?.stop());

describe('over HTTP/2 (curl --http2)', () => {
  it('a multipart upload: open, parts, complete, then the published file byte-exact', async () => {
    const parts = [randomContent(2 * MiB + 17), randomContent(MiB + 5)];
    const whole = Buffer.concat(parts);
    const opened = await curl(`/api/v1/repositories/${REPO}/artifacts/multi.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(writerKey), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ size: whole.length })),
    });
    expect(opened.version).toBe('2');
    expect(opened.status, opened.body.toString()).toBe(201);
    const upload = json(opened).upload as string;
    const base = `/api/v1/repositories/${REPO}/uploads/${upload}`;
    for (const [i, part] of parts.entries()) {
      const put = await curl(`${base}/parts/${i + 1}`, { method: 'PUT', headers: bearer(writerKey), body: part });
      expect(put.status, put.body.toString()).toBe(200);
      expect(json(put)).toMatchObject({ partNumber: i + 1, sizeBytes: part.length });
    }
    const done = await curl(`${base}/complete`, {
      method: 'POST',
      headers: { ...bearer(writerKey), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) })) })),
    });
    expect(done.status, done.body.toString()).toBe(202);
    let state = '';
    for (let i = 0; i < 300 && state !== 'done' && state !== 'failed'; i++) {
      state = json(await curl(base, { headers: bearer(writerKey) })).state as string;
      if (state !== 'done') await sleep(100);
    }
    expect(state).toBe('done');
    const got = await curl(`/api/v1/repositories/${REPO}/artifacts/multi.bin/content`, { headers: bearer(writerKey) });
    expect(got.version).toBe('2');
    expect(got.status).toBe(200);
    expect(sha256(got.body)).toBe(sha256(whole));
  });

  it('a pre-signed link: GET, Range and HEAD without a header; another method or a tampered link is 401', async () => {
    const data = randomContent(300_000);
    const target = `/api/v1/repositories/${REPO}/artifacts/linked.bin`;
    expect((await curl(target, { method: 'PUT', headers: bearer(writerKey), body: data })).status).toBe(201);
    const made = await curl(`${target}/presign`, {
      method: 'POST',
      headers: { ...bearer(writerKey), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ expiresInSeconds: 600 })),
    });
    expect(made.status, made.body.toString()).toBe(201);
    const link = json(made).path as string;
    const got = await curl(link);
    expect(got.version).toBe('2');
    expect(got.status).toBe(200);
    expect(sha256(got.body)).toBe(sha256(data));
    const ranged = await curl(link, { headers: { range: 'bytes=1000-1999' } });
    expect(ranged.status).toBe(206);
    expect(ranged.body.equals(data.subarray(1000, 2000))).toBe(true);
    const head = await curl(link, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toEqual([String(data.length)]);
    // Range is defined for GET only (RFC 9110 §14.2): a HEAD with one gets the whole head.
    const rangedHead = await curl(link, { method: 'HEAD', headers: { range: 'bytes=1000-1999' } });
    expect(rangedHead.version).toBe('2');
    expect(rangedHead.status).toBe(200);
    expect(rangedHead.headers['content-length']).toEqual([String(data.length)]);
    expect(rangedHead.headers['content-range']).toBeUndefined();
    expect((await curl(link, { method: 'PUT', body: Buffer.from('x') })).status).toBe(401);
    const tampered = link.replace(/X-Arkvory-Expires=(\d+)/, (_, n: string) => `X-Arkvory-Expires=${Number(n) + 1}`);
    expect((await curl(tampered)).status).toBe(401);
  });

  it('the console: the page with its CSP, sign-in with the cookie, the status API, sign-out with the CSRF token', async () => {
    const page = await curl('/console/');
    expect(page.version).toBe('2');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']?.[0]).toMatch(/^text\/html/);
    expect(page.headers['content-security-policy']?.[0]).toContain("default-src 'none'");
    const script = await curl('/console/static/console.js');
    expect(script.status).toBe(200);
    expect(script.headers['content-type']?.[0]).toMatch(/^text\/javascript/);
    const signIn = await curl('/console/session', { method: 'POST', headers: bearer(adminKey) });
    expect(signIn.status, signIn.body.toString()).toBe(201);
    const cookie = signIn.headers['set-cookie']![0]!.split(';')[0]!;
    expect(cookie).toMatch(/^__Host-arkvory_console=/);
    // Served over this listener's own TLS: a browser never sends the cookie over plain HTTP.
    expect(signIn.headers['set-cookie']![0]).toMatch(/; Secure(;|$)/);
    const csrf = String(json(signIn).csrfToken);
    const status = await curl('/console/api/status', { headers: { cookie } });
    expect(status.status).toBe(200);
    expect((json(status).gateway as { role: string }).role).toBe('api');
    // Without the CSRF header a state change is refused; with it, the session ends.
    expect((await curl('/console/api/session', { method: 'DELETE', headers: { cookie } })).status).toBe(403);
    const out = await curl('/console/api/session', { method: 'DELETE', headers: { cookie, 'x-csrf-token': csrf } });
    expect(out.status).toBe(204);
    expect((await curl('/console/api/status', { headers: { cookie } })).status).toBe(401);
  });
});
