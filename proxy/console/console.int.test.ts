/**
 * The console's HTTP contract against a real writer and reader (no browser): sign-in only with an
 * admin key, the session cookie's attributes, CSRF refusal of every state change without the
 * session's token, strict security headers, sign-out, revocation of the signing key ending the
 * session, structured rule problems, and the reader's pointer to the writer.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { request, type RawResponse } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { freeLoopbackPort, type SharedProfile, sharedProfileEnv } from '../../test/harness/index.ts';

/** Counters and rule documents under a prefix of this file, removed afterwards. */
const redis = useTestRedis();
let db: TestDatabase & { drop(): Promise<void> };
let writer: GatewayProcess;
let reader: GatewayProcess;
let adminKey: string;
let userKey: string;

/** The shared profile's settings, known once the database is made. */
let profile: SharedProfile;
const sharedEnv = (role: 'api' | 'reader', slot: number, port: number) =>
  sharedProfileEnv({ ...profile, role, slot, port });

const json = (res: RawResponse) => JSON.parse(res.body.toString()) as Record<string, any>;

/** Signs in with `key`; returns the cookie pair and the CSRF token. */
async function signIn(key: string): Promise<{ cookie: string; csrf: string; res: RawResponse }> {
  const res = await request(`${writer.url}/console/session`, { method: 'POST', headers: bearer(key) });
  const setCookie = res.headers['set-cookie']?.[0] ?? '';
  return { cookie: setCookie.split(';')[0]!, csrf: res.status === 201 ? String(json(res).csrfToken) : '', res };
}

function call(
  method: string,
  path: string,
  options: { cookie?: string; csrf?: string; body?: object } = {},
): Promise<RawResponse> {
  const headers: Record<string, string> = {};
  if (options.cookie) headers.cookie = options.cookie;
  if (options.csrf !== undefined) headers['x-csrf-token'] = options.csrf;
  if (options.body) headers['content-type'] = 'application/json';
  return request(`${writer.url}${path}`, {
    method,
    headers,
    ...(options.body ? { body: Buffer.from(JSON.stringify(options.body)) } : {}),
  });
}

beforeAll(async () => {
  db = await createTestDatabase();
  profile = { databaseUrl: db.url, redis, slots: 2, downloadBytesPerSecond: 2 * 1024 * 1024 };
  ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'console-admin', scopes: ['admin'] }));
  ({ key: userKey } = await createServiceAccount(db.pool, { name: 'console-user', scopes: ['read', 'write'] }));
  const [writerPort, readerPort] = [await freeLoopbackPort(), await freeLoopbackPort()];
  writer = await startGateway({ env: sharedEnv('api', 0, writerPort) });
  reader = await startGateway({ env: sharedEnv('reader', 1, readerPort) });
});

afterAll(async () => {
  await Promise.all([writer, reader].filter(Boolean).map((g) => g.stop('SIGTERM')));
  await db?.drop();
});

describe('the console page', () => {
  it('serves the page and its assets with a strict CSP and no inline script', async () => {
    const page = await request(`${writer.url}/console/`);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    const csp = String(page.headers['content-security-policy']);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(page.headers['x-frame-options']).toBe('DENY');
    expect(page.headers['x-content-type-options']).toBe('nosniff');
    // Every script is an external file of this origin; no inline handler or script body.
    const html = page.body.toString();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/\son[a-z]+=/i);
    expect(html).not.toMatch(/style=/);
    // The key field has no name: a form submitted before the script took it over (or where a browser
    // does not enforce form-action) sends no field without one, so the key can never land in a URL.
    expect(html).toMatch(/<input[^>]*\bid="admin-key"/);
    expect(html).not.toMatch(/<input(?=[^>]*\bid="admin-key")[^>]*\bname=/);
    const js = await request(`${writer.url}/console/static/console.js`);
    expect(js.status).toBe(200);
    expect(js.headers['content-type']).toMatch(/^text\/javascript/);
    expect(js.body.toString()).not.toMatch(
      /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|localStorage|sessionStorage/,
    );
    expect((await request(`${writer.url}/console/static/nope.js`)).status).toBe(404);
    expect((await request(`${writer.url}/console/static/index.html`)).status).toBe(404);
    const bare = await request(`${writer.url}/console`);
    expect(bare.status).toBe(308);
    expect(bare.headers.location).toBe('/console/');
  });

  it('puts its security headers on every console answer, refusals and unknown paths included', async () => {
    // A browser renders these as well as the page: none may be framed or sniffed, whoever answers.
    const { cookie } = await signIn(adminKey);
    const answers = {
      'no session (the auth gate)': await call('GET', '/console/api/status'),
      'no CSRF token': await call('POST', '/console/api/principals', { cookie, body: { name: 'never-made' } }),
      'another site': await request(`${writer.url}/console/session`, {
        method: 'POST',
        headers: { ...bearer(adminKey), 'sec-fetch-site': 'cross-site' },
      }),
      'an unknown console path': await call('GET', '/console/api/nope', { cookie }),
      'a method the page does not take': await call('PUT', '/console/'),
      "the reader's pointer": await request(`${reader.url}/console/`),
    };
    for (const [what, res] of Object.entries(answers)) {
      expect(res.status, what).toBeGreaterThanOrEqual(400);
      expect(res.headers['content-security-policy'], what).toContain("frame-ancestors 'none'");
      expect(res.headers['x-frame-options'], what).toBe('DENY');
      expect(res.headers['referrer-policy'], what).toBe('no-referrer');
      expect(res.headers['x-content-type-options'], what).toBe('nosniff');
    }
  });

  it('on a reader answers 404 pointing to the writer', async () => {
    const res = await request(`${reader.url}/console/`);
    expect(res.status).toBe(404);
    expect(json(res)).toMatchObject({ code: 'not_found', message: expect.stringContaining('writer') });
    expect((await request(`${reader.url}/console/session`, { method: 'POST', headers: bearer(adminKey) })).status).toBe(
      405,
    );
  });
});

describe('through the router', () => {
  it('reaches the writer for the page, the sign-in and the session API, cookie and CSRF header included', async () => {
    const router = await startGateway({
      env: { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: `${writer.url},${reader.url}` },
      waitFor: 'listening',
    });
    const page = await request(`${router.url}/console/`);
    expect(page.status).toBe(200);
    const signIn = await request(`${router.url}/console/session`, { method: 'POST', headers: bearer(adminKey) });
    expect(signIn.status).toBe(201);
    const cookie = signIn.headers['set-cookie']![0]!.split(';')[0]!;
    const csrf = String(json(signIn).csrfToken);
    const status = await request(`${router.url}/console/api/status`, { headers: { cookie } });
    expect(status.status).toBe(200);
    expect(json(status).gateway.role).toBe('api');
    // The live transfers are bounded (the oldest 100), the others counted: none here.
    expect(json(status).transfers).toMatchObject({ live: [], liveNotShown: 0 });
    const out = await request(`${router.url}/console/api/session`, {
      method: 'DELETE',
      headers: { cookie, 'x-csrf-token': csrf },
    });
    expect(out.status).toBe(204);
  });
});

describe('sign-in and session', () => {
  it('needs an admin key; sets an HttpOnly, SameSite=Strict cookie under /console and returns the CSRF token', async () => {
    const refused = (await signIn('ark_0000000000000000_nope')).res;
    expect(refused.status).toBe(401);
    // The page's own answer to a mistyped key: a Basic challenge would open the browser's prompt over it.
    expect(refused.headers['www-authenticate']).toBe('Bearer realm="arkvory"');
    expect((await signIn(userKey)).res.status).toBe(403);
    const { res, csrf } = await signIn(adminKey);
    expect(res.status).toBe(201);
    const cookie = res.headers['set-cookie']![0]!;
    expect(cookie).toMatch(/^arkvory_console=[A-Za-z0-9_-]{40,}; /);
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/console');
    // Kept in the browser's memory only: closing it signs out.
    expect(cookie).not.toMatch(/max-age|expires/i);
    expect(csrf).toMatch(/^[A-Za-z0-9_-]{40,}$/);
    expect(json(res)).toMatchObject({ signedIn: true, principal: { name: 'console-admin' } });
    expect(res.body.toString()).not.toContain(adminKey);
  });

  it('resumes after a reload through the cookie, and answers signedIn false without one', async () => {
    const { cookie, csrf } = await signIn(adminKey);
    expect(json(await call('GET', '/console/session', { cookie }))).toMatchObject({ signedIn: true, csrfToken: csrf });
    expect(json(await call('GET', '/console/session'))).toEqual({ signedIn: false });
    expect(
      json(await call('GET', '/console/session', { cookie: 'arkvory_console=forged0000000000000000000000' })),
    ).toEqual({ signedIn: false });
    // In clear only the plain name is read: a browser never sends a __Host- cookie over plain HTTP.
    const id = cookie.slice(cookie.indexOf('=') + 1);
    expect(json(await call('GET', '/console/session', { cookie: `__Host-arkvory_console=${id}` }))).toEqual({
      signedIn: false,
    });
  });

  it('a sign-in ends the session whose cookie it carried: the browser keeps only the new one', async () => {
    const before = await signIn(adminKey);
    const again = await request(`${writer.url}/console/session`, {
      method: 'POST',
      headers: { ...bearer(adminKey), cookie: before.cookie },
    });
    expect(again.status).toBe(201);
    const cookie = again.headers['set-cookie']![0]!.split(';')[0]!;
    expect(cookie).not.toBe(before.cookie);
    expect((await call('GET', '/console/api/status', { cookie })).status).toBe(200);
    // A copy of the replaced id (taken over plain HTTP, say) is signed out with it.
    expect((await call('GET', '/console/api/status', { cookie: before.cookie })).status).toBe(401);
    expect(json(await call('GET', '/console/session', { cookie: before.cookie }))).toEqual({ signedIn: false });
  });

  it('counts each mistyped key in the auth_failure limiter: guessing keys at the sign-in gets the address banned', async () => {
    // Its own writer (and database), behind which the test names the guesser's address: the ban
    // must not hit this file's other requests.
    const own = await createTestDatabase();
    const admin = await createServiceAccount(own.pool, { name: 'guessed-admin', scopes: ['admin'] });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: own.url, ARKVORY_TRUSTED_PROXIES: '127.0.0.1' } });
    onTestFinished(async () => {
      await gw.stop();
      await own.drop();
    });
    const from = (ip: string, key: string) =>
      request(`${gw.url}/console/session`, { method: 'POST', headers: { ...bearer(key), 'x-forwarded-for': ip } });
    let status = 401;
    let guesses = 0;
    while (status === 401 && guesses < 40)
      status = (await from('192.0.2.66', `ark_0000000000000000_guess${guesses++}`)).status;
    expect(status).toBe(429);
    // The shipped rule: 20 failures in a minute.
    expect(guesses).toBeLessThanOrEqual(22);
    // Banned: even the right key is refused from there, before it is looked at; not from elsewhere.
    expect((await from('192.0.2.66', admin.key)).status).toBe(429);
    expect((await from('192.0.2.67', admin.key)).status).toBe(201);
  });

  it('refuses every console API call without a live session', async () => {
    const res = await call('GET', '/console/api/status');
    expect(res.status).toBe(401);
    // An API key alone does not open the console API: it needs the session.
    expect((await request(`${writer.url}/console/api/status`, { headers: bearer(adminKey) })).status).toBe(401);
  });

  it('signs out: the session no longer works', async () => {
    const { cookie, csrf } = await signIn(adminKey);
    expect((await call('GET', '/console/api/status', { cookie })).status).toBe(200);
    const out = await call('DELETE', '/console/api/session', { cookie, csrf });
    expect(out.status).toBe(204);
    expect(out.headers['set-cookie']![0]).toContain('Max-Age=0');
    expect((await call('GET', '/console/api/status', { cookie })).status).toBe(401);
  });

  it('ends when the key it was opened with is revoked', async () => {
    const extra = await createServiceAccount(db.pool, { name: 'console-admin-2', scopes: ['admin'] });
    const { cookie } = await signIn(extra.key);
    expect((await call('GET', '/console/api/access', { cookie })).status).toBe(200);
    const admin = await signIn(adminKey);
    expect(
      (await call('POST', `/console/api/keys/${extra.keyId}/revoke`, { cookie: admin.cookie, csrf: admin.csrf }))
        .status,
    ).toBe(200);
    // The authenticator's revocation bound is 2 s on every gateway.
    const deadline = Date.now() + 3000;
    let status = 200;
    while (Date.now() < deadline && status === 200) {
      status = (await call('GET', '/console/api/access', { cookie })).status;
      if (status === 200) await new Promise((r) => setTimeout(r, 100));
    }
    expect(status).toBe(401);
    // The page's own sign-in, never the browser's Basic prompt over it.
    expect((await call('GET', '/console/api/access', { cookie })).headers['www-authenticate']).toBe(
      'Bearer realm="arkvory"',
    );
    expect(json(await call('GET', '/console/session', { cookie }))).toEqual({ signedIn: false });
  });

  it('stays ended when its principal is disabled and enabled again (the key works, the old session not)', async () => {
    const extra = await createServiceAccount(db.pool, { name: 'console-admin-3', scopes: ['admin'] });
    const old = await signIn(extra.key);
    expect((await call('GET', '/console/api/status', { cookie: old.cookie })).status).toBe(200);
    const admin = await signIn(adminKey);
    const toggle = (verb: 'disable' | 'enable') =>
      request(`${writer.url}/api/v1/admin/principals/console-admin-3/${verb}`, {
        method: 'POST',
        headers: bearer(adminKey),
      });
    expect((await toggle('disable')).status).toBe(200);
    // Disabled: the session ends within the 2 s revocation bound.
    let deadline = Date.now() + 3000;
    while (Date.now() < deadline && (await call('GET', '/console/api/status', { cookie: old.cookie })).status === 200)
      await new Promise((r) => setTimeout(r, 100));
    expect((await call('GET', '/console/api/status', { cookie: old.cookie })).status).toBe(401);
    expect((await toggle('enable')).status).toBe(200);
    // The key is live again within the same bound...
    deadline = Date.now() + 3000;
    let fresh = await signIn(extra.key);
    while (Date.now() < deadline && fresh.res.status !== 201) {
      await new Promise((r) => setTimeout(r, 100));
      fresh = await signIn(extra.key);
    }
    expect(fresh.res.status).toBe(201);
    expect((await call('GET', '/console/api/status', { cookie: fresh.cookie })).status).toBe(200);
    // ...but the session opened before the disable is not revived, on the API or on resume.
    expect((await call('GET', '/console/api/status', { cookie: old.cookie })).status).toBe(401);
    expect(json(await call('GET', '/console/session', { cookie: old.cookie }))).toEqual({ signedIn: false });
    expect((await call('GET', '/console/api/status', { cookie: admin.cookie })).status).toBe(200);
  });
});

describe('a console session and the clocks', () => {
  it("stays ended after a disable the database stamped earlier than the gateway's clock read at sign-in", async () => {
    const extra = await createServiceAccount(db.pool, { name: 'console-admin-skew', scopes: ['admin'] });
    const old = await signIn(extra.key);
    expect((await call('GET', '/console/api/status', { cookie: old.cookie })).status).toBe(200);
    const keyStatus = async () =>
      (await request(`${writer.url}/api/v1/repositories`, { headers: bearer(extra.key) })).status;
    const until = async (status: number) => {
      const deadline = Date.now() + 3000;
      while (Date.now() < deadline && (await keyStatus()) !== status) await new Promise((r) => setTimeout(r, 100));
      expect(await keyStatus()).toBe(status);
    };
    const toggle = (verb: 'disable' | 'enable') =>
      request(`${writer.url}/api/v1/admin/principals/console-admin-skew/${verb}`, {
        method: 'POST',
        headers: bearer(adminKey),
      });
    // The session is not used while its principal is disabled: only its key is.
    expect((await toggle('disable')).status).toBe(200);
    await until(401);
    // What a database clock 30 s behind the gateway's would have stamped (or a gateway 30 s ahead):
    // the disable came after the sign-in, but is dated before the gateway's time of it.
    await db.pool.query(
      "UPDATE arkvory_principals SET disabled_at = disabled_at - interval '30 seconds' WHERE name = 'console-admin-skew'",
    );
    expect((await toggle('enable')).status).toBe(200);
    await until(200);
    expect((await call('GET', '/console/api/status', { cookie: old.cookie })).status).toBe(401);
    expect(json(await call('GET', '/console/session', { cookie: old.cookie }))).toEqual({ signedIn: false });
  });
});

describe('CSRF', () => {
  it('refuses a state-changing request without the session CSRF token, and with a wrong one', async () => {
    const { cookie, csrf } = await signIn(adminKey);
    const rule = {
      rate_limits: { gateway_request: [{ name: 'csrf_probe', action: 'log', limit: 1000, period_s: 60 }] },
    };
    const missing = await call('PUT', '/console/api/rate-limits', { cookie, body: rule });
    expect(missing.status).toBe(403);
    expect(json(missing)).toMatchObject({ code: 'forbidden', message: expect.stringContaining('X-CSRF-Token') });
    const wrong = await call('PUT', '/console/api/rate-limits', {
      cookie,
      csrf: `${csrf.slice(0, -1)}${csrf.endsWith('A') ? 'B' : 'A'}`,
      body: rule,
    });
    expect(wrong.status).toBe(403);
    for (const [method, path, body] of [
      ['POST', '/console/api/principals', { name: 'csrf-victim' }],
      ['POST', '/console/api/principals/console-user/keys', { scopes: ['read'] }],
      ['PUT', '/console/api/grants/console-user/any', { permission: 'read' }],
      ['DELETE', '/console/api/rate-limits/gateway_request/rules/csrf_probe', undefined],
      ['DELETE', '/console/api/session', undefined],
    ] as const) {
      const res = await call(method, path, { cookie, ...(body ? { body } : {}) });
      expect(res.status, `${method} ${path}`).toBe(403);
    }
    // Nothing happened: the rule was never published, the principal never created, the session lives.
    const rules = json(await call('GET', '/console/api/rate-limits', { cookie }));
    const published = rules.limiters.find((l: { limiter: string }) => l.limiter === 'gateway_request').tiers
      .published_rules;
    expect(published.map((a: { rule: { name: string } }) => a.rule.name)).not.toContain('csrf_probe');
    const access = json(await call('GET', '/console/api/access', { cookie }));
    expect(access.principals.map((p: { name: string }) => p.name)).not.toContain('csrf-victim');
    // The same request with the token is accepted.
    const ok = await call('PUT', '/console/api/rate-limits', { cookie, csrf, body: rule });
    expect(ok.status).toBe(200);
    expect(
      (await call('DELETE', '/console/api/rate-limits/gateway_request/rules/csrf_probe', { cookie, csrf })).status,
    ).toBe(204);
  });
});

describe('console API', () => {
  it('shows both gateways with their leases, and this writer as itself', async () => {
    const { cookie } = await signIn(adminKey);
    const status = json(await call('GET', '/console/api/status', { cookie }));
    expect(status.gateway).toMatchObject({ role: 'api', profile: 'shared', slot: 0, slots: 2, state: 'serving' });
    expect(status.slots).toHaveLength(2);
    expect(status.slots[0]).toMatchObject({
      slot: 0,
      role: 'api',
      self: true,
      live: true,
      health: 'serving',
      advertiseUrl: writer.url,
    });
    expect(status.slots[1]).toMatchObject({
      slot: 1,
      role: 'reader',
      self: false,
      live: true,
      health: 'serving',
      advertiseUrl: reader.url,
    });
    expect(status.slots[1].leaseAgeSeconds).toBeLessThan(8);
    expect(status.bandwidth.ceilings.download.bytesPerSecond).toBe(1024 * 1024);
    expect(status.bandwidth.ceilings.sharedDownloadBytesPerSecond).toBe(2 * 1024 * 1024);
    expect(status.rateLimits.blocks).toHaveProperty('gateway_request');
  });

  it('returns every problem of a bad rule with its key path, and publishes nothing', async () => {
    const { cookie, csrf } = await signIn(adminKey);
    const res = await call('PUT', '/console/api/rate-limits', {
      cookie,
      csrf,
      body: {
        rate_limits: {
          gateway_request: [
            { name: 'Bad Name', action: 'limit', limit: 'ten', period_s: 60, characteristics: ['nope'] },
          ],
        },
      },
    });
    expect(res.status).toBe(400);
    const body = json(res);
    expect(body.code).toBe('invalid_request');
    const fields = body.problems.map((p: { path: unknown[] }) => p.path[3]);
    expect(fields).toEqual(expect.arrayContaining(['name', 'limit', 'characteristics']));
    expect(body.problems.find((p: { path: unknown[] }) => p.path[3] === 'limit').message).toMatch(
      /limit must be an integer/,
    );
  });

  it('refuses a bypass (skip) rule from an admin not in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS and says why (spec 2.1)', async () => {
    const { cookie, csrf } = await signIn(adminKey);
    const res = await call('PUT', '/console/api/rate-limits', {
      cookie,
      csrf,
      body: {
        rate_limits: { gateway_request: [{ name: 'console_bypass', action: 'skip', match: { request_type: 'read' } }] },
      },
    });
    expect(res.status).toBe(403);
    const body = json(res);
    expect(body.code).toBe('forbidden');
    expect(body.message).toContain('rule "console_bypass"');
    expect(body.message).toContain('ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS');
  });
});
