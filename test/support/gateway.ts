/**
 * Spawns real gateway processes (`arkvory serve`) on free loopback ports, waits for
 * `/health/status`, captures their logs, and kills whatever is left when the test file ends.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, onTestFinished } from 'vitest';
import { freeLoopbackPort } from '../../proxy/server/embedded-database.ts';
import { loadOpenApiDocument, undescribedResponses } from '../../proxy/openapi/contract.ts';
import { deleteKeysWithPrefix } from './redis.ts';
import { runProcess, type ProcessResult } from './run-process.ts';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CLI = path.join(ROOT, 'bin/arkvory.js');

export interface GatewayProcess {
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  readonly child: ChildProcess;
  /** Everything the process wrote to stdout and stderr so far. */
  logs(): string;
  /** Parsed JSON log lines (stdout). */
  logLines(): Array<Record<string, unknown>>;
  /** Sends a signal and resolves with the exit code (or signal name). */
  stop(signal?: NodeJS.Signals): Promise<number | string>;
  exited: Promise<number | string>;
}

export interface StartOptions {
  env?: Record<string, string | undefined>;
  dataDir?: string;
  /** Resolve once the process listens, whatever /health/status says. */
  waitFor?: 'serving' | 'listening' | 'none';
  timeoutMs?: number;
  /** A launcher the gateway runs under, e.g. `['prlimit', '--nofile=256:256', '--']`. */
  wrap?: string[];
}

const running = new Set<GatewayProcess>();
/** Every gateway this test file started: their responses are checked against the OpenAPI document. */
const started: GatewayProcess[] = [];
const tempDirs: string[] = [];
const dataDirByDatabase = new Map<string, Promise<string>>();

// Registered when a test file imports this module (a hook added later, from inside a test or
// another hook, would never run): stop what is left, remove temp dirs, check the contract.
/**
 * Gateways of one test file share one Redis key prefix unless the test sets its own (shared-profile
 * gateways must see each other's published rules); every prefix a gateway used, with its Redis, is
 * emptied when the file ends, so no run leaves keys behind.
 */
const FILE_REDIS_PREFIX = `arkvory:t:${randomBytes(6).toString('hex')}:gw:`;
const usedRedisPrefixes = new Map<string, Set<string>>();

async function deleteUsedRedisKeys(): Promise<void> {
  for (const [url, prefixes] of usedRedisPrefixes) {
    if (url.includes(',')) continue; // a Redis Cluster (test/hosts/redis-cluster.ts): its harness removes it whole
    const client = new Redis(url, {
      maxRetriesPerRequest: 1,
      lazyConnect: true,
      connectTimeout: 2000,
      commandTimeout: 2000,
      retryStrategy: () => null,
    });
    client.on('error', () => {}); // a Redis (or proxy) already gone is handled below, not printed
    try {
      await client.connect();
      for (const prefix of prefixes) if (prefix.length > 0) await deleteKeysWithPrefix(client, prefix);
    } catch {
      // Redis gone (a test stopped it): nothing to delete there.
    } finally {
      client.disconnect();
    }
  }
  usedRedisPrefixes.clear();
}

afterAll(async () => {
  await Promise.all([...running].map((g) => stopGently(g)));
  await deleteUsedRedisKeys();
  for (const dir of tempDirs.splice(0)) await rm(dir, { recursive: true, force: true });
  await checkResponsesAgainstContract(started.splice(0));
});

export async function makeTempDir(prefix = 'arkvory-data-'): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  // The embedded PostgreSQL (as user postgres) must be able to traverse a data dir made by root.
  await chmod(dir, 0o755);
  tempDirs.push(dir);
  return dir;
}

/** Child env: only what the test gives plus PATH/HOME; nothing of the harness's ARKVORY_TEST_*. */
function childEnv(extra: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    LANG: process.env.LANG ?? 'C.UTF-8',
  };
  for (const [k, v] of Object.entries(extra)) if (v !== undefined) env[k] = v;
  return env;
}

/** SIGTERM (so an embedded PostgreSQL stops with it), SIGKILL after 10 s. */
async function stopGently(gateway: GatewayProcess): Promise<void> {
  const timer = setTimeout(() => gateway.child.kill('SIGKILL'), 10_000);
  await gateway.stop('SIGTERM');
  clearTimeout(timer);
}

export function runCli(
  args: string[],
  env: Record<string, string | undefined>,
  input?: string,
): Promise<ProcessResult> {
  return runProcess(process.execPath, [CLI, ...args], { env: childEnv(env), cwd: ROOT, input: input ?? '' });
}

export async function startGateway(options: StartOptions = {}): Promise<GatewayProcess> {
  const port = options.env?.ARKVORY_PORT ? Number(options.env.ARKVORY_PORT) : await freeLoopbackPort();
  // A database is bound to one storage root (storage-id); gateways started on the same database
  // without an explicit dataDir share one root, as they would in production.
  const databaseUrl = options.env?.ARKVORY_DATABASE_URL;
  let sharedDir = databaseUrl && !options.dataDir ? dataDirByDatabase.get(databaseUrl) : undefined;
  if (databaseUrl && !options.dataDir && !sharedDir) dataDirByDatabase.set(databaseUrl, (sharedDir = makeTempDir()));
  const dataDir = options.dataDir ?? (await sharedDir) ?? (await makeTempDir());
  const redisUrl = options.env?.ARKVORY_REDIS_URL;
  const redisPrefix = options.env?.ARKVORY_REDIS_KEY_PREFIX ?? FILE_REDIS_PREFIX;
  if (redisUrl) {
    if (!usedRedisPrefixes.has(redisUrl)) usedRedisPrefixes.set(redisUrl, new Set());
    usedRedisPrefixes.get(redisUrl)!.add(redisPrefix);
  }
  const env = childEnv({
    ARKVORY_LOG_LEVEL: 'info',
    ARKVORY_DATA_DIR: dataDir,
    ...options.env,
    ...(redisUrl ? { ARKVORY_REDIS_KEY_PREFIX: redisPrefix } : {}),
    ARKVORY_PORT: String(port),
    ARKVORY_HOST: '127.0.0.1',
  });
  const [command, ...args] = [...(options.wrap ?? []), process.execPath, CLI, 'serve'];
  const child = spawn(command!, args, { env, cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  const url = `http://127.0.0.1:${port}`;
  const gateway: GatewayProcess = {
    url,
    port,
    dataDir,
    child,
    exited,
    logs: () => stdout + stderr,
    logLines: () =>
      stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const code = await exited;
      running.delete(gateway);
      return code;
    },
  };
  running.add(gateway);
  started.push(gateway);
  // A gateway started inside a test ends with it (one writer per database: the next test may need
  // its own); one started in a hook lives until the file ends.
  try {
    onTestFinished(() => stopGently(gateway));
  } catch {
    // not inside a test
  }
  const waitFor = options.waitFor ?? 'serving';
  if (waitFor === 'none') return gateway;
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  let exitedEarly = false;
  void exited.then(() => (exitedEarly = true));
  while (Date.now() < deadline) {
    if (exitedEarly) throw new Error(`gateway exited during startup (${await exited}):\n${gateway.logs()}`);
    try {
      const res = await fetch(`${url}/health/status`);
      await res.arrayBuffer();
      if (waitFor === 'listening' || res.status === 200) return gateway;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  await gateway.stop('SIGKILL');
  throw new Error(`gateway did not become ${waitFor} within the timeout:\n${gateway.logs()}`);
}

/** JSON log lines of stdout; a line cut short by a kill is ignored. */
function parsedLines(gateway: GatewayProcess): Array<Record<string, unknown>> {
  const lines: Array<Record<string, unknown>> = [];
  for (const line of gateway.logs().split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // truncated by SIGKILL
    }
  }
  return lines;
}

/**
 * The contract over the whole integration suite: every response any gateway of this file gave
 * (its `request` log lines: method, route template, status) must be one proxy/openapi/openapi.yaml
 * describes; otherwise the file fails, naming each undescribed response.
 */
async function checkResponsesAgainstContract(gateways: GatewayProcess[]): Promise<void> {
  if (gateways.length === 0) return;
  const problems = undescribedResponses(await loadOpenApiDocument(), gateways.flatMap(parsedLines));
  if (problems.length > 0)
    throw new Error(
      `responses the OpenAPI document (proxy/openapi/openapi.yaml) does not describe; document them or fix the route:\n${problems.join('\n')}`,
    );
}
