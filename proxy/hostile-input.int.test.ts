/**
 * The policy layer under hostile input (issue #21), over HTTP against real gateway processes,
 * real PostgreSQL and Redis.
 */
import { describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../test/support/auth.ts';
import { useTestDatabase } from '../test/support/database.ts';
import { startGateway } from '../test/support/gateway.ts';
import { useTestRedis } from '../test/support/redis.ts';

const db = useTestDatabase();
const redis = useTestRedis();
let n = 0;
const redisEnv = () => ({ ARKVORY_DATABASE_URL: db.url, ARKVORY_REDIS_URL: redis.url, ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}h${++n}:`, ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '5000' });

describe('hostile rule regexes', () => {
  it('a published catastrophic-backtracking regex neither freezes requests nor the admin API that removes it', async () => {
    // 40 characters: `(.*.*)*X` on a backtracking engine would take far longer than the test timeout.
    const repo = 'a'.repeat(40);
    const matching = `${'a'.repeat(39)}x`;
    await createRepository(db.pool, repo);
    await createRepository(db.pool, matching);
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'], grants: { [repo]: 'read', [matching]: 'read' } });
    const gw = await startGateway({ env: redisEnv() });
    const publish = (rules: unknown[]) =>
      fetch(`${gw.url}/api/v1/admin/rate-limits`, { method: 'PUT', headers: { ...bearer(admin.key), 'content-type': 'application/json' }, body: JSON.stringify({ rate_limits: { gateway_request: rules } }) });

    const refused = await publish([{ name: 'lookahead', action: 'skip', match: { route: { regex: '^(?!/health)' } } }]);
    expect(refused.status).toBe(400);
    const body = (await refused.json()) as { code: string; message: string };
    expect(body.code).toBe('invalid_request');
    expect(body.message).toContain('rule "lookahead"');
    expect(body.message).toContain('RE2 syntax');

    const hostile = { name: 'hostile', action: 'limit', characteristics: ['ip'], limit: 100, period_s: 60 };
    expect((await publish([{ ...hostile, match: { repository: { regex: '(.*.*)*x' } } }, { ...hostile, name: 'hostile_route', limit: 1000, match: { route: { regex: '.*.*.*.*.*X' } } }])).status).toBe(200);
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${gw.url}/api/v1/repositories/${repo}/artifacts/nothing-here/content`, { headers: bearer(admin.key) });
      expect(r.status).toBe(404);
      expect(r.headers.get('ratelimit-policy')).not.toContain('"hostile"');
      await r.arrayBuffer();
    }
    // The same rule on a repository that does match: it applies (the engine is live, not bypassed).
    const hit = await fetch(`${gw.url}/api/v1/repositories/${matching}/artifacts/nothing-here/content`, { headers: bearer(admin.key) });
    expect(hit.status).toBe(404);
    expect(hit.headers.get('ratelimit-policy')).toBe('"hostile";q=100;w=60');
    const removed = await fetch(`${gw.url}/api/v1/admin/rate-limits/gateway_request/rules/hostile`, { method: 'DELETE', headers: bearer(admin.key) });
    expect(removed.status).toBe(204);
    expect(await gw.stop()).toBe(0);
  });
});
