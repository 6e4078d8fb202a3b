/**
 * The vitest layer over test/harness's gateways: every gateway a test file starts gets a data
 * directory and a Redis key prefix, is stopped when its test (or, started in a hook, the file) ends,
 * and its responses are checked against the OpenAPI document when the file ends.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { onTestFinished } from 'vitest';
import { onFileEnd } from './file-end.ts';
import type { OpenApiDocument } from '../../proxy/openapi/contract.ts';
import {
  makeTempDir as makeHarnessTempDir,
  runCli,
  startGateway as startHarnessGateway,
  STOP_GRACE_MS,
  type GatewayProcess as HarnessGateway,
  type StartedWhen,
} from '../harness/index.ts';
import { deleteKeysWithPrefix } from './redis.ts';

export { ARKVORY_BIN as CLI, REPO_ROOT as ROOT } from '../harness/paths.ts';
export { runCli };

export interface GatewayProcess extends HarnessGateway {
  readonly dataDir: string;
}

export interface StartOptions {
  env?: Record<string, string | undefined>;
  dataDir?: string;
  /** `listening`: resolve once the process listens, whatever /health/status says. */
  waitFor?: StartedWhen;
  timeoutMs?: number;
  /** A launcher the gateway runs under, e.g. `['prlimit', '--nofile=256:256', '--']`. */
  wrap?: string[];
}

const running = new Set<GatewayProcess>();
/** Every gateway this test file started: their responses are checked against the OpenAPI document. */
const started: GatewayProcess[] = [];
const tempDirs: string[] = [];
const dataDirByDatabase = new Map<string, Promise<string>>();

/**
 * Gateways of one test file share one Redis key prefix unless the test sets its own (shared-profile
 * gateways must see each other's published rules); every prefix a gateway used, with its Redis, is
 * emptied when the file ends, so no run leaves keys behind.
 */
const FILE_REDIS_PREFIX = `arkvory:t:${randomBytes(6).toString('hex')}:gw:`;
const usedRedisPrefixes = new Map<string, Set<string>>();

// ioredis and the OpenAPI contract are loaded when a file's gateways used them, at its end: every
// integration file imports this module, most never touch Redis.
async function deleteUsedRedisKeys(): Promise<void> {
  if (usedRedisPrefixes.size === 0) return;
  const { Redis } = await import('ioredis');
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

// When each test file ends (file-end.ts): stop what is left, remove temp dirs, check the contract.
onFileEnd(async () => {
  await Promise.all([...running].map((g) => g.stop('SIGTERM', STOP_GRACE_MS)));
  await deleteUsedRedisKeys();
  for (const dir of tempDirs.splice(0)) await rm(dir, { recursive: true, force: true });
  await checkResponsesAgainstContract(started.splice(0));
});

/** A temp directory removed when the test file ends. */
/**
 * Log lines at warn level or above, less the one start-time finding every test gateway logs: the
 * tests connect to PostgreSQL as its superuser (`database_login_privileged`), the environment's doing.
 */
export function problemLines(lines: readonly Record<string, unknown>[]): Array<Record<string, unknown>> {
  return lines.filter(
    (l) => (l.level === 'error' || l.level === 'fatal' || l.level === 'warn') && l.code !== 'database_login_privileged',
  );
}

export async function makeTempDir(prefix = 'arkvory-data-'): Promise<string> {
  const dir = await makeHarnessTempDir(prefix);
  tempDirs.push(dir);
  return dir;
}

export async function startGateway(options: StartOptions = {}): Promise<GatewayProcess> {
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
  const portVariable = options.env?.ARKVORY_PORT;
  const gateway = await startHarnessGateway({
    env: {
      ARKVORY_LOG_LEVEL: 'info',
      ARKVORY_DATA_DIR: dataDir,
      ...options.env,
      ...(redisUrl ? { ARKVORY_REDIS_KEY_PREFIX: redisPrefix } : {}),
    },
    ...(portVariable ? { port: Number(portVariable) } : {}),
    ...(options.wrap ? { wrap: options.wrap } : {}),
    ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
    name: 'gateway',
    waitFor: options.waitFor ?? 'serving',
  });
  return track(gateway, dataDir);
}

/** Counts the gateway as this file's: stopped with its test or the file, its responses checked. */
function track(harnessGateway: HarnessGateway, dataDir: string): GatewayProcess {
  const stop = harnessGateway.stop.bind(harnessGateway);
  const gateway: GatewayProcess = Object.assign(harnessGateway, {
    dataDir,
    async stop(signal?: NodeJS.Signals, killAfterMs?: number) {
      const code = await stop(signal, killAfterMs);
      running.delete(gateway);
      return code;
    },
  });
  running.add(gateway);
  started.push(gateway);
  // A gateway started inside a test ends with it (one writer per database: the next test may need
  // its own); one started in a hook lives until the file ends. When the test fails (a timeout
  // included), the end of the gateway's output is printed with the failure: it says what the
  // process was doing, which an assertion on it or a timeout alone does not. It is printed once
  // the process has stopped and its output was read to the end: at the failure, the lines it wrote
  // last (the request that failed, the error that cut a response) may still be in the pipe.
  try {
    onTestFinished(async ({ task }) => {
      const failed = task.result?.state === 'fail';
      // As it was at the failure, before the stop: an exit then (a crash, a kill) is the finding.
      const state = gateway.isRunning() ? 'still running' : `exited (${String(await gateway.exited)})`;
      await gateway.stop('SIGTERM', STOP_GRACE_MS);
      if (failed) console.error(outputTail(gateway, state));
    });
  } catch {
    // not inside a test
  }
  return gateway;
}

/** Enough for the lines before the failure and the few of the shutdown that follows it. */
const TAIL_LINES = 60;

/**
 * The last lines of a gateway's output, read to its end, headed with its port and its `state` at
 * the failure; when it was still running, the last lines are those of the stop that followed.
 */
function outputTail(gateway: HarnessGateway, state: string): string {
  const lines = gateway.logs().trimEnd().split('\n');
  const shown = lines.slice(-TAIL_LINES).join('\n');
  const cut = lines.length > TAIL_LINES ? ` (last ${TAIL_LINES} of ${lines.length} lines)` : '';
  const stopped = state === 'still running' ? ', then stopped with SIGTERM' : '';
  return `gateway on port ${gateway.port}, ${state} at the failure${stopped}${cut}:\n${shown}`;
}

/**
 * The contract over the whole integration suite: every response any gateway of this file gave
 * (its `request` log lines: method, route template, status) must be one proxy/openapi/openapi.yaml
 * describes; otherwise the file fails, naming each undescribed response.
 */
/**
 * The OpenAPI document, parsed once per worker: the files of a worker share this module
 * (vitest.config.ts), and parsing its 160 KB of YAML took 0.2-1 s of each file's end.
 */
let openApiDocument: Promise<OpenApiDocument> | undefined;

async function checkResponsesAgainstContract(gateways: GatewayProcess[]): Promise<void> {
  if (gateways.length === 0) return;
  const { loadOpenApiDocument, undescribedResponses } = await import('../../proxy/openapi/contract.ts');
  openApiDocument ??= loadOpenApiDocument();
  const problems = undescribedResponses(
    await openApiDocument,
    gateways.flatMap((g) => g.logLines()),
  );
  if (problems.length > 0)
    throw new Error(
      `responses the OpenAPI document (proxy/openapi/openapi.yaml) does not describe; document them or fix the route:\n${problems.join('\n')}`,
    );
}
