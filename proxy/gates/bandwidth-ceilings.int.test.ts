/**
 * Group and repository ceilings over HTTP on real gateways (issue 40), set through the CLI: a group
 * ceiling holds across a writer and a reader of the shared profile together; a repository ceiling
 * holds while another repository runs at full speed; a repository's bound on concurrent transfers
 * answers 429 busy beyond it.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { type SharedProfile, sharedProfileEnv } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
const SLOTS = 2;
/** Far above the ceilings under test: the global budget never binds here. */
const RATE = 256 * MiB;
const GROUP_RATE = 2 * MiB;
const REPO_RATE = MiB;
const FILE_BYTES = 24 * MiB;
const burstOf = (rate: number) => Math.floor(Math.min(rate / 10, MiB));

let db: TestDatabase & { drop(): Promise<void> };
let writer: GatewayProcess;
let reader: GatewayProcess;
const keys: Record<string, string> = {};

/** The shared profile's settings, known once the database is made. */
let profile: SharedProfile;
const sharedEnv = (role: 'api' | 'reader', slot: number) => sharedProfileEnv({ ...profile, role, slot });

const contentUrl = (gw: GatewayProcess, repo: string) =>
  `${gw.url}/api/v1/repositories/${repo}/artifacts/big.bin/content`;

/** Downloads for at most `ms`; the bytes received and when the last arrived. */
function download(url: string, key: string, ms: number): Promise<{ status: number; bytes: number; lastMs: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let bytes = 0;
    let lastMs = 0;
    let status = 0;
    const done = () => resolve({ status, bytes, lastMs });
    const req = http.get(url, { headers: bearer(key), agent: false }, (res) => {
      status = res.statusCode ?? 0;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        lastMs = performance.now() - started;
      });
      res.on('end', done);
      res.on('error', done);
    });
    req.on('error', reject);
    setTimeout(() => {
      req.destroy();
      done();
    }, ms);
  });
}

async function cli(args: string[]) {
  const result = await runCli(args, { ARKVORY_DATABASE_URL: db.url });
  return { ...result, json: result.code === 0 ? (JSON.parse(result.stdout) as Record<string, unknown>) : undefined };
}

beforeAll(async () => {
  db = await createTestDatabase();
  profile = { databaseUrl: db.url, redis: inject('redisUrl'), slots: SLOTS, downloadBytesPerSecond: RATE };
  const dataDir = await makeTempDir();
  for (const repo of ['slow', 'fast', 'mirror']) await createRepository(db.pool, repo);
  for (const p of ['crawler-1', 'crawler-2', 'slow-user', 'fast-user'])
    keys[p] = (
      await createServiceAccount(db.pool, { name: p, grants: { slow: 'write', fast: 'write', mirror: 'write' } })
    ).key;
  writer = await startGateway({ env: sharedEnv('api', 0), dataDir });
  const body = randomContent(FILE_BYTES);
  for (const repo of ['slow', 'fast', 'mirror']) {
    const put = await request(`${writer.url}/api/v1/repositories/${repo}/artifacts/big.bin`, {
      method: 'PUT',
      headers: { ...bearer(keys['fast-user']!), 'content-type': 'application/octet-stream' },
      body,
    });
    expect(put.status).toBe(201);
  }
  reader = await startGateway({ env: sharedEnv('reader', 1), dataDir });
}, 120_000);

afterAll(async () => {
  await Promise.all([writer, reader].filter(Boolean).map((g) => g.stop('SIGTERM')));
  await db?.drop();
});

describe('group and repository ceilings', () => {
  it('are set through the CLI, and out-of-range values are refused', async () => {
    const group = await cli(['groups', 'set', 'crawlers', '--download', String(GROUP_RATE)]);
    expect(group.code, group.stderr).toBe(0);
    for (const p of ['crawler-1', 'crawler-2']) expect((await cli(['groups', 'add', 'crawlers', p])).code).toBe(0);
    const listed = await cli(['groups', 'list']);
    expect(listed.json).toEqual({
      groups: [
        {
          name: 'crawlers',
          downloadBytesPerSec: GROUP_RATE,
          uploadBytesPerSec: 0,
          members: ['crawler-1', 'crawler-2'],
        },
      ],
    });
    const repo = await cli(['repos', 'ceiling', 'slow', '--download', String(REPO_RATE), '--max-transfers', '1']);
    expect(repo.json).toEqual({ name: 'slow', downloadBytesPerSec: REPO_RATE, uploadBytesPerSec: 0, maxTransfers: 1 });
    const tooLow = await cli(['repos', 'ceiling', 'fast', '--download', '1000']);
    expect(tooLow.code).toBe(1);
    expect(tooLow.stderr).toContain(
      'invalid_request: downloadBytesPerSec must be 0 (no ceiling) or an integer from 65536',
    );
    const typo = await cli(['groups', 'set', 'crawlers', '--download', '2M']);
    expect([typo.code, typo.stdout]).toEqual([2, '']);
    expect((await cli(['groups', 'add', 'nobody-group', 'crawler-1'])).code).toBe(1);
    // The gateways' key and grant caches drop the old ceilings within 2 s (auth epoch).
    await new Promise((resolve) => setTimeout(resolve, 2_500));
  });

  it('a group ceiling holds across both gateways together: members on the writer and the reader', async () => {
    const seconds = 6;
    const [a, b] = await Promise.all([
      download(contentUrl(writer, 'mirror'), keys['crawler-1']!, seconds * 1000),
      download(contentUrl(reader, 'mirror'), keys['crawler-2']!, seconds * 1000),
    ]);
    expect([a.status, b.status]).toEqual([200, 200]);
    // Each gateway enforces floor(GROUP_RATE / SLOTS): together at most rate × t + both bursts.
    const share = Math.floor(GROUP_RATE / SLOTS);
    const bound = GROUP_RATE * seconds + 2 * burstOf(share);
    expect(a.bytes + b.bytes).toBeLessThanOrEqual(bound);
    expect(a.bytes + b.bytes).toBeGreaterThan(0.8 * GROUP_RATE * seconds);
    // Neither gateway's member starves the other.
    for (const d of [a, b]) expect(d.bytes).toBeGreaterThan(0.8 * share * seconds);
  });

  it('a repository ceiling holds while another repository runs at full speed; its transfer bound answers 429', async () => {
    const seconds = 5;
    const slowRun = download(contentUrl(writer, 'slow'), keys['slow-user']!, seconds * 1000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    // The bound is one transfer of `slow` per gateway: a second one, any principal, is busy.
    const second = await request(contentUrl(writer, 'slow'), { headers: bearer(keys['fast-user']!) });
    expect(second.status).toBe(429);
    expect(JSON.parse(second.body.toString()).code).toBe('busy');
    expect(second.headers['retry-after']).toBe('1');
    const fast = await download(contentUrl(writer, 'fast'), keys['fast-user']!, 20_000);
    const slow = await slowRun;
    expect(fast.bytes).toBe(FILE_BYTES);
    const share = Math.floor(REPO_RATE / SLOTS);
    expect(slow.bytes).toBeLessThanOrEqual(share * seconds + burstOf(share));
    expect(slow.bytes).toBeGreaterThan(0.8 * share * seconds);
    // The other repository is not held to it: far above the slow one's per-gateway ceiling.
    expect(FILE_BYTES / (fast.lastMs / 1000)).toBeGreaterThan(8 * share);
    // Once the slow transfer has ended, its slot is free again.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const again = await download(contentUrl(writer, 'slow'), keys['fast-user']!, 500);
    expect(again.status).toBe(200);
  }, 40_000);
});
