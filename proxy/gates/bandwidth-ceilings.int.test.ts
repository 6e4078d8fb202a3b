/**
 * Group and repository ceilings over HTTP on real gateways (issue 40), set through the CLI: a group
 * ceiling holds across a writer and a reader of the shared profile together; a repository ceiling
 * holds while another repository runs at full speed; a repository's bound on concurrent transfers
 * answers 429 busy beyond it, on each gateway of the shared profile, and for a whole instance of one
 * process or of two workers.
 */
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
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
          membersNextCursor: null,
        },
      ],
      nextCursor: null,
    });
    const repo = await cli(['repos', 'ceiling', 'slow', '--download', String(REPO_RATE), '--max-transfers', '1']);
    expect(repo.json).toEqual({ name: 'slow', downloadBytesPerSec: REPO_RATE, uploadBytesPerSec: 0, maxTransfers: 1 });
    // A value the store would refuse is a usage error, said before the database is reached.
    const tooLow = await cli(['repos', 'ceiling', 'fast', '--download', '1000']);
    expect([tooLow.code, tooLow.stdout]).toEqual([2, '']);
    expect(tooLow.stderr).toBe(
      `arkvory repos ceiling: --download must be 0 (no ceiling) or an integer from 65536 to ${2 ** 40} (got 1000) (see arkvory repos ceiling --help)\n`,
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

/**
 * The bound is checked on a gateway of one process and on one instance of two workers
 * (ARKVORY_WORKERS=2): the same assertions, since the bound is the instance's.
 */
const WORKER_COUNTS = [1, 2] as const;
const MAX_TRANSFERS = 2;

describe('a repository’s bound on concurrent transfers, for the whole instance', () => {
  // Its own database: an instance is a writer, which the shared profile's writer above already is.
  let own: TestDatabase & { drop(): Promise<void> };
  const clients: Client[] = [];

  beforeAll(async () => {
    own = await createTestDatabase();
  }, 60_000);

  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.destroy()));
  });

  afterAll(async () => {
    await own?.drop();
  });

  /** `counts[w]` connections on worker `w`, each its own client (the worker from /health/status). */
  async function connectionsOn(gw: GatewayProcess, counts: readonly number[]): Promise<Client[][]> {
    const byWorker = counts.map((): Client[] => []);
    for (let i = 0; i < 128 && byWorker.some((list, w) => list.length < counts[w]!); i++) {
      const client = new Client(gw.url, { pipelining: 1 });
      clients.push(client);
      const res = await client.request({ path: '/health/status', method: 'GET' });
      const { workerIndex } = (await res.body.json()) as { workerIndex: number };
      byWorker[workerIndex]!.push(client);
    }
    for (const [w, list] of byWorker.entries())
      expect(list.length, `connections on worker ${w}`).toBeGreaterThanOrEqual(counts[w]!);
    return byWorker.map((list, w) => list.slice(0, counts[w]));
  }

  /** A GET of the big file over `client`, left unread: the gateway cannot finish it, so it holds its transfer. */
  async function startDownload(client: Client, repo: string, key: string) {
    const res = await client.request({
      path: `/api/v1/repositories/${repo}/artifacts/big.bin/content`,
      method: 'GET',
      headers: bearer(key),
    });
    return { status: res.statusCode, headers: res.headers, body: res.body };
  }

  /** An instance of `workers` serving `big.bin` in a new repository bounded to MAX_TRANSFERS transfers. */
  async function startBounded(workers: number, repo: string) {
    await createRepository(own.pool, repo);
    const set = await runCli(['repos', 'ceiling', repo, '--max-transfers', String(MAX_TRANSFERS)], {
      ARKVORY_DATABASE_URL: own.url,
    });
    expect(set.code, set.stderr).toBe(0);
    const holder = await createServiceAccount(own.pool, { grants: { [repo]: 'write' } });
    const other = await createServiceAccount(own.pool, { grants: { [repo]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: own.url, ARKVORY_WORKERS: String(workers) } });
    const put = await request(`${gw.url}/api/v1/repositories/${repo}/artifacts/big.bin`, {
      method: 'PUT',
      headers: { ...bearer(holder.key), 'content-type': 'application/octet-stream' },
      body: randomContent(FILE_BYTES),
    });
    expect(put.status).toBe(201);
    return { gw, holder: holder.key, other: other.key };
  }

  /** A download over `probe` tried every 50 ms while it is refused busy, for at most `ms`: the last answer's status. */
  async function downloadOnceFree(probe: Client, repo: string, key: string, ms: number): Promise<number> {
    const started = performance.now();
    let answer = await startDownload(probe, repo, key);
    while (answer.status === 429 && performance.now() - started < ms) {
      await answer.body.dump();
      await sleep(50);
      answer = await startDownload(probe, repo, key);
    }
    return answer.status;
  }

  describe.each(WORKER_COUNTS)('%i worker(s)', (workers) => {
    it(`${MAX_TRANSFERS} transfers held across every worker: one more gets 429 busy on each worker, download or upload; a closed one frees its place for any worker`, async () => {
      const repo = `bounded-${workers}`;
      const { gw, holder, other } = await startBounded(workers, repo);
      try {
        // Held transfer i runs on worker i % workers; each worker has one more connection to try beyond the bound.
        const holdsOn = (w: number) =>
          Array.from({ length: MAX_TRANSFERS }, (_, i) => i).filter((i) => i % workers === w);
        const counts = Array.from({ length: workers }, (_, w) => holdsOn(w).length + 1);
        const connections = await connectionsOn(gw, counts);
        const held = await Promise.all(
          Array.from({ length: MAX_TRANSFERS }, (_, i) =>
            startDownload(connections[i % workers]![Math.floor(i / workers)]!, repo, holder),
          ),
        );
        expect(held.map((h) => h.status)).toEqual(held.map(() => 200));

        const probes = connections.map((list) => list.at(-1)!);
        for (const [w, probe] of probes.entries()) {
          const refused = await startDownload(probe, repo, other);
          expect(refused.status, `a download beyond the bound on worker ${w}`).toBe(429);
          expect(refused.headers['retry-after']).toBe('1');
          const body = (await refused.body.json()) as { code: string; message: string };
          expect(body.code).toBe('busy');
          expect(body.message).toContain(`Repository ${repo}`);
        }
        const upload = await request(`${gw.url}/api/v1/repositories/${repo}/artifacts/more.bin`, {
          method: 'PUT',
          headers: { ...bearer(other), 'content-type': 'application/octet-stream' },
          body: randomContent(1024),
        });
        expect(upload.status, 'an upload beyond the bound').toBe(429);
        expect(JSON.parse(upload.body.toString())).toMatchObject({ code: 'busy' });

        // The last held transfer ends (on the last worker); worker 0 may then start one.
        await connections[(MAX_TRANSFERS - 1) % workers]![Math.floor((MAX_TRANSFERS - 1) / workers)]!.destroy();
        expect(await downloadOnceFree(probes[0]!, repo, other, 2000), 'a download once a held one closed').toBe(200);
      } finally {
        await Promise.all(clients.splice(0).map((c) => c.destroy()));
        await gw.stop();
      }
    }, 60_000);
  });

  it('a worker killed while it holds every transfer of the bound: they come back, and the other worker starts one', async () => {
    const repo = 'bounded-killed';
    const { gw, holder, other } = await startBounded(2, repo);
    try {
      const [onZero, onOne] = await connectionsOn(gw, [1, MAX_TRANSFERS]);
      const held = await Promise.all(onOne!.map((c) => startDownload(c, repo, holder)));
      expect(held.map((h) => h.status)).toEqual(held.map(() => 200));
      const refused = await startDownload(onZero![0]!, repo, other);
      expect(refused.status).toBe(429);
      await refused.body.dump();

      // The log's line of worker 1 names its pid (pino's `pid`); it is a child of the instance.
      const line = gw.logLines().find((l) => l.worker === 1 && typeof l.pid === 'number');
      expect(line, 'a log line of worker 1 with its pid').toBeDefined();
      const victim = line!.pid as number;
      expect(victim).not.toBe(gw.child.pid);
      process.kill(victim, 'SIGKILL');
      // The coordinating process releases a dead worker's holds as it learns of the exit.
      expect(await downloadOnceFree(onZero![0]!, repo, other, 2000)).toBe(200);
    } finally {
      await Promise.all(clients.splice(0).map((c) => c.destroy()));
      await gw.stop();
    }
  }, 60_000);
});
