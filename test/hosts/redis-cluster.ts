/**
 * A real Redis Cluster for the rate-limit counters: three primaries and three replicas of
 * `redis-server --cluster-enabled yes` on loopback, joined by `redis-cli --cluster create
 * --cluster-replicas 1`. `stop()` kills every node and removes its directory.
 */
import { execFile, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freeLoopbackPort, startRedisServer, waitUntil, type RedisServer } from '../harness/index.ts';

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
  const servers: RedisServer[] = [];
  const stop = async () => {
    for (const c of clients) c.disconnect();
    await Promise.all(servers.map((server) => server.stop('SIGKILL')));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < 6; i++) {
      const port = await freeLoopbackPort();
      const busPort = await freeLoopbackPort();
      const nodeDir = path.join(dir, String(port));
      await mkdir(nodeDir);
      const server = await startRedisServer({
        port,
        args: [
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
        ],
      });
      servers.push(server);
      const { child } = server;
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
      const isHealthy = async () => {
        for (const n of alive()) {
          const info = String(
            await n
              .direct()
              .cluster('INFO')
              .catch(() => ''),
          );
          if (!info.includes('cluster_state:ok')) return false;
        }
        const table = await slotTable();
        const covered = table.reduce((sum, [from, to]) => sum + (to - from + 1), 0);
        const live = new Set(alive().map((n) => n.port));
        // Healthy also means every primary has its replica attached (redis-cli --cluster create
        // returns before the replicas have synced; a failover test needs them).
        const replicated = table.every(([, , ports]) => ports.length >= 2) || nodes.length < 2 * table.length;
        return covered === 16384 && table.every(([, , ports]) => live.has(ports[0]!)) && replicated;
      };
      await waitUntil(isHealthy, { what: 'the Redis Cluster to become healthy', timeoutMs, intervalMs: 100 });
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
