/**
 * A real Redis Cluster for the rate-limit counters: three primaries and three replicas of
 * `redis-server --cluster-enabled yes` on loopback, joined by `redis-cli --cluster create
 * --cluster-replicas 1`. `stop()` kills every node and removes its directory.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freeLoopbackPort } from '../harness/index.ts';

const run = promisify(execFile);
/** How long a primary may be unreachable before its replica is promoted. */
export const NODE_TIMEOUT_MS = 1000;

export interface ClusterNode {
  readonly port: number;
  readonly child: ChildProcess;
  /** A plain (non-cluster) client of this one node, for inspection. */
  direct(): Redis;
}

export interface RedisClusterHandle {
  readonly nodes: readonly ClusterNode[];
  /** `redis://127.0.0.1:p1,redis://127.0.0.1:p2,…` (ARKVORY_REDIS_URL for a cluster). */
  readonly url: string;
  /** The node serving `slot` as primary right now (asked of any live node). */
  primaryOf(slot: number): Promise<ClusterNode>;
  replicaOf(primary: ClusterNode): Promise<ClusterNode>;
  /** Until every live node reports cluster_state:ok and `slot` is served by a live primary. */
  waitHealthy(timeoutMs: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startRedisCluster(): Promise<RedisClusterHandle> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'akh-redis-cluster-'));
  const nodes: ClusterNode[] = [];
  const clients: Redis[] = [];
  const stop = async () => {
    for (const c of clients) c.disconnect();
    await Promise.all(
      nodes.map(async (n) => {
        if (n.child.exitCode !== null || n.child.signalCode !== null) return;
        const exited = new Promise((r) => n.child.once('exit', r));
        n.child.kill('SIGKILL');
        await exited;
      }),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < 6; i++) {
      const port = await freeLoopbackPort();
      const busPort = await freeLoopbackPort();
      const nodeDir = path.join(dir, String(port));
      await mkdir(nodeDir);
      const child = spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--cluster-enabled',
          'yes',
          '--cluster-port',
          String(busPort),
          '--cluster-config-file',
          path.join(nodeDir, 'nodes.conf'),
          '--cluster-node-timeout',
          String(NODE_TIMEOUT_MS),
          '--dir',
          nodeDir,
          '--save',
          '',
          '--appendonly',
          'no',
        ],
        { stdio: 'ignore' },
      );
      const failed = new Promise<never>((_, reject) =>
        child.once('error', (err: NodeJS.ErrnoException) =>
          reject(
            new Error(
              err.code === 'ENOENT'
                ? 'redis-server is not on PATH; on Debian: apt-get install -y redis-server'
                : err.message,
            ),
          ),
        ),
      );
      failed.catch(() => {});
      let client: Redis | undefined;
      const node: ClusterNode = {
        port,
        child,
        direct() {
          if (!client) {
            client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, retryStrategy: () => null });
            client.on('error', () => {});
            clients.push(client);
          }
          return client;
        },
      };
      nodes.push(node);
      await Promise.race([waitPing(port), failed]);
    }
    await run('redis-cli', [
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      '1',
      '--cluster-yes',
    ]);
  } catch (err) {
    await stop();
    throw err;
  }

  const alive = () => nodes.filter((n) => n.child.exitCode === null && n.child.signalCode === null);
  const slotTable = async (): Promise<Array<[number, number, number[]]>> => {
    const probe = alive()[0]!.direct();
    const slots = await probe.cluster('SLOTS');
    return slots.map(([from, to, ...servers]) => [from, to, servers.map((s) => Number(s[1]))]);
  };
  const handle: RedisClusterHandle = {
    nodes,
    url: nodes
      .slice(0, 3)
      .map((n) => `redis://127.0.0.1:${n.port}`)
      .join(','),
    async primaryOf(slot) {
      const row = (await slotTable()).find(([from, to]) => slot >= from && slot <= to);
      if (!row) throw new Error(`slot ${slot} is not served`);
      return nodes.find((n) => n.port === row[2][0])!;
    },
    async replicaOf(primary) {
      const row = (await slotTable()).find(([, , ports]) => ports[0] === primary.port);
      const replica = row?.[2][1];
      if (replica === undefined) throw new Error(`primary ${primary.port} has no replica`);
      return nodes.find((n) => n.port === replica)!;
    },
    async waitHealthy(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        let ok = true;
        for (const n of alive()) {
          const info = String(
            await n
              .direct()
              .cluster('INFO')
              .catch(() => ''),
          );
          if (!info.includes('cluster_state:ok')) ok = false;
        }
        if (ok) {
          const table = await slotTable();
          const covered = table.reduce((sum, [from, to]) => sum + (to - from + 1), 0);
          const live = new Set(alive().map((n) => n.port));
          // Healthy also means every primary has its replica attached (redis-cli --cluster create
          // returns before the replicas have synced; a failover test needs them).
          const replicated = table.every(([, , ports]) => ports.length >= 2) || nodes.length < 2 * table.length;
          if (covered === 16384 && table.every(([, , ports]) => live.has(ports[0]!)) && replicated) return;
        }
        if (Date.now() > deadline) throw new Error(`the Redis Cluster did not become healthy within ${timeoutMs} ms`);
        await sleep(100);
      }
    },
    stop,
  };
  try {
    await handle.waitHealthy(20_000);
  } catch (err) {
    await stop();
    throw err;
  }
  return handle;
}

async function waitPing(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const c = new Redis({
      host: '127.0.0.1',
      port,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    c.on('error', () => {});
    try {
      await c.connect();
      await c.ping();
      return;
    } catch {
      await sleep(50);
    } finally {
      c.disconnect();
    }
  }
  throw new Error(`redis-server on port ${port} did not answer within 5 s`);
}
