/**
 * The console's session cookie on a gateway serving TLS itself: `__Host-arkvory_console` (Secure,
 * Path=/, no Domain), so neither a sibling subdomain nor a plain-HTTP page can plant or overwrite it,
 * and the plain `arkvory_console` name is not read there (a tossed cookie must not stand in for it).
 * Checked over HTTP/1.1 with node's https client, then in Debian's chromium, which keeps a
 * `__Host-` cookie only when its attributes obey the prefix's rules.
 */
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { CHROMIUM, CHROMIUM_ARGS } from '../../test/support/chromium.ts';
import { type RawResponse, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../test/harness/index.ts';

const db = useTestDatabase();
let ca: CertificateAuthority;
let gw: GatewayProcess;
let origin: string;
let adminKey: string;

function httpsRequest(path: string, options: { method?: string; headers?: Record<string, string> } = {}) {
  return request(`${origin}${path}`, { ...options, ca: ca.certPem });
}

const json = (a: RawResponse) => JSON.parse(a.body.toString()) as Record<string, unknown>;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
  const dir = await makeTempDir('arkvory-console-tls-');
  ca = await createCertificateAuthority(dir);
  const cert = await issueServerCertificate(ca, dir);
  ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'tls-console-admin', scopes: ['admin'] }));
  gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_TLS_CERT_FILE: cert.certFile,
      ARKVORY_TLS_KEY_FILE: cert.keyFile,
      // The router of the plain-HTTP test below: only a trusted proxy says how the browser came.
      ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
    },
    waitFor: 'none',
  });
  origin = `https://127.0.0.1:${gw.port}`;
  await waitUntil(async () => (await httpsRequest('/health/status')).status === 200, {
    what: 'the gateway to serve HTTPS',
    timeoutMs: 60_000,
    retryOnError: true,
    process: gw,
  });
}, 90_000);

afterAll(() => gw?.stop());

describe('the console session cookie over the gateway’s own TLS', () => {
  it('is __Host-arkvory_console with Secure, Path=/ and no Domain; the same id under the plain name is not a session', async () => {
    const signIn = await httpsRequest('/console/session', { method: 'POST', headers: bearer(adminKey) });
    expect(signIn.status, signIn.body.toString()).toBe(201);
    const setCookie = signIn.headers['set-cookie']![0]!;
    expect(setCookie).toMatch(/^__Host-arkvory_console=[A-Za-z0-9_-]{40,}; Path=\/; HttpOnly; SameSite=Strict; /);
    expect(setCookie).toMatch(/; Secure(;|$)/);
    expect(setCookie).not.toMatch(/domain=/i);
    const cookie = setCookie.split(';')[0]!;
    const id = cookie.slice(cookie.indexOf('=') + 1);
    const csrf = String(json(signIn).csrfToken);

    expect(json(await httpsRequest('/console/session', { headers: { cookie } }))).toMatchObject({ signedIn: true });
    expect((await httpsRequest('/console/api/status', { headers: { cookie } })).status).toBe(200);
    // A cookie tossed under the plain name (by a sibling subdomain or over plain HTTP) is ignored.
    const tossed = `arkvory_console=${id}`;
    expect(json(await httpsRequest('/console/session', { headers: { cookie: tossed } }))).toEqual({ signedIn: false });
    const refused = await httpsRequest('/console/api/status', { headers: { cookie: tossed } });
    expect(refused.status).toBe(401);
    expect(json(refused).code).toBe('unauthorized');

    const out = await httpsRequest('/console/api/session', {
      method: 'DELETE',
      headers: { cookie, 'x-csrf-token': csrf },
    });
    expect(out.status).toBe(204);
    // Cleared under the same name and path, or the browser would keep the live one.
    expect(out.headers['set-cookie']![0]).toBe(
      '__Host-arkvory_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure',
    );
  });

  it('through a plain-HTTP router in front, is the plain-HTTP cookie: the router says the browser came over http', async () => {
    const router = await startGateway({
      env: {
        ARKVORY_ROLE: 'router',
        ARKVORY_ROUTER_BACKENDS: origin,
        ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '200',
        ARKVORY_TLS_CA_FILE: ca.certFile,
      },
    });
    try {
      const signIn = await request(`${router.url}/console/session`, { method: 'POST', headers: bearer(adminKey) });
      expect(signIn.status, signIn.body.toString()).toBe(201);
      // A browser drops a Secure (let alone __Host-) cookie set by an http page: the console would
      // sign in and be signed out at its first call.
      const setCookie = signIn.headers['set-cookie']![0]!;
      expect(setCookie).toMatch(/^arkvory_console=[A-Za-z0-9_-]{40,}; Path=\/console; HttpOnly; SameSite=Strict$/);
      const cookie = setCookie.split(';')[0]!;
      expect(json(await request(`${router.url}/console/session`, { headers: { cookie } }))).toMatchObject({
        signedIn: true,
      });
      expect((await request(`${router.url}/console/api/status`, { headers: { cookie } })).status).toBe(200);
      // Straight to the gateway's TLS listener the same id under the plain name is still no session.
      expect((await httpsRequest('/console/api/status', { headers: { cookie } })).status).toBe(401);
    } finally {
      await router.stop();
    }
  });

  it('chromium keeps the __Host- cookie, sends it back after a reload, and drops it on sign-out', async () => {
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    try {
      // The test CA is not in chromium's store; the origin is still https, so Secure cookies apply.
      const context = await browser.newContext({ ignoreHTTPSErrors: true });
      const page = await context.newPage();
      page.setDefaultTimeout(15_000);
      await page.goto(`${origin}/console/`);
      await page.fill('#admin-key', adminKey);
      await page.click('#sign-in-form button[type=submit]');
      await page.waitForSelector('#app', { state: 'visible' });
      const kept = await context.cookies(origin);
      expect(kept).toEqual([
        expect.objectContaining({
          name: '__Host-arkvory_console',
          path: '/',
          domain: '127.0.0.1',
          secure: true,
          httpOnly: true,
          sameSite: 'Strict',
        }),
      ]);
      await page.reload();
      await page.waitForSelector('#app', { state: 'visible' });
      await page.click('#sign-out');
      await page.waitForSelector('#sign-in', { state: 'visible' });
      expect(await context.cookies(origin)).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 60_000);

  it('chromium forgets the session when it is closed: the cookie lives in memory, not in the profile on disk', async () => {
    const profile = await makeTempDir('arkvory-console-profile-');
    const open = () =>
      chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        args: CHROMIUM_ARGS,
        ignoreHTTPSErrors: true,
      });
    const first = await open();
    try {
      const page = first.pages()[0] ?? (await first.newPage());
      page.setDefaultTimeout(15_000);
      await page.goto(`${origin}/console/`);
      await page.fill('#admin-key', adminKey);
      await page.click('#sign-in-form button[type=submit]');
      await page.waitForSelector('#app', { state: 'visible' });
      expect((await first.cookies(origin)).map((c) => c.expires)).toEqual([-1]);
    } finally {
      await first.close();
    }
    // The same profile opened again (a shared machine's next user): the page asks for a key.
    const second = await open();
    try {
      expect(await second.cookies(origin)).toEqual([]);
      const page = second.pages()[0] ?? (await second.newPage());
      page.setDefaultTimeout(15_000);
      await page.goto(`${origin}/console/`);
      await page.waitForSelector('#sign-in', { state: 'visible' });
      expect(await page.isHidden('#app')).toBe(true);
    } finally {
      await second.close();
    }
  }, 60_000);
});
