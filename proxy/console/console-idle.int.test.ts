/**
 * The console's idle timeout against a real writer (ARKVORY_CONSOLE_IDLE_TIMEOUT_SECONDS=3) and real
 * Chromium: the page's own polls of its views keep no session alive, so an unattended console signs
 * out by itself after the idle timeout, while an operator's actions (requests carrying the
 * session's CSRF token) keep it open, and a page the back button brings back from the browser's
 * memory after its session idled out shows nothing of it. The tests run at once: each waits about one
 * idle timeout.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { CHROMIUM, CHROMIUM_ARGS } from '../../test/support/chromium.ts';
import { request, type RawResponse } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';

/** Longer than the page's 2 s status poll: with each poll counted as use, no session would ever end. */
const IDLE_MS = 3000;
/** Well inside the idle timeout, so a slow machine does not let the acting session lapse. */
const ACT_EVERY_MS = 200;

const db = useTestDatabase();
let gw: GatewayProcess;
let adminKey: string;
let browser: Browser;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
  ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'idle-admin', scopes: ['admin'] }));
  [gw, browser] = await Promise.all([
    startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_CONSOLE_IDLE_TIMEOUT_SECONDS: String(IDLE_MS / 1000) },
    }),
    chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS }),
  ]);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await gw?.stop('SIGTERM');
});

async function signIn(): Promise<{ cookie: string; csrf: string }> {
  const res = await request(`${gw.url}/console/session`, { method: 'POST', headers: bearer(adminKey) });
  expect(res.status).toBe(201);
  return {
    cookie: (res.headers['set-cookie']?.[0] ?? '').split(';')[0]!,
    csrf: String((JSON.parse(res.body.toString()) as { csrfToken: string }).csrfToken),
  };
}

const status = (cookie: string, csrf?: string): Promise<RawResponse> =>
  request(`${gw.url}/console/api/status`, {
    headers: { cookie, ...(csrf === undefined ? {} : { 'x-csrf-token': csrf }) },
  });

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.concurrent('the console idle timeout', () => {
  it('ends a session that is only polled, or sent a wrong token, and keeps one whose requests carry its token', async () => {
    // Before the sign-ins: no session can have idled out sooner than IDLE_MS after this.
    const started = performance.now();
    // Opened first, so it has idled out by the time the polled one has.
    const embedded = await signIn();
    const [polled, forged, acting] = await Promise.all([signIn(), signIn(), signIn()]);
    // The acting session acts on a loop of its own, so a slow poll of the others (a loaded machine)
    // never stretches the time between its actions toward the idle timeout.
    let polledEnded = false;
    const actingStatuses: number[] = [];
    const acting$ = (async () => {
      while (!polledEnded) {
        const got = (await status(acting.cookie, acting.csrf)).status;
        actingStatuses.push(got);
        if (got !== 200) return;
        await pause(ACT_EVERY_MS);
      }
    })();
    acting$.catch(() => {}); // awaited below, where a failure fails the test
    let polledStatus = 200;
    while (polledStatus === 200 && performance.now() - started < 15_000) {
      // A poll reads, but its idle clock keeps running; another session's token counts for nothing.
      // Another page of the same site (SameSite=Strict sends the cookie along) loading the resume
      // as an image or a frame is no page load of the console's: it keeps nothing open either.
      const [polledAnswer] = await Promise.all([
        status(polled.cookie),
        status(forged.cookie, acting.csrf),
        ...['same-site', 'cross-site'].map((site) =>
          request(`${gw.url}/console/session`, {
            headers: { cookie: embedded.cookie, 'sec-fetch-site': site, 'sec-fetch-dest': 'image' },
          }),
        ),
      ]);
      polledStatus = polledAnswer.status;
      await pause(ACT_EVERY_MS);
    }
    polledEnded = true;
    await acting$;
    expect(actingStatuses.length).toBeGreaterThan(0);
    expect(actingStatuses.filter((s) => s !== 200)).toEqual([]);
    expect(polledStatus).toBe(401);
    expect(performance.now() - started).toBeGreaterThanOrEqual(IDLE_MS);
    expect((await status(forged.cookie)).status).toBe(401);
    expect((await status(embedded.cookie)).status).toBe(401);
    // The one that acted all along is still signed in, well past the idle timeout.
    expect((await status(acting.cookie)).status).toBe(200);
    // Its resume after a reload says so too; the ended one's says it is signed out.
    const resumed = await request(`${gw.url}/console/session`, { headers: { cookie: polled.cookie } });
    expect(JSON.parse(resumed.body.toString())).toEqual({ signedIn: false });
  });

  it('signs an unattended page out by itself, and keeps a page an operator uses signed in', async () => {
    const open = async (): Promise<Page> => {
      const page = await (await browser.newContext()).newPage();
      page.setDefaultTimeout(15_000);
      await page.goto(`${gw.url}/console/`);
      await page.fill('#admin-key', adminKey);
      await page.click('#sign-in-form button[type=submit]');
      await page.waitForSelector('#app', { state: 'visible' });
      return page;
    };
    const started = performance.now();
    // One after the other, the used page last: its first action follows its sign-in at once. (Opened
    // together, on a loaded machine the other page's sign-in could take past the idle timeout while
    // the used page, signed in first, waited for it, idle.)
    const unattended = await open();
    const used = await open();
    // Every request the unattended page makes is a poll of its timers: none carries the token.
    const tokens: string[] = [];
    unattended.on('request', (req) => {
      const token = req.headers()['x-csrf-token'];
      if (token !== undefined) tokens.push(`${req.method()} ${req.url()}`);
    });
    // The operator asks for the "not downloaded for" listing again: a read it asked for.
    const act = async (): Promise<number> => {
      const [res] = await Promise.all([
        used.waitForResponse((r) => r.url().includes('/console/api/stats/artifacts?view=idle')),
        used.click('#idle-form button[type=submit]'),
      ]);
      return res.status();
    };
    // The operator acts on a loop of its own while the unattended page is waited for: its actions
    // stay ACT_EVERY_MS plus one action apart however slowly the other page is looked at.
    let unattendedEnded = false;
    const actStatuses: number[] = [];
    const acting = (async () => {
      while (!unattendedEnded) {
        const got = await act();
        actStatuses.push(got);
        if (got !== 200) return;
        await pause(ACT_EVERY_MS);
      }
    })();
    acting.catch(() => {}); // awaited below, where a failure fails the test
    try {
      await unattended.waitForSelector('#app', { state: 'hidden', timeout: 15_000 });
    } finally {
      unattendedEnded = true;
      await acting;
    }
    expect(actStatuses.length).toBeGreaterThan(0);
    expect(actStatuses.filter((s) => s !== 200)).toEqual([]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(IDLE_MS);
    expect(await unattended.textContent('#sign-in-error')).toMatch(/^Your session ended/);
    expect(tokens).toEqual([]);
    // The used page, signed in as long as the other, is still: past the idle timeout its session lives.
    expect(await act()).toBe(200);
    expect(await used.isVisible('#app')).toBe(true);
    await Promise.all([unattended.context().close(), used.context().close()]);
  });

  it('conceals a page the back button brings back, and shows nothing of a session that idled out meanwhile', async ({
    expect,
  }) => {
    // Playwright turns the back/forward cache off by default; the browsers operators use keep it on.
    const kept = await chromium.launch({
      executablePath: CHROMIUM,
      args: CHROMIUM_ARGS,
      ignoreDefaultArgs: ['--disable-back-forward-cache'],
    });
    try {
      const context = await kept.newContext();
      // What the page shows the instant it comes back, before any of its own code runs again.
      // The test's own script (the page's CSP does not bind it), listening before the console's.
      await context.addInitScript(`addEventListener('pageshow', (e) => {
        if (!e.persisted) return;
        window.restored = {
          app: !document.getElementById('app').hidden,
          key: document.getElementById('new-key-value').textContent,
        };
      });`);
      const page = await context.newPage();
      page.setDefaultTimeout(15_000);
      await page.goto(`${gw.url}/console/`);
      await page.fill('#admin-key', adminKey);
      await page.click('#sign-in-form button[type=submit]');
      await page
        .locator('#key-form select[name=principal] option', { hasText: 'idle-admin' })
        .waitFor({ state: 'attached' });
      await page.selectOption('#key-form select[name=principal]', { label: 'idle-admin' });
      await page.click('#key-form button[type=submit]');
      await page.waitForSelector('#new-key', { state: 'visible' });
      expect(await page.textContent('#new-key-value')).toMatch(/^ark_/);
      // The operator goes elsewhere; the session idles out (a poll without the token keeps nothing open).
      await page.goto(`${gw.url}/console/static/console.css`);
      const started = performance.now();
      while ((await context.request.get(`${gw.url}/console/api/status`)).status() !== 401) {
        expect(performance.now() - started).toBeLessThan(15_000);
        await pause(100);
      }
      // A bfcache restore fires no load event: wait only for the navigation itself.
      await page.goBack({ waitUntil: 'commit' });
      await expect
        .poll(() => page.evaluate('window.restored ?? null'), { timeout: 5000 })
        .toEqual({ app: false, key: '' });
      await page.waitForSelector('#sign-in', { state: 'visible' });
      expect(await page.isVisible('#app')).toBe(false);
    } finally {
      await kept.close();
    }
  });
});
