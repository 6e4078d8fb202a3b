/**
 * The console in a real browser (playwright-core driving Debian's chromium) behind a real nginx that
 * publishes the gateway under a path (`location /arkvory/`, stripping it, saying so in
 * X-Forwarded-Prefix, the gateway trusting it): the page, its assets and every API call it makes go
 * through that path, and the plain-HTTP session cookie's path is under it, so the operator signs in,
 * reloads and is still signed in.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceAccount } from '../../test/support/auth.ts';
import { CHROMIUM, CHROMIUM_ARGS } from '../../test/support/chromium.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { type HeaderLoggingProxy, startHeaderLoggingProxy } from '../../test/support/header-logging-proxy.ts';

const db = useTestDatabase();
let gateway: GatewayProcess;
let proxy: HeaderLoggingProxy;
let browser: Browser;
let page: Page;
let adminKey: string;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
  ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'prefixed-admin', scopes: ['admin'] }));
  gateway = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TRUSTED_PROXIES: '127.0.0.1' } });
  proxy = await startHeaderLoggingProxy(`http://127.0.0.1:${gateway.port}`, {
    pathPrefix: '/arkvory/',
    forwardedPrefix: true,
  });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  page = await browser.newPage();
  page.setDefaultTimeout(10_000);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await proxy?.stop();
  await gateway?.stop('SIGTERM');
});

describe('the console under a path prefix, in chromium', () => {
  it('is reached at <prefix>/console, signs in and stays signed in across a reload, every request under the prefix', async () => {
    await page.goto(`${proxy.url}/arkvory/console`);
    expect(new URL(page.url()).pathname).toBe('/arkvory/console/');
    await page.fill('#admin-key', adminKey);
    await page.click('#sign-in-form button[type=submit]');
    await page.waitForSelector('#app', { state: 'visible' });
    expect(await page.textContent('#principal-name')).toBe('prefixed-admin');
    // The session cookie reaches the console's API under the prefix: a reload resumes it.
    await page.reload();
    await page.waitForSelector('#app', { state: 'visible' });
    expect(await page.textContent('#principal-name')).toBe('prefixed-admin');
    // What the page asked for (not nginx's start-up probe of `/`, nor the browser's own favicon).
    const asked = (await proxy.requests())
      .map((r) => ({ path: r.request.split(' ')[1]!, status: r.status }))
      .filter((r) => r.path !== '/' && r.path !== '/favicon.ico');
    expect(asked.map((r) => r.path)).toContain('/arkvory/console/static/console.js');
    expect(asked.map((r) => r.path)).toContain('/arkvory/console/api/status');
    // nginx proxies only /arkvory/: nothing the page asked for went past it, and nothing failed
    // (499: a poll the reload cut short, nginx's word for a client that hung up).
    expect(
      asked.filter((r) => !r.path.startsWith('/arkvory/console') || (r.status >= 400 && r.status !== 499)),
    ).toEqual([]);
  });
});
