/**
 * The console in a real browser (playwright-core driving Debian's chromium) against a real writer
 * and reader in the shared profile: sign in, see both gateways and a live download the test
 * started, publish a rule and see it refuse a request, get a validation error beside its field,
 * create a key, grant a repository, revoke the key and see it refused. Screenshots are kept as CI
 * artifacts (ignored by git): test-results/console.png during the live download,
 * test-results/console-access.png with the validation errors and a new key.
 */
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS } from '../../test/support/chromium.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { ROOT, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { freeLoopbackPort, type SharedProfile, sharedProfileEnv } from '../../test/harness/index.ts';

const KiB = 1024;
/** Two slots of 64 KiB/s each: a 2 MiB download stays live for ~30 s. */
const SHARE = 64 * KiB;
const SCREENSHOTS = path.join(ROOT, 'test-results');
/** Page state is read from outside: the console's CSP forbids the eval a page-side wait would need. */
const POLL = { timeout: 15_000, interval: 100 };

/** Counters and rule documents under a prefix of this file, removed afterwards. */
const redis = useTestRedis();
let db: TestDatabase & { drop(): Promise<void> };
let writer: GatewayProcess;
let reader: GatewayProcess;
let browser: Browser;
let page: Page;
let adminKey: string;
let downloader: { key: string; name: string };
let limited: { key: string; principalId: string };
const contentUrl = () => `${writer.url}/api/v1/repositories/libs/artifacts/big.bin/content`;

/** The shared profile's settings, known once the database is made. */
let profile: SharedProfile;
const sharedEnv = (role: 'api' | 'reader', slot: number, port: number) => ({
  ...sharedProfileEnv({ ...profile, role, slot, port }),
  // Usage counts reach the database (and the console's usage view) within a second.
  ARKVORY_USAGE_STATS_FLUSH_SECONDS: '1',
});

/** Starts a paced download and keeps reading until `stop()`. */
function slowDownload(url: string, key: string): { stop(): void; bytes(): number; status: Promise<number> } {
  let bytes = 0;
  let req: http.ClientRequest;
  const status = new Promise<number>((resolve, reject) => {
    req = http.get(url, { headers: bearer(key), agent: false }, (res) => {
      resolve(res.statusCode ?? 0);
      res.on('data', (c: Buffer) => (bytes += c.length));
      res.on('error', () => {});
    });
    req.on('error', (err) => (req.destroyed ? undefined : reject(err)));
  });
  return { stop: () => req.destroy(), bytes: () => bytes, status };
}

async function untilStatus(probe: () => Promise<number>, expected: number, withinMs: number): Promise<number> {
  const deadline = Date.now() + withinMs;
  let status = await probe();
  while (status !== expected && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    status = await probe();
  }
  return status;
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
  db = await createTestDatabase();
  profile = { databaseUrl: db.url, redis, slots: 2, downloadBytesPerSecond: 2 * SHARE };
  await createRepository(db.pool, 'libs');
  ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'browser-admin', scopes: ['admin'] }));
  downloader = await createServiceAccount(db.pool, {
    name: 'slow-downloader',
    scopes: ['read', 'write'],
    grants: { libs: 'write' },
  });
  limited = await createServiceAccount(db.pool, { name: 'limited-caller', scopes: ['read'], grants: { libs: 'read' } });
  const [writerPort, readerPort] = [await freeLoopbackPort(), await freeLoopbackPort()];
  writer = await startGateway({ env: sharedEnv('api', 0, writerPort) });
  reader = await startGateway({ env: sharedEnv('reader', 1, readerPort) });
  const put = await request(`${writer.url}/api/v1/repositories/libs/artifacts/big.bin`, {
    method: 'PUT',
    headers: { ...bearer(downloader.key), 'content-type': 'application/octet-stream' },
    body: randomContent(2 * 1024 * KiB),
  });
  expect(put.status).toBe(201);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(15_000);
  await page.goto(`${writer.url}/console/`);
  await page.fill('#admin-key', adminKey);
  await page.click('#sign-in-form button[type=submit]');
  await page.waitForSelector('#app', { state: 'visible' });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await Promise.all([writer, reader].filter(Boolean).map((g) => g.stop('SIGTERM')));
  await db?.drop();
});

describe('the console in chromium', () => {
  it('signs in without keeping the key anywhere the page can read back', async () => {
    expect(await page.textContent('#principal-name')).toBe('browser-admin');
    expect(await page.inputValue('#admin-key')).toBe('');
    expect(page.url()).not.toContain(adminKey);
    const stored = await page.evaluate<string>(
      'JSON.stringify({ local: { ...localStorage }, session: { ...sessionStorage }, cookie: document.cookie })',
    );
    expect(stored).not.toContain(adminKey.slice(4));
    expect(JSON.parse(stored).cookie).toBe(''); // the session cookie is HttpOnly
  });

  it('shows the two gateways and a live transfer the test started', async () => {
    await expect.poll(() => page.locator('#slot-rows tr[data-health="serving"]').count(), POLL).toBe(2);
    expect(await page.locator('#slot-rows tr[data-slot="1"]').textContent()).toContain(reader.url);
    const download = slowDownload(contentUrl(), downloader.key);
    try {
      expect(await download.status).toBe(200);
      const row = page.locator('#transfer-rows tr[data-state="active"]', { hasText: 'slow-downloader' });
      await row.waitFor();
      expect(await row.textContent()).toContain('/api/v1/repositories/:repo/artifacts/:id/content');
      // The chart draws the paced download against the 64 KiB/s ceiling line.
      await page.waitForSelector('#chart-download polyline.download');
      await page.waitForSelector('#chart-download line[data-ceiling="download"]', { state: 'attached' });
      await expect.poll(() => page.textContent('#bandwidth-legend'), POLL).toMatch(/download [1-9]/);
      expect(download.bytes()).toBeLessThan(1024 * KiB);
      await page.screenshot({ path: await screenshotPath('console.png'), fullPage: true });
    } finally {
      download.stop();
    }
    await page.waitForSelector('#transfer-rows tr[data-transfer]', { state: 'detached' });
  });

  it('shows a usage bar per storage quota, filled to the repository usage', async () => {
    const stored = Number(
      (
        await db.pool.query<{ n: string }>(
          `SELECT coalesce(sum(size_bytes), 0)::text AS n FROM (SELECT DISTINCT sha256, size_bytes FROM arkvory_artifacts WHERE repository = 'libs') b`,
        )
      ).rows[0]!.n,
    );
    expect(stored).toBeGreaterThan(0);
    const set = await request(`${writer.url}/api/v1/admin/quotas/repositories/libs`, {
      method: 'PUT',
      headers: { ...bearer(adminKey), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ limitBytes: stored * 4 })),
    });
    expect(set.status).toBe(200);
    const bar = page.locator('#quota-rows tr[data-quota="repository:libs"] meter');
    await bar.waitFor({ timeout: POLL.timeout });
    expect(Number(await bar.getAttribute('max'))).toBe(stored * 4);
    expect(Number(await bar.getAttribute('value'))).toBe(stored);
    expect(await bar.getAttribute('title')).toBe('25.0% used');
  });

  it('publishes a rule through the form, sees it refuse a request, changes it and deletes it', async () => {
    const probe = () =>
      request(`${writer.url}/api/v1/repositories`, { headers: bearer(limited.key) }).then((r) => r.status);
    expect(await probe()).toBe(200);
    await page.selectOption('#rule-limiter', 'gateway_request');
    await page.fill('#rule-form [name=name]', 'console_limit_probe');
    await page.selectOption('#rule-form [name=action]', 'limit');
    await page.fill('#rule-form [name=limit]', '1');
    await page.fill('#rule-form [name=period_s]', '60');
    await page.fill('#rule-form [name=characteristics]', 'principal');
    await page.fill('#rule-form [name=match]', `principal=${limited.principalId}`);
    await page.click('#rule-form button[type=submit]');
    await expect.poll(() => page.textContent('#rule-result'), POLL).toContain('Published console_limit_probe');
    await page
      .locator(
        '[data-limiter="gateway_request"] [data-tier-table="published_rules"] tr[data-rule="console_limit_probe"]',
      )
      .waitFor();
    // limit 1 per window: the first request counted may be the one above; within two the rule blocks.
    const statuses = [await probe(), await probe()];
    expect(statuses).toContain(429);
    const blocked = await request(`${writer.url}/api/v1/repositories`, { headers: bearer(limited.key) });
    expect(blocked.status).toBe(429);
    expect(JSON.parse(blocked.body.toString()).code).toBe('rate_limited');
    expect(String(blocked.headers['ratelimit-policy'])).toContain('console_limit_probe');
    await expect
      .poll(
        async () => Number(await page.textContent('#block-rows tr[data-limiter="gateway_request"] td:nth-child(2)')),
        POLL,
      )
      .toBeGreaterThanOrEqual(1);
    // "edit" fills the form; publishing under the same name changes the rule in place.
    await page.click('[data-tier-table="published_rules"] button[data-edit="console_limit_probe"]');
    expect(await page.inputValue('#rule-form [name=match]')).toBe(`principal=${limited.principalId}`);
    await page.fill('#rule-form [name=limit]', '500');
    await page.click('#rule-form button[type=submit]');
    await page
      .locator('[data-tier-table="published_rules"] tr[data-rule="console_limit_probe"]', {
        hasText: '500 per 60 s by principal',
      })
      .waitFor();
    expect(await page.locator('[data-tier-table="published_rules"] tr[data-rule]').count()).toBe(1);
    expect(await probe()).toBe(200);
    // Deleting it through the page lifts it.
    page.once('dialog', (d) => void d.accept());
    await page.click('[data-tier-table="published_rules"] button[data-delete="console_limit_probe"]');
    await page
      .locator('[data-tier-table="published_rules"] tr[data-rule="console_limit_probe"]')
      .waitFor({ state: 'detached' });
  });

  it('shows validation errors beside the fields of a bad rule and publishes nothing', async () => {
    await page.fill('#rule-form [name=name]', 'Bad Name');
    await page.selectOption('#rule-form [name=action]', 'limit');
    await page.fill('#rule-form [name=limit]', 'ten');
    await page.fill('#rule-form [name=period_s]', '60');
    await page.fill('#rule-form [name=characteristics]', 'nope');
    await page.fill('#rule-form [name=match]', '');
    await page.click('#rule-form button[type=submit]');
    await expect.poll(() => page.textContent('#rule-form [data-error-for="name"]'), POLL).not.toBe('');
    expect(await page.textContent('#rule-form [data-error-for="name"]')).toContain('name must match');
    expect(await page.textContent('#rule-form [data-error-for="limit"]')).toContain('limit must be an integer');
    expect(await page.textContent('#rule-form [data-error-for="characteristics"]')).toContain(
      'not an available property',
    );
    expect(await page.textContent('#rule-result')).toBe('');
    expect(await page.locator('tr[data-rule="Bad Name"]').count()).toBe(0);
  });

  it('creates a principal and a key (shown once), grants a repository, revokes the key and sees it refused', async () => {
    await page.fill('#principal-form [name=name]', 'console-made');
    await page.click('#principal-form button[type=submit]');
    await page.locator('#principal-rows tr[data-principal="console-made"]').waitFor();
    await page.selectOption('#key-form select[name=principal]', { label: 'console-made' });
    await page.fill('#key-form [name=description]', 'made in the console');
    await page.click('#key-form button[type=submit]');
    await page.waitForSelector('#new-key', { state: 'visible' });
    const key = (await page.textContent('#new-key-value'))!;
    expect(key).toMatch(/^ark_[a-z0-9]{16}_[A-Za-z0-9_-]{43}$/);
    await page.selectOption('#grant-form select[name=principal]', { label: 'console-made' });
    await page.selectOption('#grant-form select[name=repository]', 'libs');
    await page.selectOption('#grant-form select[name=permission]', 'read');
    await page.click('#grant-form button[type=submit]');
    await page.locator('#principal-rows tr[data-principal="console-made"]', { hasText: 'libs (read)' }).waitFor();
    const head = () => request(contentUrl(), { method: 'HEAD', headers: bearer(key) }).then((r) => r.status);
    expect(await head()).toBe(200);

    await page.screenshot({ path: await screenshotPath('console-access.png'), fullPage: true });

    await page.click('#new-key-dismiss');
    expect(await page.textContent('#new-key-value')).toBe('');
    const keyId = key.slice(4, 20);
    page.once('dialog', (d) => void d.accept());
    await page.click(`#principal-rows button[data-revoke="${keyId}"]`);
    await page.locator(`#principal-rows li[data-key="${keyId}"][data-state="revoked"]`).waitFor();
    // Revocation reaches every gateway within 2 s.
    expect(await untilStatus(head, 401, 3000)).toBe(401);
  });

  it("reads more of a principal's keys and grants, and finds repositories past the first 1000 by prefix or page", async () => {
    // 1,000 repositories before libs (which becomes the 1001st), and a principal with 101 keys and
    // 101 grants: one past each page the view shows.
    await db.pool.query(
      `INSERT INTO arkvory_repositories (name) SELECT 'heap-' || lpad(i::text, 4, '0') FROM generate_series(1, 1000) i`,
    );
    const heaped = (
      await db.pool.query<{ id: string }>(`INSERT INTO arkvory_principals (name) VALUES ('heaped') RETURNING id`)
    ).rows[0]!.id;
    await db.pool.query(
      `INSERT INTO arkvory_api_keys (key_id, principal_id, secret_sha256, scopes, created_at)
         SELECT 'k' || lpad(i::text, 15, '0'), $1, sha256(i::text::bytea), '{read}', now() + i * interval '1 millisecond'
           FROM generate_series(1, 101) i`,
      [heaped],
    );
    await db.pool.query(
      `INSERT INTO arkvory_grants (principal_id, repository, permission)
         SELECT $1, 'heap-' || lpad(i::text, 4, '0'), 'write' FROM generate_series(1, 101) i`,
      [heaped],
    );
    // 100 principals sorting last: past the first page of principals, so "more principals" shows.
    await db.pool.query(
      `INSERT INTO arkvory_principals (name) SELECT 'zz-' || lpad(i::text, 3, '0') FROM generate_series(1, 100) i`,
    );
    // A page of its own whose 10-second refresh does not run: its reads of the access view are the
    // ones the test causes, so the read waited for below is the change's and no other.
    const { context, clocked: page } = await clockedConsole();
    const grantOptions = page.locator('#grant-form select[name=repository] option');
    const ceilingOptions = page.locator('#repository-ceiling-form select[name=repository] option');
    try {
      // A change on the page reads the view again, then the ceilings view: that read is sent once
      // the page has drawn the access answer, and a "more" asked for before is dropped as
      // continuing the view before it. Its answer reaching playwright is not enough: the page may
      // not have dealt with it yet.
      const afterReread = page.waitForRequest(
        (r) => new URL(r.url()).pathname === '/console/api/ceilings' && new URL(r.url()).search === '',
      );
      await page.click('#principal-rows form[data-weight-for="limited-caller"] button[type=submit]');
      await afterReread;
      const row = page.locator('#principal-rows tr[data-principal="heaped"]');
      await row.waitFor();
      expect(await row.locator('li[data-key]').count()).toBe(100);
      await row.locator('button[data-more-keys="heaped"]').click();
      await row.locator('li[data-key="k000000000000101"]').waitFor();
      await row.locator('button[data-more-keys]').waitFor({ state: 'detached' });
      expect(await row.textContent()).not.toContain('heap-0101');
      await row.locator('button[data-more-grants="heaped"]').click();
      await row.filter({ hasText: 'heap-0101 (write)' }).waitFor();
      await row.locator('button[data-more-grants]').waitFor({ state: 'detached' });

      // libs is past the first 1000: "more repositories" reads it into both selects.
      await expect.poll(() => grantOptions.count(), POLL).toBe(1000);
      expect(await page.locator('#grant-form option[value="libs"]').count()).toBe(0);
      await page.click('#more-repositories');
      await page.locator('#grant-form option[value="libs"]').waitFor({ state: 'attached' });
      await page.locator('#repository-ceiling-form option[value="libs"]').waitFor({ state: 'attached' });
      expect(await page.isHidden('#more-repositories')).toBe(true);

      // "More principals" reads principals alone (no repositories again) and the selects keep theirs.
      const morePrincipals = page.waitForResponse(
        (r) => new URL(r.url()).pathname === '/console/api/access' && new URL(r.url()).searchParams.has('cursor'),
      );
      await page.click('#more-principals');
      const answer = (await (await morePrincipals).json()) as Record<string, unknown>;
      expect(Object.keys(answer).sort()).toEqual(['nextCursor', 'principals']);
      await page.locator('#principal-rows tr[data-principal="zz-100"]').waitFor();
      expect(await page.isHidden('#more-principals')).toBe(true);
      expect(await grantOptions.count()).toBe(1001);
      expect(await page.locator('#grant-form option[value="libs"]').count()).toBe(1);

      // By the start of its name: the selects offer those only, and keep them after a grant.
      await page.fill('#repository-prefix', 'heap-09');
      await page.click('#repository-find button[type=submit]');
      await expect.poll(() => grantOptions.count(), POLL).toBe(100);
      expect(await ceilingOptions.count()).toBe(100);
      expect(await page.textContent('#repository-count')).toBe('100 repositories starting with heap-09');
      await page.selectOption('#grant-form select[name=principal]', { label: 'limited-caller' });
      await page.selectOption('#grant-form select[name=repository]', 'heap-0950');
      await page.click('#grant-form button[type=submit]');
      await page
        .locator('#principal-rows tr[data-principal="limited-caller"]', { hasText: 'heap-0950 (read)' })
        .waitFor();
      expect(await grantOptions.count()).toBe(100);
      await page.fill('#repository-prefix', 'heap 09');
      await page.click('#repository-find button[type=submit]');
      await page.locator('#repository-find [data-error-for]', { hasText: 'prefix must be' }).waitFor();
      expect(await grantOptions.count()).toBe(100);
    } finally {
      await db.pool.query('DELETE FROM arkvory_principals WHERE id = $1', [heaped]);
      await db.pool.query(`DELETE FROM arkvory_principals WHERE name LIKE 'zz-%'`);
      await db.pool.query(`DELETE FROM arkvory_repositories WHERE name LIKE 'heap-%'`);
    }
    try {
      // An empty prefix is every repository again, from the first.
      await page.fill('#repository-prefix', '');
      await page.click('#repository-find button[type=submit]');
      await page.locator('#grant-form option[value="libs"]').waitFor({ state: 'attached' });
      expect(await grantOptions.count()).toBe(1);
    } finally {
      await context.close();
    }
  });

  /**
   * A page of its own, signed in, whose timers run on a clock the test moves: the 10-second refresh
   * reads nothing unless the test runs the clock. Returned once the sign-in's reads of the access
   * and ceilings views are drawn: its usage read, sent after them, has gone out.
   */
  async function clockedConsole() {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      const clocked = await context.newPage();
      clocked.setDefaultTimeout(15_000);
      await clocked.clock.install();
      await clocked.goto(`${writer.url}/console/`);
      await clocked.fill('#admin-key', adminKey);
      const usage = clocked.waitForRequest((r) => new URL(r.url()).pathname === '/console/api/stats/principals');
      await clocked.click('#sign-in-form button[type=submit]');
      await clocked.waitForSelector('#app', { state: 'visible' });
      await usage;
      return { context, clocked };
    } catch (err) {
      await context.close();
      throw err;
    }
  }

  /**
   * A principal `name` with 101 keys (ids `<keyPrefix>000…001` to `…101`) and 101 groups named
   * `<groupPrefix>001` to `…101`: one past the page of each the views show. Signed in on a page of
   * its own whose timers run on a clock the test moves, with the first page of both views drawn.
   */
  async function pastFirstPages(name: string, keyPrefix: string, groupPrefix: string) {
    const id = (
      await db.pool.query<{ id: string }>(`INSERT INTO arkvory_principals (name) VALUES ($1) RETURNING id`, [name])
    ).rows[0]!.id;
    await db.pool.query(
      `INSERT INTO arkvory_api_keys (key_id, principal_id, secret_sha256, scopes, created_at)
         SELECT $2 || lpad(i::text, 15, '0'), $1, sha256(i::text::bytea), '{read}', now() + i * interval '1 millisecond'
           FROM generate_series(1, 101) i`,
      [id, keyPrefix],
    );
    await db.pool.query(
      `INSERT INTO arkvory_principal_groups (name) SELECT $1 || lpad(i::text, 3, '0') FROM generate_series(1, 101) i`,
      [groupPrefix],
    );
    const cleanUp = async () => {
      await db.pool.query('DELETE FROM arkvory_principals WHERE id = $1', [id]);
      await db.pool.query('DELETE FROM arkvory_principal_groups WHERE starts_with(name, $1)', [groupPrefix]);
    };
    let context: BrowserContext | undefined;
    try {
      const signedIn = await clockedConsole();
      context = signedIn.context;
      // The sign-in drew the first page of both views, past which the tests read: reads they hold
      // or count from here on are theirs alone.
      await signedIn.clocked.locator(`#principal-rows button[data-more-keys="${name}"]`).waitFor();
      await signedIn.clocked.locator('#more-groups').waitFor();
      return { context, clocked: signedIn.clocked, cleanUp };
    } catch (err) {
      await context?.close();
      await cleanUp();
      throw err;
    }
  }

  it('keeps what "more" read when the 10-second refresh comes, and reads both views afresh after a change', async () => {
    const { context, clocked, cleanUp } = await pastFirstPages('stacked', 's', 'yy-');
    try {
      const row = clocked.locator('#principal-rows tr[data-principal="stacked"]');
      const lastKey = row.locator('li[data-key="s000000000000101"]');
      const lastGroup = clocked.locator('#group-rows tr[data-group="yy-101"]');
      await row.locator('button[data-more-keys="stacked"]').click();
      await lastKey.waitFor();
      await clocked.click('#more-groups');
      await lastGroup.waitFor();
      // The reads counted from here are the refresh's: the "more" answers are drawn, and the
      // sign-in's last read (usage) went out before pastFirstPages returned.
      // The refresh reads the rules, then the views, then usage: its last read ends it.
      const reads: string[] = [];
      clocked.on('request', (r) => reads.push(new URL(r.url()).pathname));
      const usage = clocked.waitForRequest((r) => r.url().includes('/console/api/stats/principals'));
      await clocked.clock.runFor(10_000);
      await (await usage).response();
      expect(reads).toContain('/console/api/rate-limits');
      expect(reads.filter((r) => r === '/console/api/access' || r === '/console/api/ceilings')).toEqual([]);
      expect([await lastKey.count(), await lastGroup.count()]).toEqual([1, 1]);
      // A change made on the page reads both afresh, from their first pages.
      await clocked.click('#principal-rows form[data-weight-for="stacked"] button[type=submit]');
      await lastKey.waitFor({ state: 'detached' });
      await lastGroup.waitFor({ state: 'detached' });
    } finally {
      await context.close();
      await cleanUp();
    }
  });

  it('keeps what "more" read while the 10-second refresh of the same view was on its way', async () => {
    const { context, clocked, cleanUp } = await pastFirstPages('crowded', 'c', 'xx-');
    try {
      // The timer's reads of each view's first page are held until the test lets them go.
      const held = new Map<string, () => void>();
      const heldSeen = new Map<string, Promise<void>>();
      for (const view of ['/console/api/access', '/console/api/ceilings']) {
        let seen!: () => void;
        heldSeen.set(view, new Promise<void>((resolve) => (seen = resolve)));
        const release = new Promise<void>((resolve) => held.set(view, resolve));
        await clocked.route(
          (url) => url.pathname === view && url.search === '',
          async (route) => {
            seen();
            await release;
            await route.continue();
          },
        );
      }
      const answered = (view: string) =>
        clocked.waitForResponse((r) => new URL(r.url()).pathname === view && new URL(r.url()).search === '');
      const row = clocked.locator('#principal-rows tr[data-principal="crowded"]');
      const lastKey = row.locator('li[data-key="c000000000000101"]');
      const lastGroup = clocked.locator('#group-rows tr[data-group="xx-101"]');
      await clocked.clock.runFor(10_000);
      // The access view's refresh is on its way; "more keys" is asked for and answered meanwhile.
      await heldSeen.get('/console/api/access');
      await row.locator('button[data-more-keys="crowded"]').click();
      await lastKey.waitFor();
      const accessAnswered = answered('/console/api/access');
      held.get('/console/api/access')!();
      await accessAnswered;
      // The ceilings view's refresh follows: the same with "more groups".
      await heldSeen.get('/console/api/ceilings');
      await clocked.click('#more-groups');
      await lastGroup.waitFor();
      // The refresh reads usage once the page has dealt with the ceilings answer: counted after
      // that, a view the held answer replaced would show.
      const usage = clocked.waitForRequest((r) => new URL(r.url()).pathname === '/console/api/stats/principals');
      held.get('/console/api/ceilings')!();
      await (await usage).response();
      expect([await lastKey.count(), await lastGroup.count()]).toEqual([1, 1]);
    } finally {
      await context.close();
      await cleanUp();
    }
  });

  it('shows usage statistics: the most downloaded, the ones not downloaded for N days, and each principal by day', async () => {
    const put = (name: string) =>
      request(`${writer.url}/api/v1/repositories/libs/artifacts/${name}`, {
        method: 'PUT',
        headers: bearer(downloader.key),
        body: randomContent(4 * KiB),
      }).then((r) => r.status);
    expect([await put('used.bin'), await put('forgotten.bin')]).toEqual([201, 201]);
    // Downloads through both gateways: the view shows their sum.
    for (const gateway of [writer, reader, reader]) {
      const res = await request(`${gateway.url}/api/v1/repositories/libs/artifacts/used.bin/content`, {
        headers: bearer(downloader.key),
      });
      expect(res.status).toBe(200);
    }
    // forgotten.bin was published 100 days ago (as far as the catalog knows) and never downloaded.
    await db.pool.query(
      `UPDATE arkvory_artifacts SET created_at = now() - interval '100 days' WHERE repository = 'libs' AND name = 'forgotten.bin'`,
    );
    await page.fill('#idle-form [name=days]', '90');
    await page.fill('#idle-form [name=repository]', 'libs');
    const used = page.locator('#top-rows tr[data-artifact="libs/used.bin"]');
    // Each "Show" reads the view again; the gateways flush every second.
    await expect
      .poll(async () => {
        await page.click('#idle-form button[type=submit]');
        return (await used.count()) === 1 ? used.locator('td').allTextContents() : [];
      }, POLL)
      .toEqual([
        'libs',
        'used.bin',
        '3',
        '12.0 KiB',
        expect.stringMatching(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/),
        'slow-downloader',
      ]);
    expect(await page.textContent('#idle-days-shown')).toBe('90');
    const idle = await page
      .locator('#idle-rows tr')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-artifact')));
    expect(idle).toEqual(['libs/forgotten.bin']);
    expect(await page.locator('#idle-rows tr td').nth(3).textContent()).toBe('0');
    expect(await page.locator('#idle-rows tr td').nth(4).textContent()).toBe('never');
    const today = new Date().toISOString().slice(0, 10);
    const day = page.locator(`#principal-day-rows tr[data-principal-day="slow-downloader ${today}"] td`);
    await day.first().waitFor();
    // The two uploads, the three downloads and the earlier tests' requests of this principal.
    expect(Number(await day.nth(2).textContent())).toBeGreaterThanOrEqual(5);
    // A bad number is refused by the API's own check, beside the form; the last good view stays.
    await page.fill('#idle-form [name=days]', 'ninety');
    await page.click('#idle-form button[type=submit]');
    await expect.poll(() => page.textContent('#idle-form [data-error-for="idle"]'), POLL).toContain('days must be');
    expect(await page.locator('#idle-rows tr').count()).toBe(1);
    await page.locator('#usage').screenshot({ path: await screenshotPath('console-usage.png') });
  });

  it('sets a group with a member and a repository ceiling through the forms, sees them listed, and removes them', async () => {
    await page.fill('#group-form [name=group]', 'crawlers');
    await page.fill('#group-form [name=downloadBytesPerSec]', '2097152');
    await page.click('#group-form button[type=submit]');
    const group = page.locator('#group-rows tr[data-group="crawlers"]');
    await group.filter({ hasText: '2.0 MiB/s' }).waitFor();
    await page.selectOption('#member-form select[name=group]', 'crawlers');
    await page.selectOption('#member-form select[name=principal]', { label: 'limited-caller' });
    await page.click('#member-form button[type=submit]');
    await group.locator('li[data-member="limited-caller"]').waitFor();
    await page.selectOption('#repository-ceiling-form select[name=repository]', 'libs');
    await page.fill('#repository-ceiling-form [name=uploadBytesPerSec]', '65536');
    await page.fill('#repository-ceiling-form [name=maxTransfers]', '16');
    await page.click('#repository-ceiling-form button[type=submit]');
    await page
      .locator('#repository-ceiling-rows tr[data-repository-ceiling="libs"]', { hasText: '65536 B/s' })
      .waitFor();
    // What the forms set is what the CLI and the gateways read.
    const rows = await db.pool.query(
      `SELECT g.download_bytes_per_second::int AS down, r.upload_bytes_per_second::int AS up, r.max_transfers
       FROM arkvory_principal_groups g, arkvory_repositories r WHERE g.name = 'crawlers' AND r.name = 'libs'`,
    );
    expect(rows.rows).toEqual([{ down: 2097152, up: 65536, max_transfers: 16 }]);

    await page.screenshot({ path: await screenshotPath('console-ceilings.png'), fullPage: true });

    // Past a page: 101 more members and 100 more groups are read on "more members" and "more groups".
    // The members sort after limited-caller (a group lists them by name): a refresh coming between the
    // inserts and the click below still shows limited-caller on the first page.
    await db.pool.query(
      `INSERT INTO arkvory_principals (name) SELECT 'm-crowd-' || lpad(i::text, 3, '0') FROM generate_series(1, 101) i`,
    );
    await db.pool.query(
      `INSERT INTO arkvory_principal_group_members (group_name, principal_id)
         SELECT 'crawlers', id FROM arkvory_principals WHERE name LIKE 'm-crowd-%'`,
    );
    await db.pool.query(
      `INSERT INTO arkvory_principal_groups (name) SELECT 'zz-' || lpad(i::text, 3, '0') FROM generate_series(1, 100) i`,
    );
    try {
      await group.locator('li[data-member="limited-caller"] button').click(); // the view is read again after it
      await group.locator('li[data-member="m-crowd-100"]').waitFor();
      expect(await group.locator('li[data-member="m-crowd-101"]').count()).toBe(0);
      await group.locator('button[data-more-members="crawlers"]').click();
      await group.locator('li[data-member="m-crowd-101"]').waitFor();
      await group.locator('button[data-more-members]').waitFor({ state: 'detached' });
      expect(await page.locator('#group-rows tr[data-group="zz-100"]').count()).toBe(0);
      await page.click('#more-groups');
      await page.locator('#group-rows tr[data-group="zz-100"]').waitFor();
      expect(await page.isHidden('#more-groups')).toBe(true);
    } finally {
      await db.pool.query(`DELETE FROM arkvory_principal_groups WHERE name LIKE 'zz-%'`);
      await db.pool.query(`DELETE FROM arkvory_principals WHERE name LIKE 'm-crowd-%'`);
    }
    await page.click('#member-form button[type=submit]'); // limited-caller again: the view is read again
    await group.locator('li[data-member="limited-caller"]').waitFor();
    await group.locator('li[data-member="limited-caller"] button').click();
    await group.filter({ hasText: 'no members' }).waitFor();
    page.once('dialog', (d) => void d.accept());
    await page.click('#group-rows button[data-delete-group="crawlers"]');
    await group.waitFor({ state: 'detached' });
    await page.fill('#repository-ceiling-form [name=uploadBytesPerSec]', '0');
    await page.fill('#repository-ceiling-form [name=maxTransfers]', '0');
    await page.click('#repository-ceiling-form button[type=submit]');
    await page.locator('#repository-ceiling-rows tr[data-repository-ceiling="libs"]').waitFor({ state: 'detached' });
  });

  it('stays signed in and says so when the sign-out request fails: the session is still open', async () => {
    // The connection drops on the way: the gateway never deletes the session.
    await page.route('**/console/api/session', (route) =>
      route.request().method() === 'DELETE' ? route.abort('connectionreset') : route.continue(),
    );
    try {
      await page.click('#sign-out');
      await expect.poll(() => page.textContent('#sign-out-error'), POLL).toContain('still open');
      expect(await page.isVisible('#app')).toBe(true);
      // Which is the truth: a reload (anyone's at this browser) is signed in again.
      await page.reload();
      await page.waitForSelector('#app', { state: 'visible' });
      expect(await page.textContent('#sign-out-error')).toBe('');
    } finally {
      await page.unroute('**/console/api/session');
    }
  });

  it('signs out, and a reload then asks for the key again', async () => {
    await page.click('#sign-out');
    await page.waitForSelector('#sign-in', { state: 'visible' });
    await page.reload();
    await page.waitForSelector('#sign-in', { state: 'visible' });
    expect(await page.isHidden('#app')).toBe(true);
  });

  it('refuses a mistyped key on the page itself, never through the browser own login prompt', async () => {
    const fresh = await browser.newPage();
    try {
      // Chromium raises Fetch.authRequired exactly where a headed browser opens its login prompt.
      const cdp = await fresh.context().newCDPSession(fresh);
      const prompts: string[] = [];
      cdp.on('Fetch.requestPaused', (e) => void cdp.send('Fetch.continueRequest', { requestId: e.requestId }));
      cdp.on('Fetch.authRequired', (e) => {
        prompts.push(`${e.request.url} ${e.authChallenge.scheme}`);
        void cdp.send('Fetch.continueWithAuth', {
          requestId: e.requestId,
          authChallengeResponse: { response: 'CancelAuth' },
        });
      });
      await cdp.send('Fetch.enable', { handleAuthRequests: true, patterns: [{ urlPattern: '*' }] });
      await fresh.goto(`${writer.url}/console/`);
      await fresh.fill('#admin-key', `${adminKey}x`);
      await fresh.click('#sign-in-form button[type=submit]');
      await expect.poll(() => fresh.textContent('#sign-in-error'), POLL).not.toBe('');
      expect(prompts).toEqual([]);
      expect(await fresh.isHidden('#app')).toBe(true);
    } finally {
      await fresh.close();
    }
  });
});

describe('a key pasted with something no header can carry', () => {
  it('is refused on the page with its reason, before any request', async () => {
    const fresh = await browser.newPage();
    try {
      const sent: string[] = [];
      fresh.on('request', (r) =>
        r.url().endsWith('/console/session') && r.method() === 'POST' ? sent.push(r.url()) : undefined,
      );
      await fresh.goto(`${writer.url}/console/`);
      for (const pasted of [`${adminKey}\u200b`, `${adminKey.slice(0, 20)} ${adminKey.slice(20)}`]) {
        await fresh.fill('#admin-key', pasted);
        await fresh.click('#sign-in-form button[type=submit]');
        await expect.poll(() => fresh.textContent('#sign-in-error'), POLL).toMatch(/non-ASCII character/);
        // Emptied by the page's sign-in, so this attempt (not the one before) said it.
        expect(await fresh.inputValue('#admin-key')).toBe('');
      }
      expect(sent).toEqual([]);
      expect(await fresh.isHidden('#app')).toBe(true);
    } finally {
      await fresh.close();
    }
  });
});

async function screenshotPath(name: string): Promise<string> {
  await mkdir(SCREENSHOTS, { recursive: true });
  return path.join(SCREENSHOTS, name);
}
