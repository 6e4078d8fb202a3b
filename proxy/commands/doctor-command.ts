/**
 * `arkvory doctor`: checks a configuration without serving and prints one line per check
 * (`ok`, `FAIL` or `skip`, the check's name, what was found and what to do). Nothing is written:
 * no migration, no policy row, no storage identity, no lease.
 */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { parseRedisTarget, redactRedisTarget } from '../../policy/rate-limit/redis-target.ts';
import { redactUrl } from '../../lib/redact-url.ts';
import pg from 'pg';
import { PgClient } from '../../lib/pg-client.ts';
import { pendingMigrations } from '../../migrations/runner.ts';
import { readPolicy, type DownloadPolicy } from '../../policy/lease/download-policy.ts';
import { isRestoreMarker } from '../../storage-adapter/identity.ts';
import { STORAGE_ID_FILE } from '../../storage-adapter/paths.ts';
import { ConfigError, loadConfig, type Config } from '../config/config.ts';
import { createTrustedProxies } from '../router/forwarded.ts';
import { databaseRoleOf, describePrivileges, inspectPrivileges, isPrivileged } from '../server/database-privileges.ts';
import { StartupError } from '../server/startup-failure.ts';
import { trustOutboundCertificateAuthorities } from '../tls/outbound-ca.ts';
import { runningEmbeddedDatabaseUrl } from './cli-database.ts';
import { defineCommand, form, type Command } from './command.ts';

export type CheckStatus = 'ok' | 'FAIL' | 'skip';
export interface CheckResult {
  readonly check: string;
  readonly status: CheckStatus;
  readonly detail: string;
}

/** The checks in the order they run and print. */
export const CHECKS = [
  'variables',
  'database',
  'migrations',
  'storage',
  'redis',
  'policy',
  'slot',
  'proxies',
  'privileges',
  'gateways',
  'credentials',
] as const;

const TIMEOUT_MS = 5000;

function describePolicy(p: DownloadPolicy): string {
  return `SLOTS=${p.slots}, SHARED_DOWNLOAD_BYTES_PER_SECOND=${p.downloadBytesPerSec}, SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL=${p.downloadBytesPerSecPerPrincipal}`;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message || err.name : String(err);
}

async function checkStorage(config: Config, pool: pg.Pool | undefined): Promise<CheckResult> {
  const check = 'storage';
  if (config.role === 'router' || config.role === 'rules-service')
    return { check, status: 'skip', detail: `the ${config.role} has no storage root` };
  const role = config.role === 'api' ? 'writer' : config.role;
  const storageUrl = config.storage.url;
  let fileId: string | undefined;
  // The store clients (undici, the S3 signer) and ioredis are loaded by the checks that use them.
  if (config.storage.s3 !== undefined) {
    const { readS3StorageIdObject } = await import('../../storage-adapter/s3/index.ts');
    fileId = await readS3StorageIdObject({
      ...config.storage.s3,
      connectTimeoutMs: config.storage.connectTimeoutMs,
      timeoutMs: config.storage.timeoutMs,
    });
  } else if (storageUrl !== undefined) {
    const { readStorageIdObject } = await import('../../storage-adapter/http/index.ts');
    fileId = await readStorageIdObject(storageUrl, config.storage);
  } else if (
    await stat(config.dataDir).then(
      (s) => s.isDirectory(),
      () => false,
    )
  ) {
    fileId = await readFile(path.join(config.dataDir, STORAGE_ID_FILE), 'utf8').then(
      (text) => text.trim(),
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined;
        throw err;
      },
    );
  }
  // The static-HTTP store is named by its URL, the directory store by its path.
  const root = storageUrl ?? config.dataDir;
  const variable = storageUrl === undefined ? 'ARKVORY_DATA_DIR' : 'ARKVORY_STORAGE_URL';
  const idName =
    storageUrl === undefined ? `${root}/${STORAGE_ID_FILE}` : `${root.replace(/\/?$/, '/')}${STORAGE_ID_FILE}`;
  if (isRestoreMarker(fileId))
    return {
      check,
      status: 'FAIL',
      detail: `${idName} marks a restore that did not finish (stopped before its commit): ${root} holds part of a backup and no installation; run the same \`arkvory restore\` again (it removes what the stopped one wrote first) or empty the root`,
    };
  if (!pool)
    return fileId
      ? {
          check,
          status: 'ok',
          detail: `${root} is storage ${fileId} (the embedded database is checked when it starts)`,
        }
      : { check, status: 'ok', detail: `${root} is not initialised yet; the writer creates it at first start` };
  const { rows } = await pool.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage');
  const rowId = rows[0]?.id;
  if (fileId && rowId && fileId !== rowId)
    return {
      check,
      status: 'FAIL',
      detail: `${idName} says storage ${fileId} but the database is bound to storage ${rowId}; the root and the database belong to different installations`,
    };
  if (fileId && rowId) return { check, status: 'ok', detail: `${root} and the database are both storage ${rowId}` };
  if (!fileId && rowId)
    return {
      check,
      status: 'FAIL',
      detail: `the database is bound to storage ${rowId} but ${root} has no ${STORAGE_ID_FILE}; point ${variable} at that storage root`,
    };
  if (fileId && !rowId)
    return {
      check,
      status: 'FAIL',
      detail: `${idName} says storage ${fileId} but the database has no arkvory_storage row; point ARKVORY_DATABASE_URL at the database of this storage root`,
    };
  if (role === 'writer')
    return {
      check,
      status: 'ok',
      detail: `${root} is not initialised yet; the writer creates it and its identity at first start`,
    };
  return {
    check,
    status: 'FAIL',
    detail: `the storage root ${root} is not initialised; a ${role} never creates it: start the writer first, or mount the shared root`,
  };
}

async function checkRedis(config: Config): Promise<CheckResult> {
  const check = 'redis';
  if (config.role === 'router' || config.role === 'worker' || config.role === 'rules-service')
    return { check, status: 'skip', detail: `the ${config.role} uses no Redis` };
  if (!config.redisUrl) {
    return config.shared
      ? {
          check,
          status: 'FAIL',
          detail: 'the shared profile needs a Redis shared by all gateways; set ARKVORY_REDIS_URL',
        }
      : {
          check,
          status: 'skip',
          detail: 'ARKVORY_REDIS_URL unset: rate-limit counters in process memory (standalone only)',
        };
  }
  const parsed = parseRedisTarget(config.redisUrl);
  if (!parsed.ok) return { check, status: 'FAIL', detail: parsed.problem };
  const { target } = parsed;
  const perConnection = {
    connectTimeout: TIMEOUT_MS,
    // connectTimeout ends at the TCP connect: a Redis that takes the connection and never answers
    // (stopped, or another service on its port) would hold the ready check and the PING forever.
    commandTimeout: TIMEOUT_MS,
    maxRetriesPerRequest: 0,
    ...(target.kind === 'cluster' && target.username ? { username: target.username } : {}),
    ...(target.kind === 'cluster' && target.password ? { password: target.password } : {}),
    ...(target.kind === 'cluster' && target.tls ? { tls: {} } : {}),
  };
  const { Cluster, Redis } = await import('ioredis');
  const client =
    target.kind === 'single'
      ? new Redis(target.url, {
          ...perConnection,
          lazyConnect: true,
          retryStrategy: () => null,
          enableOfflineQueue: false,
        })
      : new Cluster([...target.nodes], {
          lazyConnect: true,
          enableOfflineQueue: false,
          clusterRetryStrategy: () => null,
          slotsRefreshTimeout: TIMEOUT_MS,
          redisOptions: perConnection,
        });
  client.on('error', () => {});
  try {
    await client.connect();
    if (client instanceof Cluster) {
      // Every slot must have a primary, or some counters would always fail open.
      const info = String(await client.cluster('INFO'));
      const state = /cluster_state:(\w+)/.exec(info)?.[1] ?? 'unknown';
      const masters = client.nodes('master').length;
      if (state !== 'ok')
        return {
          check,
          status: 'FAIL',
          detail: `Redis Cluster state is ${state} (${masters} primaries known); rate limits on uncovered slots would fail open`,
        };
      return { check, status: 'ok', detail: `Redis Cluster state ok, ${masters} primaries` };
    }
    const pong = await client.ping();
    return { check, status: 'ok', detail: `answered ${pong}` };
  } catch (err) {
    return {
      check,
      status: 'FAIL',
      detail: `cannot reach ${redactRedisTarget(config.redisUrl)}: ${message(err)}; rate limits would fail open`,
    };
  } finally {
    client.disconnect();
  }
}

async function checkPolicy(config: Config, pool: pg.Pool): Promise<CheckResult> {
  const check = 'policy';
  if (config.role === 'router' || config.role === 'worker' || config.role === 'rules-service')
    return { check, status: 'skip', detail: `the ${config.role} holds no download share` };
  const stored = await readPolicy(pool);
  const wanted = config.shared
    ? {
        slots: config.shared.slots,
        downloadBytesPerSec: config.shared.downloadBytesPerSec,
        downloadBytesPerSecPerPrincipal: config.shared.downloadBytesPerSecPerPrincipal,
      }
    : undefined;
  if (!wanted) {
    return stored
      ? {
          check,
          status: 'FAIL',
          detail: `a shared download policy is stored (${describePolicy(stored)}); a standalone gateway would be refused: configure the same ARKVORY_GATEWAY_SLOTS and SHARED rates, or reset it (arkvory policy reset)`,
        }
      : { check, status: 'ok', detail: 'standalone; no shared policy stored' };
  }
  if (!stored) {
    return config.role === 'reader'
      ? {
          check,
          status: 'FAIL',
          detail:
            'no shared download policy is stored yet; start the writer with the same ARKVORY_GATEWAY_SLOTS and SHARED rates first',
        }
      : { check, status: 'ok', detail: `none stored; the writer records ${describePolicy(wanted)} at start` };
  }
  const same =
    stored.slots === wanted.slots &&
    stored.downloadBytesPerSec === wanted.downloadBytesPerSec &&
    stored.downloadBytesPerSecPerPrincipal === wanted.downloadBytesPerSecPerPrincipal;
  return same
    ? { check, status: 'ok', detail: `matches the stored policy (${describePolicy(stored)})` }
    : {
        check,
        status: 'FAIL',
        detail: `the stored policy (${describePolicy(stored)}) differs from this configuration (${describePolicy(wanted)}); use the stored values or reset it (arkvory policy reset)`,
      };
}

async function checkSlot(config: Config, pool: pg.Pool): Promise<CheckResult> {
  const check = 'slot';
  if (!config.shared || (config.role !== 'api' && config.role !== 'reader'))
    return { check, status: 'skip', detail: 'no slot lease outside the shared profile' };
  const { rows } = await pool.query<{ role: string; renewed_ago: string; expires_in: string }>(
    `SELECT role, round(extract(epoch FROM clock_timestamp() - renewed_at), 1)::text AS renewed_ago, round(extract(epoch FROM expires_at - clock_timestamp()), 1)::text AS expires_in
       FROM arkvory_gateway_leases WHERE slot = $1 AND expires_at > clock_timestamp()`,
    [config.shared.slot],
  );
  const row = rows[0];
  if (!row) return { check, status: 'ok', detail: `slot ${config.shared.slot} is free` };
  return {
    check,
    status: 'FAIL',
    detail: `slot ${config.shared.slot} is held by a ${row.role} (renewed ${row.renewed_ago} s ago, reserved ${row.expires_in} s more); stop that gateway or choose another ARKVORY_GATEWAY_SLOT`,
  };
}

/**
 * Forwarding peers the gateways reported (`arkvory_forwarding_peers`, last 7 days) that this
 * configuration's ARKVORY_TRUSTED_PROXIES does not trust: their clients' addresses are not believed.
 */
async function checkProxies(config: Config, pool: pg.Pool): Promise<CheckResult> {
  const check = 'proxies';
  if (config.role === 'router' || config.role === 'worker' || config.role === 'rules-service')
    return { check, status: 'skip', detail: `the ${config.role} bans no client address` };
  const { rows } = await pool.query<{ peer: string; role: string; seen: Date }>(
    `SELECT peer, role, last_seen_at AS seen FROM arkvory_forwarding_peers
     WHERE last_seen_at > now() - interval '7 days' ORDER BY last_seen_at DESC LIMIT 100`,
  );
  const trusted = createTrustedProxies(config.trustedProxies);
  const untrusted = rows.filter((r) => !trusted.isTrusted(r.peer));
  const list = config.trustedProxies.length === 0 ? 'none' : config.trustedProxies.join(',');
  if (untrusted.length === 0)
    return {
      check,
      status: 'ok',
      detail: `no untrusted peer sent forwarding headers (ARKVORY_TRUSTED_PROXIES: ${list})`,
    };
  const named = [...new Set(untrusted.map((r) => r.peer))].slice(0, 5);
  return {
    check,
    status: 'FAIL',
    detail: `${named.join(', ')} sent X-Forwarded-For/Forwarded (last ${untrusted[0]!.seen.toISOString()}, to a ${untrusted[0]!.role}) but ${named.length === 1 ? 'is' : 'are'} not in ARKVORY_TRUSTED_PROXIES (${list}): client addresses through ${named.length === 1 ? 'it' : 'them'} are not believed; if ${named.length === 1 ? 'it is' : 'they are'} your router or proxy, add ${named.length === 1 ? 'it' : 'them'} (docs/router.md)`,
  };
}

/** The database login against the grants its role needs (the same check a gateway makes at start). */
async function checkPrivileges(config: Config, pool: pg.Pool): Promise<CheckResult> {
  const check = 'privileges';
  const role = databaseRoleOf(config.role);
  if (!role) return { check, status: 'skip', detail: `the ${config.role} reads leases only` };
  const report = await inspectPrivileges(pool, role);
  const status =
    report.missing.length || (isPrivileged(report) && config.databaseRequireLeastPrivilege) ? 'FAIL' : 'ok';
  const standing = report.superuser
    ? 'superuser'
    : report.schemaOwner
      ? 'schema owner'
      : report.excess.length
        ? `not superuser, not owner, ${report.excess.length} privilege(s) beyond its role's`
        : 'not superuser, not owner';
  return {
    check,
    status,
    detail: `role ${config.role} → database role ${role}, login "${report.login}" (${standing}); ${report.missing.length} missing grant(s): ${describePrivileges(report)}`,
  };
}

/** Where each secret comes from: env, file or unset; never a value. */
function checkSecrets(config: Config): CheckResult {
  const set = Object.entries(config.secretSources).filter(([, source]) => source !== 'unset');
  return {
    check: 'credentials',
    status: 'ok',
    detail: set.length ? set.map(([name, source]) => `${name} from ${source}`).join(', ') : 'none set',
  };
}

/** A gateway's workers as `/health/status` lists them: how many serve, of how many, and replacements. */
export function describeWorkers(workers: unknown): string {
  if (!Array.isArray(workers)) return '';
  const list = workers as Array<{ state?: unknown; restarts?: unknown }>;
  const serving = list.filter((w) => w.state === 'serving').length;
  const restarts = list.reduce((n, w) => n + (typeof w.restarts === 'number' ? w.restarts : 0), 0);
  return `, workers ${serving}/${list.length} serving${restarts > 0 ? ` (${restarts} replaced after dying)` : ''}`;
}

/** One gateway's `/health/status` as doctor prints it: serving or not, its workers, and its store's state. */
export function describeGatewayStatus(code: number, body: unknown): { line: string; storeDown: boolean } {
  const b = (body ?? {}) as {
    status?: unknown;
    workers?: unknown;
    store?: { state?: unknown; lastError?: { code?: unknown; at?: unknown } | null };
  };
  const status = (typeof b.status === 'string' ? b.status : `HTTP ${code}`) + describeWorkers(b.workers);
  if (!b.store)
    return { line: `${status}, store state not reported (a gateway before store health)`, storeDown: false };
  const state = String(b.store.state);
  const last = b.store.lastError
    ? ` (last error ${String(b.store.lastError.code)} at ${String(b.store.lastError.at)})`
    : '';
  return { line: `${status}, store ${state}${last}`, storeDown: state === 'unreachable' };
}

/**
 * The gateways this configuration can see (live leases with an advertised URL, ARKVORY_ROUTER_BACKENDS,
 * ARKVORY_ADVERTISE_URL): each one's `/health/status`, with its store's state. Fails when one does not
 * answer or reports its store unreachable (routers send it no reads meanwhile: docs/router.md).
 */
async function checkGateways(config: Config, pool: pg.Pool | undefined): Promise<CheckResult> {
  const check = 'gateways';
  const urls = new Set<string>([
    ...(config.router.backends ?? []),
    ...(config.advertiseUrl ? [config.advertiseUrl] : []),
  ]);
  if (pool) {
    const { rows } = await pool.query<{ advertise_url: string }>(
      `SELECT advertise_url FROM arkvory_gateway_leases WHERE expires_at > clock_timestamp() AND advertise_url IS NOT NULL ORDER BY slot`,
    );
    for (const row of rows) urls.add(row.advertise_url);
  }
  if (urls.size === 0)
    return {
      check,
      status: 'skip',
      detail: 'no gateway to ask (no live lease with an advertised URL, no ARKVORY_ROUTER_BACKENDS)',
    };
  const found = await Promise.all(
    [...urls].map(async (url) => {
      try {
        const res = await fetch(`${url}/health/status`, { signal: AbortSignal.timeout(TIMEOUT_MS) });
        const text = await res.text();
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        const { line, storeDown } = describeGatewayStatus(res.status, body);
        return { text: `${url} ${line}`, bad: storeDown || res.status !== 200 };
      } catch (err) {
        return { text: `${url} does not answer (${message(err)})`, bad: true };
      }
    }),
  );
  const bad = found.filter((f) => f.bad).length;
  return {
    check,
    status: bad === 0 ? 'ok' : 'FAIL',
    detail: `${found.map((f) => f.text).join('; ')}${bad === 0 ? '' : '; a gateway whose store is unreachable gets no reads through a router: check its store and the network to it (its log says store unreachable with the code)'}`,
  };
}

/** Runs every check; a failed prerequisite turns the checks that need it into `skip`. */
export async function runDoctor(env: NodeJS.ProcessEnv): Promise<CheckResult[]> {
  const results = await runChecks(env);
  const done = new Set(results.map((r) => r.check));
  if (!done.has('privileges'))
    results.push({ check: 'privileges', status: 'skip', detail: 'needs a migrated database' });
  if (!done.has('credentials')) {
    try {
      results.push(checkSecrets(loadConfig(env)));
    } catch {
      results.push({ check: 'credentials', status: 'skip', detail: 'needs valid variables' });
    }
  }
  if (!done.has('gateways'))
    results.push({ check: 'gateways', status: 'skip', detail: 'needs valid variables and a reachable database' });
  // One line per check, always in the order of CHECKS, whichever path ran them.
  const order = (r: CheckResult) => CHECKS.indexOf(r.check as (typeof CHECKS)[number]);
  return results.sort((a, b) => order(a) - order(b));
}

async function runChecks(env: NodeJS.ProcessEnv): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  const skipRest = (from: number, why: string) => {
    for (const check of CHECKS.slice(from, CHECKS.indexOf('privileges')))
      results.push({ check, status: 'skip', detail: why });
  };
  let config: Config;
  try {
    config = loadConfig(env);
    // The checks below connect as the gateway would: with ARKVORY_TLS_CA_FILE's CAs trusted.
    if (config.outboundCaFile !== undefined) trustOutboundCertificateAuthorities(config.outboundCaFile);
    results.push({
      check: 'variables',
      status: 'ok',
      detail: `role ${config.role}, ${config.shared ? `shared profile, slot ${config.shared.slot} of ${config.shared.slots}` : 'standalone'}`,
    });
  } catch (err) {
    if (!(err instanceof ConfigError) && !(err instanceof StartupError)) throw err;
    const detail = err instanceof ConfigError ? err.problems.join('; ') : err.message;
    results.push({ check: 'variables', status: 'FAIL', detail });
    skipRest(1, 'needs valid variables');
    return results;
  }

  let pool: pg.Pool | undefined;
  try {
    // The embedded default: the PostgreSQL a running `npm start` keeps under the data dir, as the other commands reach it.
    const embeddedUrl = config.databaseUrl ? undefined : await runningEmbeddedDatabaseUrl(config.dataDir);
    const databaseUrl = config.databaseUrl ?? (config.role === 'api' && !config.shared ? embeddedUrl : undefined);
    if (!databaseUrl) {
      const embeddedOk = config.role === 'api' && !config.shared;
      results.push(
        embeddedOk
          ? {
              check: 'database',
              status: 'skip',
              detail: `ARKVORY_DATABASE_URL unset and no gateway is running the embedded PostgreSQL under ${config.dataDir}/.pg (standalone only); start it (npm start) to check it too`,
            }
          : {
              check: 'database',
              status: 'FAIL',
              detail: `role ${config.role}${config.shared ? ' in the shared profile' : ''} needs ARKVORY_DATABASE_URL (the embedded PostgreSQL is for one standalone writer)`,
            },
      );
      results.push({ check: 'migrations', status: 'skip', detail: 'applied to the embedded database when it starts' });
      results.push(
        await checkStorage(config, undefined).catch((err: unknown) => ({
          check: 'storage',
          status: 'FAIL' as const,
          detail: message(err),
        })),
      );
      results.push(await checkRedis(config));
      results.push(
        { check: 'policy', status: 'skip', detail: 'needs a database' },
        { check: 'slot', status: 'skip', detail: 'needs a database' },
        { check: 'proxies', status: 'skip', detail: 'needs a database' },
        await checkGateways(config, undefined),
      );
      return results;
    }
    // pg reads a password from the query (`?password=`) as well as from the user info.
    const where = config.databaseUrl
      ? redactUrl(config.databaseUrl)
      : `the embedded PostgreSQL under ${config.dataDir}/.pg`;
    pool = new pg.Pool({
      Client: PgClient,
      connectionString: databaseUrl,
      max: 1,
      connectionTimeoutMillis: TIMEOUT_MS,
      application_name: 'arkvory-doctor',
    });
    pool.on('error', () => {});
    try {
      // SHOW names its one column after the setting.
      const { rows } = await pool.query<{ server_version: string }>('SHOW server_version');
      results.push({
        check: 'database',
        status: 'ok',
        detail: `PostgreSQL ${rows[0]?.server_version ?? '(version not reported)'} reachable${config.databaseUrl ? '' : ` (the embedded one of the running gateway under ${config.dataDir}/.pg)`}`,
      });
    } catch (err) {
      results.push({ check: 'database', status: 'FAIL', detail: `cannot reach ${where}: ${message(err)}` });
      skipRest(2, 'needs the database');
      results.splice(
        results.findIndex((r) => r.check === 'redis'),
        1,
        await checkRedis(config),
      );
      return results;
    }
    const pending = await pendingMigrations(pool);
    if (pending.length > 0) {
      results.push({
        check: 'migrations',
        status: 'FAIL',
        detail: `${pending.length} pending (first ${pending[0]!.version}); run \`arkvory migrate\` with the same ARKVORY_DATABASE_URL (the embedded database: restart the gateway)`,
      });
      results.push({ check: 'storage', status: 'skip', detail: 'needs a migrated database' });
      results.push(await checkRedis(config));
      results.push(
        { check: 'policy', status: 'skip', detail: 'needs a migrated database' },
        { check: 'slot', status: 'skip', detail: 'needs a migrated database' },
        { check: 'proxies', status: 'skip', detail: 'needs a migrated database' },
        await checkGateways(config, undefined),
      );
      return results;
    }
    results.push({ check: 'migrations', status: 'ok', detail: 'the schema is up to date' });
    // First: a login without its grants makes the checks below fail on permission, which this names.
    const privileges = await checkPrivileges(config, pool);
    const guarded = (check: string, run: () => Promise<CheckResult>) =>
      run().catch((err: unknown): CheckResult => ({ check, status: 'FAIL', detail: message(err) }));
    results.push(await guarded('storage', () => checkStorage(config, pool)));
    results.push(await checkRedis(config));
    results.push(await guarded('policy', () => checkPolicy(config, pool!)));
    results.push(await guarded('slot', () => checkSlot(config, pool!)));
    results.push(await guarded('proxies', () => checkProxies(config, pool!)));
    results.push(privileges);
    results.push(await guarded('gateways', () => checkGateways(config, pool)));
    return results;
  } finally {
    await pool?.end().catch(() => {});
  }
}

export function formatResult(r: CheckResult): string {
  return `${r.status.padEnd(4)} ${r.check}: ${r.detail}`;
}

export const doctorCommand: Command = defineCommand({
  name: 'doctor',
  summary:
    'check a configuration without serving (variables, database, migrations, storage, Redis, policy, slot, proxies, privileges, credentials, the store state of every gateway it can see)',
  description: `Checks the configuration in the environment without serving and prints one line per check:
${CHECKS.join(', ')}. Each line starts with ok, FAIL or skip. Nothing is written.
Exit codes: 0 every check ok or skipped, 1 a check failed, 2 invalid variables.`,
  forms: [
    form({
      async run(_input, env) {
        const { EXIT } = await import('../server/startup-failure.ts');
        const results = await runDoctor(env);
        for (const r of results) process.stdout.write(`${formatResult(r)}\n`);
        if (results[0]?.status === 'FAIL') return EXIT.config;
        return results.some((r) => r.status === 'FAIL') ? EXIT.failure : EXIT.ok;
      },
    }),
  ],
});
