/**
 * State-changing requests a browser sends for another site are refused before authentication
 * (403 `cross_site_request`), on a real gateway: by the headers browsers send, and end to end in
 * Debian's chromium holding the admin key as Basic credentials (as after an operator typed it into
 * the browser's prompt) while a page of another site posts a form to an admin route. And what a
 * page can make a browser send (no credential, or a link's parameters, with cached Basic credentials
 * or without, or a window sent to the gateway with a key in its URL) never counts toward the
 * address's ban.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Page, type Response } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS } from '../../test/support/chromium.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';

const db = useTestDatabase();
let gw: GatewayProcess;
let admin: { key: string };
let target: { name: string };

beforeAll(async () => {
  admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
  target = await createServiceAccount(db.pool, { name: 'cross-site-target' });
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
}, 60_000);

/** A raw request with exactly these headers (fetch would add or refuse some). */
function send(method: string, path: string, headers: Record<string, string>) {
  return new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
    const req = http.request(`${gw.url}${path}`, { method, headers }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : {} }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function disabled(): Promise<boolean> {
  const res = await send('GET', `/api/v1/admin/principals/${target.name}`, bearer(admin.key));
  return res.body.disabled as boolean;
}

describe('a request a browser sends from another site', () => {
  it('is refused before its credentials when it would change state; reads and non-browser clients pass', async () => {
    const disable = `/api/v1/admin/principals/${target.name}/disable`;
    const enable = `/api/v1/admin/principals/${target.name}/enable`;
    const refused: Record<string, string>[] = [
      { 'sec-fetch-site': 'cross-site' },
      { 'sec-fetch-site': 'same-site' },
      { origin: 'http://attacker.example' },
      { origin: 'null' },
      { origin: `http://localhost:${new URL(gw.url).port}` },
    ];
    for (const headers of refused) {
      const res = await send('POST', disable, { ...bearer(admin.key), ...headers });
      expect(res.status, JSON.stringify(headers)).toBe(403);
      expect(res.body.code).toBe('cross_site_request');
      expect(await disabled()).toBe(false);
    }
    // Refused before authentication: no key at all gets the same answer, not a 401 to count.
    expect((await send('POST', disable, { 'sec-fetch-site': 'cross-site' })).body.code).toBe('cross_site_request');
    // The console (same origin), a typed URL, and clients without browser headers.
    expect((await send('POST', disable, { ...bearer(admin.key), 'sec-fetch-site': 'same-origin' })).status).toBe(200);
    expect((await send('POST', enable, { ...bearer(admin.key), 'sec-fetch-site': 'none' })).status).toBe(200);
    expect((await send('POST', disable, { ...bearer(admin.key), origin: gw.url })).status).toBe(200);
    expect((await send('POST', enable, bearer(admin.key))).status).toBe(200);
    // A read from another site (a link followed from a page) is answered as any read.
    const read = await send('GET', `/api/v1/admin/principals/${target.name}`, {
      ...bearer(admin.key),
      'sec-fetch-site': 'cross-site',
    });
    expect(read.status).toBe(200);
  });
});

describe('in a real browser holding the admin key as Basic credentials', () => {
  let page: http.Server;
  afterAll(() => page?.close());

  it("a page of another site cannot post a form to an admin route with the browser's credentials", async () => {
    // The other site: a page that posts a form to the gateway as soon as it loads.
    page = http.createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(
        `<form id="f" method="POST" action="${gw.url}/api/v1/admin/principals/${target.name}/disable"></form>` +
          `<script>document.getElementById('f').submit()</script>`,
      );
    });
    await new Promise<void>((resolve) => page.listen(0, 'localhost', resolve));
    const other = `http://localhost:${(page.address() as AddressInfo).port}/`;
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    try {
      const context = await browser.newContext({
        httpCredentials: { username: admin.key, password: '', origin: new URL(gw.url).origin },
      });
      const tab = await context.newPage();
      // The browser holds the key for the gateway: an admin read there answers.
      const own = await tab.goto(`${gw.url}/api/v1/admin/principals/${target.name}`);
      expect(own?.status()).toBe(200);
      const answered = tab.waitForResponse((res) => res.url().endsWith('/disable'));
      await tab.goto(other);
      const posted = await answered;
      expect(posted.status()).toBe(403);
      expect(await posted.json()).toMatchObject({ code: 'cross_site_request' });
      expect(await disabled()).toBe(false);
    } finally {
      await browser.close();
    }
  });
});

describe("a link's parameters on a method its route does not take", () => {
  it('are offered only the Bearer challenge when a browser sends them for another site, as every 401 is', async () => {
    const link =
      '/api/v1/repositories/libs/artifacts/a.bin/content?X-Arkvory-Key=zzzzzzzzzzzzzzzz&X-Arkvory-Date=1&X-Arkvory-Expires=60&X-Arkvory-Secret=1&X-Arkvory-Digest=00&X-Arkvory-Signature=00';
    const challenges = (headers: Record<string, string>) =>
      new Promise<{ status: number; challenge: string | string[] | undefined }>((resolve, reject) => {
        const req = http.request(`${gw.url}${link}`, { method: 'POST', headers }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, challenge: res.headers['www-authenticate'] }));
        });
        req.on('error', reject);
        req.end();
      });
    // A form of another site posting to the link: a Basic challenge would open the browser's login prompt.
    expect(await challenges({ 'sec-fetch-site': 'cross-site' })).toEqual({
      status: 401,
      challenge: 'Bearer realm="arkvory"',
    });
    expect(await challenges({})).toEqual({
      status: 401,
      challenge: 'Bearer realm="arkvory", Basic realm="arkvory"',
    });
  });
});

/**
 * Has the opener send its window to `url` and returns the gateway's answer. A loaded machine's
 * Chromium now and then drops a navigation one page gives another window: it is given again (every
 * one that reached the gateway still counts toward the ban this test expects never to start).
 */
async function sendPopup(opener: Page, popup: Page, url: string): Promise<Response> {
  for (let attempt = 1; ; attempt++) {
    const answered = popup.waitForResponse((res) => res.url().endsWith(new URL(url).search), { timeout: 10_000 });
    await opener.evaluate(`window.go(${JSON.stringify(url)})`);
    try {
      return await answered;
    } catch (err) {
      if (attempt === 3) throw err;
    }
  }
}

describe('a page of another site sending a window to the gateway with a key in the URL', () => {
  let site: http.Server;
  afterAll(() => site?.close());

  it('never gets its visitor banned: the browser is offered no Basic challenge to answer with it', async () => {
    // One click opens a window; the page then sends it to the gateway as often as it likes.
    site = http.createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(
        `<button id="b">continue</button><script>let w;` +
          `document.getElementById('b').onclick = () => { w = window.open('about:blank', 'victim'); };` +
          `window.go = (u) => { w.location = u; };</script>`,
      );
    });
    await new Promise<void>((resolve) => site.listen(0, 'localhost', resolve));
    const bad = new URL(`${gw.url}/api/v1/admin/principals/${target.name}`);
    bad.username = 'ops';
    bad.password = `ark_zzzzzzzzzzzzzzzz_${'a'.repeat(43)}`;
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    try {
      const tab = await (await browser.newContext()).newPage();
      await tab.goto(`http://localhost:${(site.address() as AddressInfo).port}/`);
      const [popup] = await Promise.all([tab.context().waitForEvent('page'), tab.click('#b')]);
      const statuses: number[] = [];
      // 21 counted failures start the shipped ban.
      for (let i = 0; i < 25; i++) {
        const res = await sendPopup(tab, popup, `${bad.href}?i=${i}`);
        statuses.push(res.status());
        expect(res.headers()['www-authenticate']).toBe('Bearer realm="arkvory"');
        // The next navigation starts once this one has committed, as a page's script would see it.
        await popup.waitForURL((url) => url.search === `?i=${i}`);
      }
      expect(statuses).toEqual(Array(25).fill(401));
      expect((await send('GET', `/api/v1/admin/principals/${target.name}`, bearer(admin.key))).status).toBe(200);
    } finally {
      await browser.close();
    }
  });
});

describe('failed authentications a page of another site can make a browser send', () => {
  // Last in the file: it ends with this address banned.
  it('never ban the address: no credential, or a link from another site; a bad key still does', async () => {
    const path = `/api/v1/admin/principals/${target.name}`;
    const link = `${path}?X-Arkvory-Key=ark_x&X-Arkvory-Date=1&X-Arkvory-Expires=60&X-Arkvory-Signature=00`;
    // 21 failures start the shipped ban; 30 of each kind stay under it.
    // A browser adds the Basic credentials it cached to the link too; the link alone is judged.
    const cached = { authorization: `Basic ${Buffer.from(`ops:${admin.key}`).toString('base64')}` };
    for (let i = 0; i < 30; i++) {
      expect((await send('GET', path, {})).status).toBe(401);
      expect((await send('GET', link, { 'sec-fetch-site': 'cross-site' })).status).toBe(401);
      expect((await send('GET', link, { ...cached, 'sec-fetch-site': 'cross-site' })).status).toBe(401);
    }
    expect((await send('GET', path, bearer(admin.key))).status).toBe(200);
    // A guessed key is a failed attempt, as before: the address is banned.
    for (let i = 0; i < 21; i++) expect((await send('GET', path, bearer(`${admin.key}x`))).status).toBe(401);
    expect((await send('GET', path, bearer(admin.key))).status).toBe(429);
  });
});
