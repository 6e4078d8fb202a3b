/**
 * A delayable link to the db host for one gateway. This kernel has no sch_netem, so the delay is
 * made by a real toxiproxy-server running on the db host: the gateway's ARKVORY_DATABASE_URL points
 * at its listener there, and latency toxics delay each direction. Needs `toxiproxy-server` on PATH
 * or under ${ARKVORY_TOOLS_DIR:-/root/.cache/arkvory-tools}/bin (.ci/run builds it there).
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Toxiproxy, type Proxy, type Toxic } from 'toxiproxy-node-client';
import type { Topology } from './topology.ts';

const API_PORT = 8474;
const LINK_PORT = 15432;

export function toxiproxyBinary(): string {
  const dirs = [
    ...(process.env.PATH ?? '').split(':'),
    path.join(process.env.ARKVORY_TOOLS_DIR ?? '/root/.cache/arkvory-tools', 'bin'),
  ];
  for (const dir of dirs) {
    const candidate = path.join(dir, 'toxiproxy-server');
    if (dir && existsSync(candidate)) return candidate;
  }
  throw new Error(
    'toxiproxy-server is not installed (this kernel has no netem, so the multi-host delay scenario uses it); build it with `GOBIN=/root/.cache/arkvory-tools/bin go install github.com/Shopify/toxiproxy/v2/cmd/toxiproxy-server@v2.12.0` (as .ci/run does)',
  );
}

export interface DatabaseLink {
  /** ARKVORY_DATABASE_URL through the link. */
  readonly databaseUrl: string;
  /** Every byte waits `ms` in each direction from now on. */
  delay(ms: number): Promise<void>;
  clear(): Promise<void>;
}

export async function startDatabaseLink(topology: Topology): Promise<DatabaseLink> {
  const db = topology.hosts.db.address;
  const server = topology.spawn('db', 'toxiproxy-server', toxiproxyBinary(), ['-host', db, '-port', String(API_PORT)]);
  const client = new Toxiproxy(`http://${db}:${API_PORT}`);
  let proxy: Proxy | undefined;
  for (let i = 0; i < 100 && !proxy; i++) {
    if (!server.isRunning()) throw new Error(`toxiproxy-server exited: ${server.logs().slice(-2000)}`);
    try {
      proxy = await client.createProxy({ name: 'writer-db', listen: `${db}:${LINK_PORT}`, upstream: `${db}:5432` });
    } catch {
      await sleep(100);
    }
  }
  if (!proxy) throw new Error(`toxiproxy-server on the db host did not answer: ${server.logs().slice(-2000)}`);
  const url = new URL(topology.databaseUrl);
  url.port = String(LINK_PORT);
  const link = proxy;
  const toxics: Array<Toxic<unknown>> = [];
  return {
    databaseUrl: url.toString(),
    async delay(ms) {
      for (const stream of ['upstream', 'downstream'] as const) {
        toxics.push(
          await link.addToxic({
            name: `delay-${stream}`,
            type: 'latency',
            stream,
            toxicity: 1,
            attributes: { latency: ms, jitter: 0 },
          }),
        );
      }
    },
    async clear() {
      for (const toxic of toxics.splice(0)) await toxic.remove();
    },
  };
}
