/**
 * Pre-signed links under hostile use (issue #35), over real sockets against real gateway processes
 * and PostgreSQL: a link serves only the bytes it was made for, also with a key sent beside it; a
 * link of the first format is refused with its own code; numbers in a link have one spelling; a
 * link's parameters on PUT, DELETE or POST are the documented 401; a flood of links naming unknown
 * secrets costs PostgreSQL no query per request.
 */
import { createHmac } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { rotatePresignSecret } from '../../policy/auth/presigned-links.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';

const db = useTestDatabase();
let gw: GatewayProcess;
let owner: { principalId: string; keyId: string; key: string };
const base = '/api/v1/repositories/bind/artifacts';

beforeAll(async () => {
  await createRepository(db.pool, 'bind');
  owner = await createServiceAccount(db.pool, { grants: { bind: 'write' } });
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url }, timeoutMs: 60_000 });
});

async function put(gateway: GatewayProcess, key: string, name: string, body: Buffer): Promise<number> {
  const res = await request(`${gateway.url}${base}/${name}`, {
    method: 'PUT',
    headers: { ...bearer(key), 'content-digest': contentDigest(body) },
    body,
  });
  return res.status;
}

async function presign(gateway: GatewayProcess, key: string, name: string): Promise<string> {
  const res = await request(`${gateway.url}${base}/${name}/presign`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: Buffer.from('{}'),
  });
  expect(res.status, res.body.toString()).toBe(201);
  return `${gateway.url}${(JSON.parse(res.body.toString()) as { path: string }).path}`;
}

const codeOf = (body: Buffer) => (JSON.parse(body.toString()) as { code: string }).code;

describe('a pre-signed link is bound to the bytes it was made for', () => {
  it('deleted: 404; replaced by other bytes: 410 link_content_changed; the same bytes again: served', async () => {
    const first = randomContent(4096);
    const other = randomContent(4096);
    expect(await put(gw, owner.key, 'release.tar', first)).toBe(201);
    const link = await presign(gw, owner.key, 'release.tar');
    expect(new URL(link).searchParams.get('X-Arkvory-Digest')).toBe(sha256(first));
    const served = await request(link);
    expect(served.status).toBe(200);
    expect(sha256(served.body)).toBe(sha256(first));

    const deleted = await request(`${gw.url}${base}/release.tar`, { method: 'DELETE', headers: bearer(owner.key) });
    expect(deleted.status).toBe(204);
    const gone = await request(link);
    expect(gone.status).toBe(404);
    expect(codeOf(gone.body)).toBe('not_found');

    expect(await put(gw, owner.key, 'release.tar', other)).toBe(201);
    for (const [method, headers] of [
      ['GET', {}],
      ['HEAD', {}],
      ['GET', { range: 'bytes=0-99' }],
      ['GET', { 'if-none-match': `"${sha256(other)}"` }],
    ] as const) {
      const changed = await request(link, { method, headers });
      expect(changed.status, `${method} ${JSON.stringify(headers)}`).toBe(410);
      if (method === 'GET') {
        expect(codeOf(changed.body)).toBe('link_content_changed');
        expect(changed.body.toString()).not.toContain(sha256(other));
      }
    }
    // The new bytes are reachable through a new link, and only through it.
    const renewed = await presign(gw, owner.key, 'release.tar');
    expect(sha256((await request(renewed)).body)).toBe(sha256(other));

    // The original bytes under the name again: the link serves exactly what it was made for.
    expect(
      (await request(`${gw.url}${base}/release.tar`, { method: 'DELETE', headers: bearer(owner.key) })).status,
    ).toBe(204);
    expect(await put(gw, owner.key, 'release.tar', first)).toBe(201);
    const again = await request(link);
    expect(again.status).toBe(200);
    expect(sha256(again.body)).toBe(sha256(first));
    expect((await request(renewed)).status).toBe(410);
  });

  it('sent with a key as well (pip or curl from .netrc, a browser that cached Basic credentials), is still that link', async () => {
    const reader = await createServiceAccount(db.pool, { scopes: ['read'], grants: { bind: 'read' } });
    const basic = { authorization: `Basic ${Buffer.from(`bob:${reader.key}`).toString('base64')}` };
    const first = randomContent(2048);
    const other = randomContent(2048);
    expect(await put(gw, owner.key, 'vetted.tar', first)).toBe(201);
    const link = await presign(gw, owner.key, 'vetted.tar');
    expect(sha256((await request(link, { headers: basic })).body)).toBe(sha256(first));
    expect(
      (await request(`${gw.url}${base}/vetted.tar`, { method: 'DELETE', headers: bearer(owner.key) })).status,
    ).toBe(204);
    expect(await put(gw, owner.key, 'vetted.tar', other)).toBe(201);
    for (const [method, headers] of [
      ['GET', basic],
      ['GET', bearer(reader.key)],
      ['HEAD', basic],
      ['GET', { ...basic, range: 'bytes=0-99' }],
    ] as const) {
      const res = await request(link, { method, headers });
      expect(res.status, `${method} ${JSON.stringify(headers)}`).toBe(410);
      if (method === 'GET') expect(codeOf(res.body)).toBe('link_content_changed');
    }
    // The key alone, without the link's parameters, reads what the name holds now.
    const direct = await request(`${gw.url}${base}/vetted.tar/content`, { headers: basic });
    expect(sha256(direct.body)).toBe(sha256(other));
    // A link's parameters on another method are refused even beside a key that could write.
    const query = new URL(link).search;
    for (const [method, target] of [
      ['PUT', `${gw.url}${base}/vetted.tar${query}`],
      ['DELETE', `${gw.url}${base}/vetted.tar${query}`],
      ['PUT', link],
    ] as const) {
      const res = await request(target, {
        method,
        headers: bearer(owner.key),
        body: method === 'DELETE' ? undefined : randomContent(10),
      });
      expect(res.status, `${method} ${new URL(target).pathname}`).toBe(401);
    }
    expect(sha256((await request(`${gw.url}${base}/vetted.tar/content`, { headers: basic })).body)).toBe(sha256(other));
  });

  it('a link of the first format (name only, no digest) is refused with 410 link_outdated', async () => {
    expect(await put(gw, owner.key, 'old.bin', randomContent(100))).toBe(201);
    await presign(gw, owner.key, 'old.bin'); // makes sure a signing secret exists
    const { rows } = await db.pool.query<{ id: string; secret: Buffer }>(
      'SELECT id::text AS id, secret FROM arkvory_presign_secrets WHERE retires_at IS NULL ORDER BY id DESC LIMIT 1',
    );
    const target = `${base}/old.bin/content`;
    const expires = Math.floor(Date.now() / 1000) + 600;
    // Signed exactly as the first format was: a genuine old link, not a forgery.
    const signature = createHmac('sha256', rows[0]!.secret)
      .update(['arkvory-presign-v1', target, owner.keyId, String(expires), rows[0]!.id].join('\n'), 'utf8')
      .digest('base64url');
    const old = `${gw.url}${target}?X-Arkvory-Key=${owner.keyId}&X-Arkvory-Expires=${expires}&X-Arkvory-Secret=${rows[0]!.id}&X-Arkvory-Signature=${signature}`;
    const res = await request(old);
    expect(res.status).toBe(410);
    expect(codeOf(res.body)).toBe('link_outdated');
  });

  it('only the canonical spelling of its numbers verifies (no leading zero, no sign)', async () => {
    expect(await put(gw, owner.key, 'canon.bin', randomContent(100))).toBe(201);
    const link = new URL(await presign(gw, owner.key, 'canon.bin'));
    expect((await request(link.href, { method: 'HEAD' })).status).toBe(200);
    for (const [name, spelled] of [
      ['X-Arkvory-Expires', (v: string) => `0${v}`],
      ['X-Arkvory-Expires', (v: string) => `+${v}`],
      ['X-Arkvory-Expires', (v: string) => `${v}.0`],
      ['X-Arkvory-Date', (v: string) => `00${v}`],
      ['X-Arkvory-Secret', (v: string) => `0${v}`],
    ] as const) {
      const bent = new URL(link.href);
      bent.searchParams.set(name, spelled(link.searchParams.get(name)!));
      const res = await request(bent.href);
      expect(res.status, `${name}=${bent.searchParams.get(name)}`).toBe(401);
      expect(codeOf(res.body)).toBe('unauthorized');
    }
  });

  it("a link's parameters on PUT, DELETE or POST answer 401 as documented, and change nothing", async () => {
    const body = randomContent(100);
    expect(await put(gw, owner.key, 'kept.bin', body)).toBe(201);
    const link = await presign(gw, owner.key, 'kept.bin');
    const query = new URL(link).search;
    for (const [method, target] of [
      ['PUT', link],
      ['DELETE', link],
      ['POST', link],
      ['PUT', `${gw.url}${base}/kept.bin${query}`],
      ['DELETE', `${gw.url}${base}/kept.bin${query}`],
    ] as const) {
      const res = await request(target, { method, body: method === 'DELETE' ? undefined : randomContent(10) });
      expect(res.status, `${method} ${new URL(target).pathname}`).toBe(401);
      expect(codeOf(res.body)).toBe('unauthorized');
      expect(res.headers['www-authenticate']).toBeDefined();
    }
    expect(sha256((await request(link)).body)).toBe(sha256(body));
  });
});

describe('links naming unknown signing secrets', () => {
  it("cost PostgreSQL no query per request, measured in the database's own transaction count", async () => {
    // A database of its own: its transaction count is this test's alone.
    const own = await createTestDatabase();
    try {
      await createRepository(own.pool, 'bind');
      const sa = await createServiceAccount(own.pool, { grants: { bind: 'write' } });
      const dir = await makeTempDir();
      // Observe only: with the shipped ban the flood would be refused before the link is looked at.
      const rules = path.join(dir, 'rules.yaml');
      await writeFile(
        rules,
        'rate_limits:\n  auth_failure:\n    - name: ban_ip_after_auth_failures\n      action: limit\n      characteristics: [ip]\n      limit: 1000000\n      period_s: 60\n      ban_for_s: 1\n',
      );
      const env = { ARKVORY_DATABASE_URL: own.url, ARKVORY_RATE_LIMITS_FILE: rules };
      // The first secret (id 1) retires at once: an id at or below the newest known one.
      await rotatePresignSecret(own.pool, 0);
      await rotatePresignSecret(own.pool, 0);
      const xacts = async () => {
        const r = await own.pool.query<{ n: string }>(
          'SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()',
        );
        return Number(r.rows[0]!.n);
      };
      // PostgreSQL publishes a backend's statistics when it exits (or within seconds): each run is
      // counted from before its gateway starts to after it stopped. The run without the flood is the baseline.
      const run = async (flood: number): Promise<{ used: number; seconds: number; life: number }> => {
        await sleep(1500);
        const before = await xacts();
        const born = performance.now();
        const gateway = await startGateway({ env, dataDir: dir, timeoutMs: 60_000 });
        expect(await put(gateway, sa.key, `f${flood}.bin`, randomContent(64))).toBeLessThan(300);
        const link = new URL(await presign(gateway, sa.key, `f${flood}.bin`));
        const started = performance.now();
        let refused = 0;
        for (let i = 0; i < flood; i += 25) {
          const batch = Array.from({ length: 25 }, (_, j) => {
            const bent = new URL(link.href);
            // Half name a retired secret, half one far above the newest (each would be a lookup).
            bent.searchParams.set('X-Arkvory-Secret', (i + j) % 2 === 0 ? '1' : String(900_000 + i + j));
            return request(bent.href, { method: 'HEAD' }).then((r) => r.status);
          });
          for (const status of await Promise.all(batch)) if (status === 401) refused++;
        }
        const seconds = (performance.now() - started) / 1000;
        expect(refused).toBe(flood);
        expect(await gateway.stop()).toBe(0);
        const life = (performance.now() - born) / 1000;
        await sleep(1500);
        return { used: (await xacts()) - before, seconds, life };
      };
      const baseline = await run(0);
      const FLOOD = 600;
      const flooded = await run(FLOOD);
      // The recheck allowance: 10 at once, 5 a second after that. What a gateway does by the clock
      // (the epoch poll every 500 ms, leases, revocation checks) grows with how long its run took:
      // a loaded machine starts, floods and stops more slowly. The baseline's transactions per
      // second of its run (start-up's own counted as if by the clock: more, never less) times what
      // the flooded run took longer. One lookup per request would add 600.
      const background = (baseline.used / baseline.life) * Math.max(0, flooded.life - baseline.life);
      const bound = 10 + 5 * flooded.seconds + background + 20;
      const seen = `baseline ${baseline.used} in ${baseline.life.toFixed(1)} s, flooded ${flooded.used} in ${flooded.life.toFixed(1)} s`;
      expect(flooded.used - baseline.used, seen).toBeLessThan(bound);
      expect(bound).toBeLessThan(FLOOD / 2);
    } finally {
      await own.drop();
    }
  });
});
