/**
 * Listings are cursor-paged over real sockets: with 2,000 principals every page of the admin API,
 * the console's access view and the CLI is bounded, and walking the cursors returns every
 * principal exactly once. The console's access view costs one query per page, counted on a real
 * PostgreSQL.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import {
  ACCESS_GRANTS_SHOWN,
  ACCESS_KEYS_SHOWN,
  ACCESS_REPOSITORIES_SHOWN,
  AdminStore,
} from '../../policy/auth/admin-store.ts';
import { CURSORS, encodeCursor, PAGE_DEFAULT_LIMIT, PAGE_MAX_LIMIT } from '../../policy/auth/page.ts';
import { loadRuleFiles } from '../gates/rate-limit-rule-files.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { openPool } from '../../test/harness/index.ts';
import { runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';

const db = useTestDatabase();
const N = 2000;
let admin: { key: string; principalId: string; keyId: string };
let gw: GatewayProcess;
let expectedNames: string[];

/** Every principal's name now (tests add some). */
async function currentNames(): Promise<string[]> {
  return (await db.pool.query<{ name: string }>('SELECT name FROM arkvory_principals ORDER BY name')).rows.map(
    (r) => r.name,
  );
}

beforeAll(async () => {
  admin = await createServiceAccount(db.pool, { name: 'aaa-admin', scopes: ['read', 'admin'] });
  await db.pool.query(
    `INSERT INTO arkvory_principals (name) SELECT 'p-' || lpad(i::text, 5, '0') FROM generate_series(1, $1) i`,
    [N],
  );
  // Every principal a key and a grant, so the access view has something to gather per principal.
  await createRepository(db.pool, 'paged');
  await db.pool.query(
    `INSERT INTO arkvory_grants (principal_id, repository, permission) SELECT id, 'paged', 'read' FROM arkvory_principals`,
  );
  for (let i = 0; i < 5; i++) await createRepository(db.pool, `repo-${i}`);
  expectedNames = await currentNames();
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
}, 90_000);

async function getJson(path: string, headers: Record<string, string> = bearer(admin.key)) {
  const res = await request(`${gw.url}${path}`, { headers });
  return {
    status: res.status,
    bytes: res.body.length,
    body: JSON.parse(res.body.toString()) as Record<string, unknown>,
  };
}

/** A signed-in console session's cookie. */
async function consoleCookie(): Promise<Record<string, string>> {
  const signIn = await request(`${gw.url}/console/session`, { method: 'POST', headers: bearer(admin.key) });
  return { cookie: (signIn.headers['set-cookie']?.[0] ?? '').split(';')[0]! };
}

/** Follows nextCursor from `path` to the end; returns every item and the largest page. */
async function walk(path: string, field: string, headers?: Record<string, string>) {
  const items: Array<Record<string, unknown>> = [];
  let cursor: string | null = null;
  let pages = 0;
  let largest = 0;
  let largestBytes = 0;
  do {
    // The next page's cursor takes the place of one `path` starts from.
    const url = new URL(path, 'http://walk');
    if (cursor) url.searchParams.set('cursor', cursor);
    const res = await getJson(`${url.pathname}${url.search}`, headers);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const page = res.body[field] as Array<Record<string, unknown>>;
    items.push(...page);
    largest = Math.max(largest, page.length);
    largestBytes = Math.max(largestBytes, res.bytes);
    cursor = res.body.nextCursor as string | null;
    pages++;
  } while (cursor !== null);
  return { items, pages, largest, largestBytes };
}

describe('admin API listings', () => {
  it('pages 2,000 principals by the default 100; the walk returns every principal exactly once', async () => {
    const { items, pages, largest, largestBytes } = await walk('/api/v1/admin/principals', 'principals');
    expect(largest).toBe(PAGE_DEFAULT_LIMIT);
    expect(pages).toBe(Math.ceil((N + 1) / PAGE_DEFAULT_LIMIT));
    expect(largestBytes).toBeLessThan(20_000);
    expect(items.map((p) => p.name)).toEqual(expectedNames);
  });

  it('takes limit up to 1000 and refuses anything else or a forged cursor with 400', async () => {
    const big = await getJson(`/api/v1/admin/principals?limit=${PAGE_MAX_LIMIT}`);
    expect((big.body.principals as unknown[]).length).toBe(PAGE_MAX_LIMIT);
    const small = await walk('/api/v1/admin/principals?limit=7', 'principals');
    expect(small.largest).toBe(7);
    expect(small.items.map((p) => p.name)).toEqual(expectedNames);
    for (const query of [
      `limit=${PAGE_MAX_LIMIT + 1}`,
      'limit=0',
      'limit=ten',
      'cursor=forged!',
      'cursor=WyJhIiwiYiJd',
    ]) {
      const res = await getJson(`/api/v1/admin/principals?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.body.code).toBe('invalid_request');
    }
  });

  it('pages grants, repositories and keys the same way', async () => {
    const grants = await walk('/api/v1/admin/grants?limit=500', 'grants');
    expect(grants.largest).toBe(500);
    expect(grants.items).toHaveLength(N + 1);
    expect(new Set(grants.items.map((g) => g.principalName)).size).toBe(N + 1);
    const repos = await walk('/api/v1/admin/repositories?limit=2', 'repositories');
    expect(repos.items.map((r) => r.name)).toEqual(['paged', 'repo-0', 'repo-1', 'repo-2', 'repo-3', 'repo-4']);
    const store = new AdminStore(db.pool);
    for (let i = 0; i < 4; i++) await store.createKey(admin.principalId, { scopes: ['read'] });
    const keys = await walk(`/api/v1/admin/principals/${admin.principalId}/keys?limit=2`, 'keys');
    expect(keys.largest).toBe(2);
    expect(keys.items).toHaveLength(5);
    expect(new Set(keys.items.map((k) => k.keyId)).size).toBe(5);
  });

  it("pages a principal's certificate bindings (route and CLI); a forged cursor is 400", async () => {
    const store = new AdminStore(db.pool);
    for (let i = 0; i < 23; i++) await store.bindCertificate('p-00002', `DNS:host-${i}.example`, ['read']);
    // In the database's order (its collation), which the pages follow.
    const sans = (
      await db.pool.query<{ san: string }>(
        `SELECT san FROM arkvory_certificate_bindings b JOIN arkvory_principals p ON p.id = b.principal_id
          WHERE p.name = 'p-00002' ORDER BY san`,
      )
    ).rows.map((r) => r.san);
    expect(sans).toHaveLength(23);
    const listed = await walk('/api/v1/admin/principals/p-00002/certificates?limit=4', 'certificates');
    expect(listed.largest).toBe(4);
    expect(listed.items.map((c) => c.san)).toEqual(sans);
    const forged = await getJson('/api/v1/admin/principals/p-00002/certificates?cursor=WyJhIiwiYiJd');
    expect(forged.status).toBe(400);
    expect(forged.body.code).toBe('invalid_request');
    const env = { ARKVORY_DATABASE_URL: db.url };
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const result = await runCli(
        ['principals', 'certs', 'p-00002', '--limit', '10', ...(cursor ? ['--cursor', cursor] : [])],
        env,
      );
      expect(result.code, result.stderr).toBe(0);
      const page = JSON.parse(result.stdout) as { certificates: Array<{ san: string }>; nextCursor: string | null };
      expect(page.certificates.length).toBeLessThanOrEqual(10);
      seen.push(...page.certificates.map((c) => c.san));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(sans);
  });

  it("pages a principal's own repository listing", async () => {
    const reader = await createServiceAccount(db.pool, {
      scopes: ['read'],
      grants: { 'repo-0': 'read', 'repo-1': 'read', 'repo-2': 'read' },
    });
    const repos = await walk('/api/v1/repositories?limit=2', 'repositories', bearer(reader.key));
    expect(repos.items.map((r) => r.name)).toEqual(['repo-0', 'repo-1', 'repo-2']);
    expect(repos.pages).toBe(2);
  });

  it('pages the CLI list commands the same way', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const result = await runCli(
        ['principals', 'list', '--limit', '1000', ...(cursor ? ['--cursor', cursor] : [])],
        env,
      );
      expect(result.code, result.stderr).toBe(0);
      const page = JSON.parse(result.stdout) as { principals: Array<{ name: string }>; nextCursor: string | null };
      expect(page.principals.length).toBeLessThanOrEqual(1000);
      seen.push(...page.principals.map((p) => p.name));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(await currentNames());
    const refused = await runCli(['principals', 'list', '--limit', '5000'], env);
    expect([refused.code, refused.stdout]).toEqual([2, '']);
    expect(refused.stderr).toBe(
      'arkvory principals list: --limit must be an integer from 1 to 1000 (got 5000) (see arkvory principals list --help)\n',
    );
  });
});

describe('storage quotas', () => {
  it('are paged (route and CLI), repositories first; the walk gives each quota once; a forged cursor is 400', async () => {
    // 150 principal quotas and the 6 repositories': past one default page.
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes)
         SELECT 'principal', id::text, 1024 FROM arkvory_principals ORDER BY name LIMIT 150`,
    );
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) SELECT 'repository', name, 2048 FROM arkvory_repositories`,
    );
    try {
      const expected = (
        await db.pool.query<{ key: string }>(
          `SELECT scope || ':' || subject AS key FROM arkvory_storage_quotas ORDER BY scope DESC, subject`,
        )
      ).rows.map((r) => r.key);
      expect(expected).toHaveLength(156);
      const { items, largest } = await walk('/api/v1/admin/quotas?limit=40', 'quotas');
      expect(largest).toBe(40);
      expect(items.map((q) => `${q.scope}:${q.subject}`)).toEqual(expected);
      expect((await getJson('/api/v1/admin/quotas')).body.quotas).toHaveLength(PAGE_DEFAULT_LIMIT);
      const forged = await getJson(`/api/v1/admin/quotas?cursor=${encodeCursor(CURSORS.quotas, ['group', 'x'])}`);
      expect([forged.status, forged.body.code]).toEqual([400, 'invalid_request']);
      const cli = await runCli(['quota', 'list', '--limit', '150'], { ARKVORY_DATABASE_URL: db.url });
      expect(cli.code, cli.stderr).toBe(0);
      const first = JSON.parse(cli.stdout) as { quotas: Array<{ scope: string; subject: string }>; nextCursor: string };
      const rest = await runCli(['quota', 'list', '--cursor', first.nextCursor], { ARKVORY_DATABASE_URL: db.url });
      const second = JSON.parse(rest.stdout) as { quotas: Array<{ scope: string; subject: string }>; nextCursor: null };
      expect([...first.quotas, ...second.quotas].map((q) => `${q.scope}:${q.subject}`)).toEqual(expected);
      expect(second.nextCursor).toBeNull();
      // The console's status view, asked for every 2 s, shows the first page, not every quota.
      const signIn = await request(`${gw.url}/console/session`, { method: 'POST', headers: bearer(admin.key) });
      const cookie = { cookie: (signIn.headers['set-cookie']?.[0] ?? '').split(';')[0]! };
      const status = await getJson('/console/api/status', cookie);
      expect(status.status).toBe(200);
      expect(
        (status.body.quotas as Array<{ scope: string; subject: string }>).map((q) => `${q.scope}:${q.subject}`),
      ).toEqual(expected.slice(0, PAGE_DEFAULT_LIMIT));
      expect(status.body.quotasNextCursor).toEqual(expect.any(String));
      const rest2 = await walk(
        `/api/v1/admin/quotas?cursor=${encodeURIComponent(status.body.quotasNextCursor as string)}`,
        'quotas',
      );
      expect(rest2.items.map((q) => `${q.scope}:${q.subject}`)).toEqual(expected.slice(PAGE_DEFAULT_LIMIT));
    } finally {
      await db.pool.query('DELETE FROM arkvory_storage_quotas');
    }
  });
});

describe('groups and repository ceilings', () => {
  it('are paged by name (route, CLI and console); the walk gives each once, members included; a cursor of another listing is 400', async () => {
    // 150 groups, each with two members, and 150 repositories with a ceiling: past one default page.
    await db.pool.query(
      `INSERT INTO arkvory_principal_groups (name, download_bytes_per_second)
         SELECT 'g-' || lpad(i::text, 3, '0'), 65536 * i FROM generate_series(1, 150) i`,
    );
    await db.pool.query(
      `INSERT INTO arkvory_principal_group_members (group_name, principal_id)
         SELECT g.name, p.id FROM arkvory_principal_groups g
           CROSS JOIN (SELECT id FROM arkvory_principals WHERE name IN ('p-00001', 'p-00002')) p`,
    );
    await db.pool.query(
      `INSERT INTO arkvory_repositories (name, max_transfers) SELECT 'ceiled-' || lpad(i::text, 3, '0'), 3 FROM generate_series(1, 150) i`,
    );
    try {
      const groups = await walk('/api/v1/admin/groups?limit=40', 'groups');
      expect(groups.largest).toBe(40);
      expect(groups.items.map((g) => g.name)).toEqual(
        Array.from({ length: 150 }, (_, i) => `g-${String(i + 1).padStart(3, '0')}`),
      );
      expect(groups.items[0]).toEqual({
        name: 'g-001',
        downloadBytesPerSec: 65536,
        uploadBytesPerSec: 0,
        members: ['p-00001', 'p-00002'],
        membersNextCursor: null,
      });
      expect((await getJson('/api/v1/admin/groups')).body.groups).toHaveLength(PAGE_DEFAULT_LIMIT);
      const ceilings = await walk('/api/v1/admin/repository-ceilings?limit=40', 'repositories');
      expect(ceilings.largest).toBe(40);
      expect(ceilings.items.map((r) => r.name)).toEqual(
        Array.from({ length: 150 }, (_, i) => `ceiled-${String(i + 1).padStart(3, '0')}`),
      );
      expect((await getJson('/api/v1/admin/repository-ceilings')).body.repositories).toHaveLength(PAGE_DEFAULT_LIMIT);
      const crossed = await getJson(
        `/api/v1/admin/repository-ceilings?cursor=${encodeCursor(CURSORS.groups, ['g-001'])}`,
      );
      expect([crossed.status, crossed.body.code]).toEqual([400, 'invalid_request']);
      expect((await getJson('/api/v1/admin/groups?limit=0')).status).toBe(400);
      // arkvory groups list: the same pages.
      const env = { ARKVORY_DATABASE_URL: db.url };
      const cli = await runCli(['groups', 'list', '--limit', '120'], env);
      expect(cli.code, cli.stderr).toBe(0);
      const first = JSON.parse(cli.stdout) as { groups: Array<{ name: string }>; nextCursor: string };
      const rest = await runCli(['groups', 'list', '--cursor', first.nextCursor], env);
      const second = JSON.parse(rest.stdout) as { groups: Array<{ name: string }>; nextCursor: null };
      expect(first.groups).toHaveLength(120);
      expect([...first.groups, ...second.groups].map((g) => g.name)).toEqual(groups.items.map((g) => g.name));
      expect(second.nextCursor).toBeNull();
      // The console's ceilings view: the first page of each, and where each continues under /console/api.
      const cookie = await consoleCookie();
      const view = await getJson('/console/api/ceilings', cookie);
      expect(view.status).toBe(200);
      expect((view.body.groups as unknown[]).length).toBe(PAGE_DEFAULT_LIMIT);
      expect((view.body.repositories as unknown[]).length).toBe(PAGE_DEFAULT_LIMIT);
      const moreGroups = await walk(
        `/console/api/groups?cursor=${encodeURIComponent(view.body.groupsNextCursor as string)}`,
        'groups',
        cookie,
      );
      expect([...(view.body.groups as Array<{ name: string }>), ...moreGroups.items].map((g) => g.name)).toEqual(
        groups.items.map((g) => g.name),
      );
      const moreCeilings = await walk(
        `/console/api/repository-ceilings?cursor=${encodeURIComponent(view.body.repositoriesNextCursor as string)}`,
        'repositories',
        cookie,
      );
      expect(
        [...(view.body.repositories as Array<{ name: string }>), ...moreCeilings.items].map((r) => r.name),
      ).toEqual(ceilings.items.map((r) => r.name));
      const forged = await getJson('/console/api/groups?cursor=forged!', cookie);
      expect([forged.status, forged.body.code]).toEqual([400, 'invalid_request']);
    } finally {
      await db.pool.query(`DELETE FROM arkvory_principal_groups WHERE name LIKE 'g-%'`);
      await db.pool.query(`DELETE FROM arkvory_repositories WHERE name LIKE 'ceiled-%'`);
    }
  });
});

describe("a group's members", () => {
  it('are paged by name (route, CLI and console): a group answers its first 100 and where they continue; a forged cursor is 400', async () => {
    // 250 members, past the 100 a group's answer holds.
    await db.pool.query(`INSERT INTO arkvory_principal_groups (name) VALUES ('crowd'), ('empty')`);
    await db.pool.query(
      `INSERT INTO arkvory_principal_group_members (group_name, principal_id)
         SELECT 'crowd', id FROM arkvory_principals WHERE name BETWEEN 'p-00001' AND 'p-00250'`,
    );
    const names = Array.from({ length: 250 }, (_, i) => `p-${String(i + 1).padStart(5, '0')}`);
    try {
      const group = await getJson('/api/v1/admin/groups/crowd');
      expect(group.body.members).toEqual(names.slice(0, PAGE_DEFAULT_LIMIT));
      expect(group.body.membersNextCursor).toEqual(expect.any(String));
      const listed = (await getJson('/api/v1/admin/groups')).body.groups as Array<Record<string, unknown>>;
      expect(listed.find((g) => g.name === 'crowd')).toEqual(group.body);
      expect(listed.find((g) => g.name === 'empty')).toMatchObject({ members: [], membersNextCursor: null });
      // Walking the members listing gives each once; the group's cursor continues it past the 100.
      const walked = await walk('/api/v1/admin/groups/crowd/members?limit=40', 'members');
      expect(walked.largest).toBe(40);
      expect(walked.items).toEqual(names);
      const rest = await getJson(
        `/api/v1/admin/groups/crowd/members?limit=1000&cursor=${encodeURIComponent(group.body.membersNextCursor as string)}`,
      );
      expect(rest.body).toEqual({ members: names.slice(PAGE_DEFAULT_LIMIT), nextCursor: null });
      expect((await getJson('/api/v1/admin/groups/empty/members')).body).toEqual({ members: [], nextCursor: null });
      expect((await getJson('/api/v1/admin/groups/nowhere/members')).status).toBe(404);
      for (const query of [
        'cursor=forged!',
        `cursor=${encodeCursor(CURSORS.groups, ['crowd'])}`,
        `cursor=${encodeCursor(CURSORS.groupMembers, ['a\u0000'])}`,
        'limit=0',
        `limit=${PAGE_MAX_LIMIT + 1}`,
      ]) {
        const res = await getJson(`/api/v1/admin/groups/crowd/members?${query}`);
        expect([res.status, res.body.code], query).toEqual([400, 'invalid_request']);
      }
      // The console: the ceilings view's group holds the first 100, its members listing the rest.
      const cookie = await consoleCookie();
      const view = await getJson('/console/api/ceilings', cookie);
      const shown = (view.body.groups as Array<Record<string, unknown>>).find((g) => g.name === 'crowd')!;
      expect(shown.members).toEqual(names.slice(0, PAGE_DEFAULT_LIMIT));
      const consoleRest = await walk(
        `/console/api/groups/crowd/members?cursor=${encodeURIComponent(shown.membersNextCursor as string)}`,
        'members',
        cookie,
      );
      expect(consoleRest.items).toEqual(names.slice(PAGE_DEFAULT_LIMIT));
      // arkvory groups members: the same pages; a forged cursor is a usage error before it connects.
      const env = { ARKVORY_DATABASE_URL: db.url };
      const first = await runCli(['groups', 'members', 'crowd', '--limit', '200'], env);
      expect(first.code, first.stderr).toBe(0);
      const page1 = JSON.parse(first.stdout) as { members: string[]; nextCursor: string };
      const second = await runCli(['groups', 'members', 'crowd', '--cursor', page1.nextCursor], env);
      expect([...page1.members, ...(JSON.parse(second.stdout) as { members: string[] }).members]).toEqual(names);
      expect(JSON.parse(second.stdout).nextCursor).toBeNull();
      const forged = await runCli(['groups', 'members', 'crowd', '--cursor', 'forged!'], env);
      expect([forged.code, forged.stderr]).toEqual([2, expect.stringContaining('cursor is not valid')]);
    } finally {
      await db.pool.query(`DELETE FROM arkvory_principal_groups WHERE name IN ('crowd', 'empty')`);
    }
  });
});

describe('rule views', () => {
  it('page the admin rule view, the console and arkvory ratelimit show by limiter; each limiter once, a forged cursor 400', async () => {
    const limiters = [...(await loadRuleFiles(undefined)).available.keys()].sort(); // the shipped ones, by name
    expect(limiters.length).toBeGreaterThan(2);
    const all = await getJson('/api/v1/admin/rate-limits');
    expect(all.status).toBe(200);
    expect((all.body.limiters as Array<{ limiter: string }>).map((l) => l.limiter)).toEqual(limiters);
    expect(all.body.nextCursor).toBeNull();
    const byOne = await walk('/api/v1/admin/rate-limits?limit=1', 'limiters');
    expect(byOne.largest).toBe(1);
    expect(byOne.pages).toBe(limiters.length);
    expect(byOne.items.map((l) => l.limiter)).toEqual(limiters);
    expect(byOne.items.find((l) => l.limiter === 'auth_failure')).toMatchObject({
      tiers: { default_rules: { rules: [{ name: 'ban_ip_after_auth_failures' }] } },
    });
    for (const query of ['limit=0', `limit=${PAGE_MAX_LIMIT + 1}`, 'cursor=forged!', 'cursor=WyJhIiwiYiJd']) {
      const res = await getJson(`/api/v1/admin/rate-limits?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.body.code).toBe('invalid_request');
    }

    const signIn = await request(`${gw.url}/console/session`, { method: 'POST', headers: bearer(admin.key) });
    const cookie = { cookie: (signIn.headers['set-cookie']?.[0] ?? '').split(';')[0]! };
    const consoleView = await walk('/console/api/rate-limits?limit=2', 'limiters', cookie);
    expect(consoleView.largest).toBe(2);
    expect(consoleView.items.map((l) => l.limiter)).toEqual(limiters);
    expect((await getJson('/console/api/rate-limits?cursor=forged!', cookie)).status).toBe(400);

    const env = { ARKVORY_DATABASE_URL: db.url };
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const result = await runCli(['ratelimit', 'show', '--limit', '2', ...(cursor ? ['--cursor', cursor] : [])], env);
      expect(result.code, result.stderr).toBe(0);
      const page = JSON.parse(result.stdout) as { limiters: Array<{ limiter: string }>; nextCursor: string | null };
      expect(page.limiters.length).toBeLessThanOrEqual(2);
      seen.push(...page.limiters.map((l) => l.limiter));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(limiters);
    const refused = await runCli(['ratelimit', 'show', '--cursor', 'forged!'], env);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--cursor is not valid: no listing gave it/);
  });
});

describe("the console's access view", () => {
  it('is paged, and the walk shows every principal once with its keys and grants', async () => {
    const signIn = await request(`${gw.url}/console/session`, { method: 'POST', headers: bearer(admin.key) });
    expect(signIn.status).toBe(201);
    const cookie = { cookie: (signIn.headers['set-cookie']?.[0] ?? '').split(';')[0]! };
    const view = await walk('/console/api/access', 'principals', cookie);
    expect(view.largest).toBe(PAGE_DEFAULT_LIMIT);
    expect(view.items.map((p) => p.name)).toEqual(await currentNames());
    const adminRow = view.items.find((p) => p.name === 'aaa-admin')!;
    expect((adminRow.keys as Array<{ keyId: string }>).map((k) => k.keyId)).toContain(admin.keyId);
    expect(JSON.stringify(adminRow)).not.toContain('secret');
    expect(view.items.find((p) => p.name === 'p-00001')).toMatchObject({
      keys: [],
      grants: [{ repository: 'paged', permission: 'read' }],
    });
  });

  it("bounds each principal's keys and grants and the repositories; the admin listings continue them under /console/api; a forged cursor is 400", async () => {
    // 130 keys and 130 grants for one principal, past the 100 of each it shows; 1,100 repositories
    // more, past the 1000 it shows.
    const heavy = await new AdminStore(db.pool).createPrincipal('aab-heavy');
    await db.pool.query(
      `INSERT INTO arkvory_repositories (name) SELECT 'many-' || lpad(i::text, 4, '0') FROM generate_series(1, 1100) i`,
    );
    await db.pool.query(
      `INSERT INTO arkvory_api_keys (key_id, principal_id, secret_sha256, scopes, created_at)
         SELECT 'k' || lpad(i::text, 15, '0'), $1, sha256(i::text::bytea), '{read}', now() + i * interval '1 millisecond'
           FROM generate_series(1, 130) i`,
      [heavy.id],
    );
    await db.pool.query(
      `INSERT INTO arkvory_grants (principal_id, repository, permission)
         SELECT $1, 'many-' || lpad(i::text, 4, '0'), 'write' FROM generate_series(1, 130) i`,
      [heavy.id],
    );
    const column = async (sql: string, params: unknown[] = []) =>
      (await db.pool.query<{ v: string }>(sql, params)).rows.map((r) => r.v);
    try {
      const keyIds = await column(
        'SELECT key_id AS v FROM arkvory_api_keys WHERE principal_id = $1 ORDER BY created_at, key_id',
        [heavy.id],
      );
      const granted = await column(
        'SELECT repository AS v FROM arkvory_grants WHERE principal_id = $1 ORDER BY repository',
        [heavy.id],
      );
      const repositories = await column('SELECT name AS v FROM arkvory_repositories ORDER BY name');
      expect([keyIds.length, granted.length, repositories.length]).toEqual([130, 130, 1106]);
      const cookie = await consoleCookie();
      const view = await getJson('/console/api/access?limit=2', cookie);
      expect(view.status).toBe(200);
      const [first, row] = view.body.principals as Array<Record<string, unknown>>;
      expect(first).toMatchObject({ name: 'aaa-admin', keysNextCursor: null, grantsNextCursor: null });
      expect(row!.name).toBe('aab-heavy');
      expect((row!.keys as Array<{ keyId: string }>).map((k) => k.keyId)).toEqual(keyIds.slice(0, ACCESS_KEYS_SHOWN));
      expect((row!.grants as Array<{ repository: string }>).map((g) => g.repository)).toEqual(
        granted.slice(0, ACCESS_GRANTS_SHOWN),
      );
      expect((view.body.repositories as Array<{ name: string }>).map((r) => r.name)).toEqual(
        repositories.slice(0, ACCESS_REPOSITORIES_SHOWN),
      );
      // The next page ("more principals") is principals alone: the first page's repositories are
      // not read or sent again (they were, up to 1000, on every page).
      const morePrincipals = await getJson(
        `/console/api/access?limit=2&cursor=${encodeURIComponent(view.body.nextCursor as string)}`,
        cookie,
      );
      expect(morePrincipals.status).toBe(200);
      expect(Object.keys(morePrincipals.body).sort()).toEqual(['nextCursor', 'principals']);
      expect((morePrincipals.body.principals as Array<{ name: string }>).map((p) => p.name)).toEqual([
        'p-00001',
        'p-00002',
      ]);
      // Each cursor continues the admin API's own listing, served read-only under /console/api.
      const keys = await walk(
        `/console/api/principals/aab-heavy/keys?cursor=${encodeURIComponent(row!.keysNextCursor as string)}`,
        'keys',
        cookie,
      );
      expect(keys.items.map((k) => k.keyId)).toEqual(keyIds.slice(ACCESS_KEYS_SHOWN));
      expect(JSON.stringify(keys.items)).not.toContain('secret');
      const grants = await walk(
        `/console/api/grants?principal=aab-heavy&cursor=${encodeURIComponent(row!.grantsNextCursor as string)}`,
        'grants',
        cookie,
      );
      expect(grants.items.map((g) => g.repository)).toEqual(granted.slice(ACCESS_GRANTS_SHOWN));
      // Without a principal: every principal's grants, paged the same way (never one answer of all).
      const everyGrant = await walk('/console/api/grants?limit=1000', 'grants', cookie);
      expect(everyGrant.largest).toBe(1000);
      expect(everyGrant.pages).toBeGreaterThan(2);
      expect(everyGrant.items.filter((g) => g.principalName === 'aab-heavy').map((g) => g.repository)).toEqual(granted);
      const more = await walk(
        `/console/api/repositories?cursor=${encodeURIComponent(view.body.repositoriesNextCursor as string)}`,
        'repositories',
        cookie,
      );
      expect(more.items.map((r) => r.name)).toEqual(repositories.slice(ACCESS_REPOSITORIES_SHOWN));
      // A prefix picks the repositories starting with it, paged the same way (admin API and console).
      const many10 = repositories.filter((r) => r.startsWith('many-10'));
      expect(many10).toHaveLength(100);
      for (const path of ['/api/v1/admin/repositories', '/console/api/repositories']) {
        const found = await walk(
          `${path}?prefix=many-10&limit=40`,
          'repositories',
          path.startsWith('/console') ? cookie : undefined,
        );
        expect([found.largest, found.pages]).toEqual([40, 3]);
        expect(found.items.map((r) => r.name)).toEqual(many10);
      }
      expect((await getJson('/console/api/repositories?prefix=zzz', cookie)).body).toEqual({
        repositories: [],
        nextCursor: null,
      });
      for (const path of [
        '/console/api/access?cursor=forged!',
        '/console/api/principals/aab-heavy/keys?cursor=forged!',
        `/console/api/principals/aab-heavy/keys?cursor=${encodeCursor(CURSORS.keys, ['1x', 'k'])}`,
        '/console/api/grants?principal=aab-heavy&cursor=forged!',
        '/console/api/grants?cursor=forged!',
        `/console/api/grants?principal=aab-heavy&cursor=${row!.keysNextCursor as string}`,
        '/console/api/repositories?cursor=forged!',
        `/console/api/repositories?cursor=${encodeCursor(CURSORS.access, ['aab-heavy'])}`,
        '/console/api/repositories?prefix=Many',
        '/console/api/repositories?prefix=many%00',
        '/console/api/repositories?limit=0',
      ]) {
        const res = await getJson(path, cookie);
        expect([res.status, res.body.code], path).toEqual([400, 'invalid_request']);
      }
      expect((await getJson('/api/v1/admin/repositories?prefix=-x')).status).toBe(400);
      // arkvory repos list --prefix: the same listing; a prefix that cannot start a name is a usage error.
      const env = { ARKVORY_DATABASE_URL: db.url };
      const listed = await runCli(['repos', 'list', '--prefix', 'many-10', '--limit', '60'], env);
      expect(listed.code, listed.stderr).toBe(0);
      const firstPage = JSON.parse(listed.stdout) as { repositories: Array<{ name: string }>; nextCursor: string };
      const next = await runCli(['repos', 'list', '--prefix', 'many-10', '--cursor', firstPage.nextCursor], env);
      const secondPage = JSON.parse(next.stdout) as { repositories: Array<{ name: string }>; nextCursor: null };
      expect([...firstPage.repositories, ...secondPage.repositories].map((r) => r.name)).toEqual(many10);
      expect(secondPage.nextCursor).toBeNull();
      const refused = await runCli(['repos', 'list', '--prefix', 'Many'], env);
      expect([refused.code, refused.stderr]).toEqual([2, expect.stringContaining('prefix must be')]);
    } finally {
      await db.pool.query('DELETE FROM arkvory_principals WHERE id = $1', [heavy.id]);
      await db.pool.query(`DELETE FROM arkvory_repositories WHERE name LIKE 'many-%'`);
    }
  });

  it('costs one query per page, however many principals it shows', async () => {
    let queries = 0;
    const counting = openPool(db.url, 2);
    const query = counting.query.bind(counting);
    counting.query = ((...args: Parameters<typeof query>) => {
      queries++;
      return query(...args);
    }) as typeof counting.query;
    try {
      const store = new AdminStore(counting);
      const first = await store.accessView({ limit: PAGE_MAX_LIMIT });
      expect(first.principals.items).toHaveLength(PAGE_MAX_LIMIT);
      expect(first.repositories!.items.map((r) => r.name)).toContain('paged');
      expect(queries).toBe(1);
      const second = await store.accessView({ limit: PAGE_MAX_LIMIT, cursor: first.principals.nextCursor });
      expect(queries).toBe(2);
      expect(second.principals.items[0]!.name > first.principals.items.at(-1)!.name).toBe(true);
      // The repositories come with the first page only: "more principals" does not read them again.
      expect(second.repositories).toBeNull();
    } finally {
      await counting.end();
    }
  });
});
