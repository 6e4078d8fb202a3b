/**
 * Hostile admin input over real sockets: published rule documents are bounded (rules per limiter,
 * regexes and their cost, document size) with 400 `rules_too_large`; republishing a default rule
 * weaker (the shipped ban as `log`) is a bypass, refused with 403 unless the publisher may add
 * bypasses; numeric admin input out of range answers 400, never 500.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { CURSORS, encodeCursor } from '../../policy/auth/page.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';

const db = useTestDatabase();
let admin: { key: string; name: string; keyId: string; principalId: string };
let operator: { key: string; name: string; keyId: string };
let gw: GatewayProcess;

beforeAll(async () => {
  admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
  operator = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
  gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: operator.name },
  });
}, 60_000);

async function call(method: string, path: string, body?: unknown, key = admin.key) {
  const res = await fetch(`${gw.url}${path}`, {
    method,
    headers: { ...bearer(key), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
}

const publish = (rateLimits: Record<string, unknown>, key = admin.key) =>
  call('PUT', '/api/v1/admin/rate-limits', { rate_limits: rateLimits }, key);

const everything = (name: string, match?: Record<string, unknown>) => ({
  name,
  action: 'log',
  characteristics: ['ip'],
  limit: 1_000_000,
  period_s: 60,
  ...(match ? { match } : {}),
});

async function publishedCount(limiter: string): Promise<number> {
  const view = await call('GET', `/api/v1/admin/rate-limits/${limiter}`);
  return (view.body.effective as Array<{ tier: string }>).filter((r) => r.tier === 'published_rules').length;
}

describe('bounds on published rule documents', () => {
  it('refuses a batch of 3,000 match-everything rules whole with 400 rules_too_large', async () => {
    const batch = Array.from({ length: 3000 }, (_, i) => everything(`flood_${i}`));
    const res = await publish({ gateway_request: batch });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('rules_too_large');
    expect(res.body.message).toMatch(/3000 published rules; at most 100/);
    expect(await publishedCount('gateway_request')).toBe(0);
  });

  it('counts what was published before: 60 then 41 more is refused, 60 then 40 is accepted', async () => {
    const first = Array.from({ length: 60 }, (_, i) => everything(`first_${i}`));
    expect((await publish({ transfer_bytes: first })).status).toBe(200);
    const more = (n: number) => Array.from({ length: n }, (_, i) => everything(`more_${i}`));
    const over = await publish({ transfer_bytes: more(41) });
    expect(over.status).toBe(400);
    expect(over.body.code).toBe('rules_too_large');
    expect(await publishedCount('transfer_bytes')).toBe(60);
    expect((await publish({ transfer_bytes: more(40) })).status).toBe(200);
    expect(await publishedCount('transfer_bytes')).toBe(100);
  });

  it('refuses more than 32 regexes, and regexes too costly together', async () => {
    const many = Array.from({ length: 33 }, (_, i) => everything(`re_${i}`, { route: { regex: `^/api/v${i}` } }));
    const res = await publish({ gateway_request: many });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'rules_too_large' });
    expect(res.body.message).toMatch(/33 published regexes; at most 32/);
    const costly = Array.from({ length: 11 }, (_, i) =>
      everything(`costly_${i}`, { route: { regex: `[a-z]{1,100}[0-9]{1,100}${i}` } }),
    );
    const cost = await publish({ gateway_request: costly });
    expect(cost.status).toBe(400);
    expect(cost.body.message).toMatch(/instructions together; at most 4000/);
  });
});

describe('the bypass guardrail covers weakened default rules', () => {
  const shippedBan = {
    name: 'ban_ip_after_auth_failures',
    action: 'limit',
    characteristics: ['ip'],
    limit: 20,
    period_s: 60,
    ban_for_s: 900,
  };

  it('refuses republishing the shipped ban as log with 403, naming the rule; the ban stays', async () => {
    const res = await publish({ auth_failure: [{ ...shippedBan, action: 'log' }] });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('forbidden');
    expect(res.body.message).toMatch(/"ban_ip_after_auth_failures" in auth_failure weakens the default rule/);
    expect(res.body.message).toMatch(/turns action limit into log/);
    const raised = await publish({ auth_failure: [{ ...shippedBan, limit: 1_000_000 }] });
    expect(raised.status).toBe(403);
    expect(raised.body.message).toMatch(/raises limit from 20 to 1000000/);
    const view = await call('GET', '/api/v1/admin/rate-limits/auth_failure');
    expect(view.body.effective).toEqual([
      expect.objectContaining({ tier: 'default_rules', spec: expect.objectContaining({ action: 'limit' }) }),
    ]);
  });

  it('lets any admin make a default stricter, and a bypass publisher weaken it', async () => {
    expect((await publish({ auth_failure: [{ ...shippedBan, limit: 10 }] })).status).toBe(200);
    expect((await publish({ auth_failure: [{ ...shippedBan, action: 'log' }] }, operator.key)).status).toBe(200);
    expect(
      (await call('DELETE', '/api/v1/admin/rate-limits/auth_failure/rules/ban_ip_after_auth_failures')).status,
    ).toBe(204);
  });
});

describe('the bypass publishers get names, keys and certificates from the CLI only', () => {
  it('an admin key cannot create a publisher by name, mint or rotate its keys, or bind it a certificate: 403', async () => {
    const publisher = await createServiceAccount(db.pool, { name: 'ops-bypass-probe', scopes: ['read', 'admin'] });
    const attempts = [
      await call('POST', '/api/v1/admin/principals', { name: operator.name }),
      await call('POST', `/api/v1/admin/principals/${operator.name}/keys`, { scopes: ['read', 'admin'] }),
      await call('POST', `/api/v1/admin/principals/${operator.name}/certificates`, { san: 'URI:spiffe://x/ops' }),
      await call('POST', `/api/v1/admin/keys/${operator.keyId}/rotate`, {}),
    ];
    for (const attempt of attempts) {
      expect(attempt.status).toBe(403);
      expect(attempt.body.message).toMatch(/ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS/);
    }
    // Another admin principal is managed as before.
    expect((await call('POST', `/api/v1/admin/principals/${publisher.name}/keys`, { scopes: ['read'] })).status).toBe(
      201,
    );
  });
});

describe('principal names and key rotation', () => {
  it('refuses a principal name shaped like a principal id (a reference to one is read as an id first)', async () => {
    const res = await call('POST', '/api/v1/admin/principals', { name: admin.principalId });
    expect(res.status).toBe(400);
    expect(res.body.message).toMatch(/shape of a principal id/);
  });

  it('a principal cannot disable itself over HTTP (409), and keeps working', async () => {
    const res = await call('POST', `/api/v1/admin/principals/${admin.principalId}/disable`);
    expect(res.status).toBe(409);
    expect(res.body.message).toMatch(/cannot disable itself/);
    expect((await call('POST', `/api/v1/admin/principals/${admin.name}/disable`)).status).toBe(409);
    expect((await call('GET', '/api/v1/admin/principals')).status).toBe(200);
  });

  it('a rotated key keeps the expiry of the key it replaces; an expired key is not rotated', async () => {
    const made = await call('POST', `/api/v1/admin/principals/${admin.principalId}/keys`, {
      scopes: ['read'],
      expiresInSeconds: 3600,
    });
    expect(made.status).toBe(201);
    const rotated = await call('POST', `/api/v1/admin/keys/${String(made.body.keyId)}/rotate`, {});
    expect(rotated.status).toBe(201);
    expect(rotated.body.expiresAt).not.toBeNull();
    expect(Math.abs(Date.parse(String(rotated.body.expiresAt)) - Date.parse(String(made.body.expiresAt)))).toBeLessThan(
      5000,
    );
    await db.pool.query("UPDATE arkvory_api_keys SET expires_at = now() - interval '1 day' WHERE key_id = $1", [
      made.body.keyId,
    ]);
    const expired = await call('POST', `/api/v1/admin/keys/${String(made.body.keyId)}/rotate`, {});
    expect(expired.status).toBe(409);
    expect(expired.body.message).toMatch(/has expired/);
  });

  it('a whole key where its id belongs (revoking a leaked key by pasting it) is 404 and echoed nowhere', async () => {
    const leaked = await createServiceAccount(db.pool, { scopes: ['read'] });
    const secret = leaked.key.slice(`ark_${leaked.keyId}_`.length);
    for (const action of ['revoke', 'rotate']) {
      const res = await call(
        'POST',
        `/api/v1/admin/keys/${leaked.key}/${action}`,
        action === 'rotate' ? {} : undefined,
      );
      expect(res.status).toBe(404);
      expect(res.body.message).toMatch(/key id/);
      expect(JSON.stringify(res.body)).not.toContain(secret);
    }
    // The 404s' info lines are written once the answers are.
    await expect.poll(() => gw.logLines().filter((l) => l.code === 'not_found').length).toBeGreaterThanOrEqual(2);
    expect(gw.logs()).not.toContain(secret);
    // The key still works: nothing was revoked.
    expect((await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(leaked.key) })).status).not.toBe(401);
  });

  it('a whole key where a principal belongs (disabling a leaked key’s owner by pasting it) is 404 and echoed nowhere', async () => {
    const leaked = await createServiceAccount(db.pool, { scopes: ['read'] });
    const secret = leaked.key.slice(`ark_${leaked.keyId}_`.length);
    const before = gw.logLines().filter((l) => l.code === 'not_found').length;
    const attempts: Array<[string, string, unknown?]> = [
      ['GET', `/api/v1/admin/principals/${leaked.key}`],
      ['POST', `/api/v1/admin/principals/${leaked.key}/disable`],
      ['GET', `/api/v1/admin/principals/${leaked.key}/keys`],
      ['POST', `/api/v1/admin/principals/${leaked.key}/keys`, { scopes: ['read'] }],
      ['GET', `/api/v1/admin/grants?principal=${leaked.key}`],
      ['GET', `/api/v1/admin/quotas/principals/${leaked.key}`],
      ['PUT', `/api/v1/admin/quotas/principals/${leaked.key}`, { limitBytes: 1024 }],
    ];
    for (const [method, path, body] of attempts) {
      const res = await call(method, path, body);
      expect(res.status).toBe(404);
      expect(JSON.stringify(res.body)).not.toContain(secret);
    }
    await expect
      .poll(() => gw.logLines().filter((l) => l.code === 'not_found').length)
      .toBeGreaterThanOrEqual(before + attempts.length);
    expect(gw.logs()).not.toContain(secret);
    expect((await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(leaked.key) })).status).not.toBe(401);
  });

  it('nor a key pasted with a blank, a newline, a scheme or a character too many or too few around it', async () => {
    const leaked = await createServiceAccount(db.pool, { scopes: ['read'] });
    const secret = leaked.key.slice(`ark_${leaked.keyId}_`.length);
    // What a paste brings along; the last one lacks the secret's last character, 4 bits of 256.
    const pasted = [
      `${leaked.key}%20`,
      `%20${leaked.key}`,
      `${leaked.key}%0A`,
      `Bearer%20${leaked.key}`,
      `${leaked.key}x`,
      leaked.key.slice(0, -1),
    ];
    const before = gw.logLines().filter((l) => l.code === 'not_found').length;
    for (const ref of pasted) {
      for (const [method, path] of [
        ['POST', `/api/v1/admin/principals/${ref}/disable`],
        ['GET', `/api/v1/admin/quotas/principals/${ref}`],
      ] as const) {
        const res = await call(method, path);
        expect(res.status, `${method} ${path}`).toBe(404);
        expect(JSON.stringify(res.body), `${method} ${path}`).not.toContain(secret.slice(0, 42));
      }
    }
    await expect
      .poll(() => gw.logLines().filter((l) => l.code === 'not_found').length)
      .toBeGreaterThanOrEqual(before + pasted.length * 2);
    expect(gw.logs()).not.toContain(secret.slice(0, 42));
    expect((await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(leaked.key) })).status).not.toBe(401);
  });
});

describe('publishing nothing', () => {
  it('an empty body, no limiters or an empty list is 400 invalid_request saying how rules are removed, not "published"', async () => {
    for (const body of [{}, { rate_limits: {} }, { rate_limits: { gateway_request: [] } }]) {
      const res = await call('PUT', '/api/v1/admin/rate-limits', body);
      expect([res.status, res.body.code], JSON.stringify(body)).toEqual([400, 'invalid_request']);
      expect(res.body.message).toMatch(/removes none: remove a published rule with DELETE/);
    }
  });
});

describe('a wide reference is quoted back bounded, not whole', () => {
  it('a principal, repository, group or limiter reference, or a body value, thousands of characters long: its first 128 characters and its length', async () => {
    const wide = `${'w'.repeat(6000)}!`;
    const attempts: Array<[string, string, unknown?]> = [
      ['GET', `/api/v1/admin/principals/${wide}`],
      ['GET', `/api/v1/admin/principals/${wide}/keys`],
      ['GET', `/api/v1/admin/grants?principal=${wide}`],
      ['PUT', `/api/v1/admin/grants/${admin.principalId}/${wide}`, { permission: 'read' }],
      ['GET', `/api/v1/admin/quotas/repositories/${wide}`],
      ['GET', `/api/v1/admin/rate-limits/${wide}`],
      ['DELETE', `/api/v1/admin/rate-limits/gateway_request/rules/${wide}`],
      // And a wide value in a body, up to its route's bound.
      ['PUT', `/api/v1/admin/principals/${admin.principalId}/bandwidth-weight`, { bandwidthWeight: wide }],
      ['POST', `/api/v1/admin/principals/${admin.principalId}/certificates`, { san: wide }],
      ['PUT', '/api/v1/admin/repositories/nope/ceilings', { [wide.slice(0, 3000)]: 1 }],
      ['PUT', '/api/v1/admin/rate-limits', { rate_limits: { gateway_request: [{ name: wide, action: 'skip' }] } }],
    ];
    for (const [method, path, body] of attempts) {
      const res = await call(method, path, body);
      expect(res.status, `${method} ${path.slice(0, 60)}`).toBeGreaterThanOrEqual(400);
      expect(res.status, `${method} ${path.slice(0, 60)}`).toBeLessThan(500);
      const message = res.body.message as string;
      expect(message, `${method} ${path.slice(0, 60)}`).toMatch(/"?w{128}"?… \((6001|3000) characters\)/);
      expect(message.length, `${method} ${path.slice(0, 60)}`).toBeLessThan(400);
    }
  });
});

describe("a forged cursor or a NUL in a filter is the client's fault: 400, never 500", () => {
  it.each([
    [
      'a keys cursor that is no microsecond count',
      () => `/principals/${admin.principalId}/keys?cursor=${encodeCursor(CURSORS.keys, ['abc', 'x'])}`,
    ],
    [
      'a keys cursor past the largest bigint',
      () => `/principals/${admin.principalId}/keys?cursor=${encodeCursor(CURSORS.keys, ['9999999999999999999', 'x'])}`,
    ],
    ['a principals cursor holding a NUL', () => `/principals?cursor=${encodeCursor(CURSORS.principals, ['a\u0000'])}`],
    ['a grants cursor holding a NUL', () => `/grants?cursor=${encodeCursor(CURSORS.grants, ['a\u0000', 'b'])}`],
    ['an audit filter holding a NUL', () => '/audit?principal=a%00b'],
    [
      'an audit cursor past the largest bigint',
      () => `/audit?cursor=${encodeCursor(CURSORS.audit, ['9999999999999999999'])}`,
    ],
    ['a usage filter holding a NUL', () => '/stats/principals?principal=a%00b'],
  ])('%s', async (_name, path) => {
    const res = await call('GET', `/api/v1/admin${path()}`);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'invalid_request' });
  });

  it('a cursor no listing gave, and one another listing gave, are told apart (as the CLI tells them, exit 2)', async () => {
    const forged = await call('GET', '/api/v1/admin/principals?cursor=bm90IGEgY3Vyc29y');
    expect(forged.status).toBe(400);
    expect(forged.body).toMatchObject({
      code: 'invalid_request',
      message: 'cursor is not valid: no listing gave it; start without it',
    });
    // A principals cursor has the shape of a repositories one (a name): refused, not taken as a place.
    const foreign = await call(
      'GET',
      `/api/v1/admin/repositories?cursor=${encodeCursor(CURSORS.principals, ['alice'])}`,
    );
    expect(foreign.status).toBe(400);
    expect(foreign.body).toMatchObject({
      code: 'invalid_request',
      message: 'cursor was made for the principals listing, not this one (repositories); start without it',
    });
  });
});

describe('numeric admin input is range-checked', () => {
  it.each([9007199254740991, 1e300, 315_360_001, 0, -1, 1.5, '3600'])(
    'expiresInSeconds %s on key create and rotate → 400 invalid_request',
    async (expiresInSeconds) => {
      const created = await call('POST', `/api/v1/admin/principals/${admin.principalId}/keys`, {
        scopes: ['read'],
        expiresInSeconds,
      });
      expect(created.status).toBe(400);
      expect(created.body).toMatchObject({ code: 'invalid_request' });
      expect(created.body.message).toMatch(/expiresInSeconds must be an integer from 1 to 315360000/);
      const rotated = await call('POST', `/api/v1/admin/keys/${admin.keyId}/rotate`, { expiresInSeconds });
      expect(rotated.status).toBe(400);
      expect(rotated.body).toMatchObject({ code: 'invalid_request' });
    },
  );

  it('accepts the longest lifetime, and refuses a description past 1024 characters', async () => {
    const longest = await call('POST', `/api/v1/admin/principals/${admin.principalId}/keys`, {
      scopes: ['read'],
      expiresInSeconds: 315_360_000,
    });
    expect(longest.status).toBe(201);
    const wordy = await call('POST', `/api/v1/admin/principals/${admin.principalId}/keys`, {
      scopes: ['read'],
      description: 'x'.repeat(1025),
    });
    expect(wordy.status).toBe(400);
    expect(gw.logs()).not.toMatch(/"level":"error"/);
  });

  it.each([{ kind: null }, { kind: 1 }, { description: 5 }, { description: null }, { description: ['a'] }])(
    'a key create with %o is 400 invalid_request, and makes no key',
    async (field) => {
      const before = await call('GET', `/api/v1/admin/principals/${admin.principalId}/keys?limit=500`);
      const created = await call('POST', `/api/v1/admin/principals/${admin.principalId}/keys`, {
        scopes: ['read'],
        ...field,
      });
      expect(created.status).toBe(400);
      expect(created.body).toMatchObject({ code: 'invalid_request' });
      expect(created.body.message).toMatch(/must be a string when given/);
      const after = await call('GET', `/api/v1/admin/principals/${admin.principalId}/keys?limit=500`);
      expect((after.body.keys as unknown[]).length).toBe((before.body.keys as unknown[]).length);
    },
  );
});
