import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pino } from 'pino';
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { buildPlan } from '../../policy/rate-limit/evaluate.ts';
import { createLimiter } from '../../policy/rate-limit/limiter.ts';
import { createRedisRuleDocuments } from '../../policy/rate-limit/redis-rule-documents.ts';
import { createRedisCounterStore } from '../../policy/rate-limit/redis-counter-store.ts';
import { ruleDocumentsPrefix } from '../../policy/rate-limit/redis-target.ts';
import { defineRule, type LimiterRules } from '../../policy/rate-limit/rules.ts';
import { counterStoreConformance, T0 } from '../conformance/counter-store.ts';
import { systemClock } from '../../policy/clock.ts';
import { createRateLimitRedis, type RateLimitRedis } from '../../proxy/gates/rate-limit-redis.ts';
import { bearer, createRepository, createServiceAccount } from '../support/auth.ts';
import { createTestDatabase } from '../support/database.ts';
import { makeTempDir, runCli, startGateway } from '../support/gateway.ts';
import { NODE_TIMEOUT_MS, startRedisCluster, type RedisClusterHandle } from './redis-cluster.ts';
import { readsByPrincipal, roomInWindow, waitUntil, writeRateLimitsFile } from '../harness/index.ts';

let cluster: RedisClusterHandle;
let client: RateLimitRedis;
const log = pino({ level: 'silent' });

beforeAll(async () => {
  cluster = await startRedisCluster();
  client = createRateLimitRedis(cluster.url, log, systemClock);
  await client.connect();
}, 60_000);

afterAll(async () => {
  client?.disconnect();
  await cluster?.stop();
});

let n = 0;
counterStoreConformance('redis cluster (3 primaries, 3 replicas)', () => ({
  store: createRedisCounterStore(client),
  prefix: `arkvory:t:cluster:${++n}:`,
}));

describe('rule documents on a cluster', () => {
  it('reads, compare-and-sets and lists documents that share one hash tag', async () => {
    const docs = createRedisRuleDocuments(client, ruleDocumentsPrefix('arkvory:t:docs:', true));
    const rules: LimiterRules = {
      file_rules: { rules: [] },
      published_rules: { rules: [] },
      default_rules: { rules: [] },
    };
    await docs.update(
      ['gateway_request', 'auth_failure'],
      () =>
        new Map([
          ['gateway_request', rules],
          ['auth_failure', rules],
        ]),
    );
    expect(await docs.listIndexed()).toEqual(['auth_failure', 'gateway_request']);
    expect((await docs.read(['gateway_request', 'transfer_bytes'])).size).toBe(1);
    await docs.remove(['gateway_request', 'auth_failure']);
    expect(await docs.listIndexed()).toEqual([]);
  });
});

describe('backup and restore of rule documents on a cluster', () => {
  it('a backup saves the rules published on the cluster, and a restore puts them back there', async () => {
    const db = await createTestDatabase();
    const drops = [db.drop];
    try {
      const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
      await writer.stop('SIGTERM');
      const source = {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_DATA_DIR: writer.dataDir,
        ARKVORY_REDIS_URL: cluster.url,
        ARKVORY_REDIS_KEY_PREFIX: 'arkvory:t:backup-a:',
      };
      const rules = path.join(await makeTempDir('arkvory-rules-'), 'publish.yaml');
      await writeFile(
        rules,
        'rate_limits:\n  transfer_bytes:\n    - name: bytes_per_principal_per_day\n      action: limit\n      characteristics: [principal]\n      limit: 10000000000\n      period_s: 86400\n',
      );
      const publish = await runCli(['ratelimit', 'publish', rules], source);
      expect(publish.code, publish.stderr).toBe(0);
      const destination = await makeTempDir('arkvory-backups-');
      const backup = await runCli(['backup', destination], source);
      expect(backup.code, backup.stderr).toBe(0);
      const saved = (JSON.parse(backup.stdout) as { ruleDocuments: number }).ruleDocuments;
      expect(saved).toBeGreaterThanOrEqual(1);

      const target = await createTestDatabase({ migrated: false });
      drops.push(target.drop);
      const env = {
        ARKVORY_DATABASE_URL: target.url,
        ARKVORY_DATA_DIR: await makeTempDir(),
        ARKVORY_REDIS_URL: cluster.url,
        ARKVORY_REDIS_KEY_PREFIX: 'arkvory:t:backup-b:',
      };
      const restore = await runCli(['restore', destination], env);
      expect(restore.code, restore.stderr).toBe(0);
      expect(JSON.parse(restore.stdout)).toMatchObject({ ruleDocuments: saved });
      const shown = await runCli(['ratelimit', 'show', 'transfer_bytes'], env);
      expect(shown.code, shown.stderr).toBe(0);
      const limiter = (
        JSON.parse(shown.stdout) as {
          limiters: Array<{ tiers: { published_rules: { rules: Array<{ name: string }> } } }>;
        }
      ).limiters[0]!;
      expect(limiter.tiers.published_rules.rules.map((r) => r.name)).toEqual(['bytes_per_principal_per_day']);
    } finally {
      for (const drop of drops) await drop();
    }
  }, 120_000);
});

describe('gateways on the cluster', () => {
  it('share one request budget across two processes; two rules on different slots both count', async () => {
    // The budget counts per aligned wall-clock hour (keys.ts): requests on both sides of a window's
    // end count in two windows, and the fifth passes. With 60 s, five requests once straddled a
    // minute in CI (the first at 17:05:59.98, the second at 17:06:00.01): an hour makes the wait
    // for a window with room (below) rare.
    const periodS = 3600;
    const db = await createTestDatabase();
    try {
      await createRepository(db.pool, 'r');
      const { key } = await createServiceAccount(db.pool, { scopes: ['read'], grants: { r: 'read' } });
      const file = await writeRateLimitsFile(
        {
          gateway_request: [
            readsByPrincipal('cluster_reads_by_principal', 4, periodS),
            { name: 'cluster_reads_by_ip', action: 'log', characteristics: ['ip'], limit: 1000, period_s: 60 },
          ],
        },
        await makeTempDir('arkvory-rules-'), // removed when the file ends
      );
      // A writer and a reader of the shared profile: two processes, one principal, one cluster.
      const env = {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REDIS_URL: cluster.url,
        ARKVORY_RATE_LIMITS_FILE: file,
        ARKVORY_REDIS_KEY_PREFIX: 'arkvory:t:gw:',
        ARKVORY_GATEWAY_SLOTS: '2',
        ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(64 * 1024 * 1024),
        // The count must be exact: a cluster call past the 100 ms default would fail open (and log a
        // warning) under the whole suite's load.
        ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '2000',
      };
      const a = await startGateway({ env: { ...env, ARKVORY_ROLE: 'api', ARKVORY_GATEWAY_SLOT: '0' } });
      const b = await startGateway({
        env: { ...env, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1' },
        dataDir: a.dataDir,
      });
      // All five checks in one window: each takes at most the 2 s timeout above.
      await roomInWindow(periodS * 1000, 10_000);
      const statuses: number[] = [];
      for (const gw of [a, b, a, b, a]) {
        const res = await fetch(`${gw.url}/api/v1/repositories/r/artifacts/none/content`, { headers: bearer(key) });
        statuses.push(res.status);
        if (res.status === 429) {
          expect(res.headers.get('retry-after')).toMatch(/^\d+$/);
          expect(res.headers.get('ratelimit-policy')).toBe(`"cluster_reads_by_principal";q=4;w=${periodS}`);
        }
        await res.arrayBuffer();
      }
      expect(statuses).toEqual([404, 404, 404, 404, 429]);
      const ready = (await (await fetch(`${a.url}/health/ready`, { headers: bearer(key) })).json()) as {
        rateLimits: { counters: string };
      };
      expect(ready.rateLimits.counters).toBe('redis');
      // Both rules were counted, each under its own hash tag (different slots of the cluster).
      const keys: string[] = [];
      for (const node of (client as Cluster).nodes('master')) keys.push(...(await node.keys('arkvory:t:gw:rl:*')));
      expect(keys.some((k) => k.includes('{cluster_reads_by_principal|'))).toBe(true);
      expect(keys.some((k) => k.includes('{cluster_reads_by_ip|'))).toBe(true);
      await a.stop();
      await b.stop();
    } finally {
      await db.drop();
    }
  }, 90_000);
});

describe('failover of a primary', () => {
  it('fails open within the timeout while the slot has no primary, then counts on from the replica', async () => {
    const TIMEOUT_MS = 500;
    const rule = defineRule({ name: 'failover', action: 'limit', characteristics: ['ip'], limit: 100, periodS: 3600 });
    const clock = new ManualClock(T0, 0);
    const prefix = 'arkvory:t:failover:';
    const limiter = createLimiter(
      { store: createRedisCounterStore(client), clock, log, keyPrefix: prefix, timeoutMs: TIMEOUT_MS },
      { name: 'lim', rules: [rule] },
    );
    const id = { ip: '10.0.0.7' };
    const counterKey = buildPlan(prefix, 'lim', [rule], id, T0).counting[0]!.counterKey;
    const slot = Number(await (client as Cluster).cluster('KEYSLOT', counterKey));
    const primary = await cluster.primaryOf(slot);
    const replica = await cluster.replicaOf(primary);

    expect((await limiter.check(id)).info?.remaining).toBe(99);
    expect((await limiter.check(id)).info?.remaining).toBe(98);
    // The replica has the count before the primary dies (replication is asynchronous).
    const replicaClient = replica.direct();
    await replicaClient.call('READONLY');
    await waitUntil(async () => (await replicaClient.get(counterKey)) === '2', {
      what: 'the replica to hold the count',
      timeoutMs: 5000,
      intervalMs: 100,
      retryOnError: true,
    });

    primary.child.kill('SIGKILL');
    await new Promise((r) => primary.child.once('exit', r));
    const started = performance.now();
    const during = await limiter.check(id);
    const elapsed = performance.now() - started;
    expect(during.action).toBe('allow');
    expect(during.error).toBeDefined();
    // Fail-open is bounded by the limiter's timeout (plus a loaded machine's timer slack).
    expect(elapsed).toBeLessThan(TIMEOUT_MS + 1000);

    // The replica is promoted after the node timeout; the client follows and counting resumes.
    let resumed: Awaited<ReturnType<typeof limiter.check>> | undefined;
    await waitUntil(
      async () => {
        const r = await limiter.check(id);
        if (r.error === undefined) resumed = r;
        return r.error === undefined;
      },
      {
        what: 'counting to resume after the failover',
        timeoutMs: NODE_TIMEOUT_MS * 20,
        intervalMs: 100,
        retryOnError: true,
      },
    );
    expect((await cluster.primaryOf(slot)).port).toBe(replica.port);
    // Counting goes on from the 2 replicated before the kill, never from zero. A check that failed
    // open may still reach the new primary a little later (ioredis re-sends a command after a
    // failover): that counts it once, so later checks only ever see fewer remaining.
    const remaining = resumed!.info!.remaining;
    expect(remaining).toBeLessThanOrEqual(97);
    expect(remaining).toBeGreaterThanOrEqual(97 - 40);
    const next = await limiter.check(id);
    expect(next.error).toBeUndefined();
    expect(next.info!.remaining).toBeLessThan(remaining);
  }, 60_000);
});
