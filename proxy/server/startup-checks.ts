/**
 * Checks a start makes before it creates any state (an embedded PostgreSQL cluster, admin.key,
 * storage-id): the port can be bound, and the data directory can be created and written.
 */
import { constants } from 'node:fs';
import { access, mkdir, stat } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { GatewayError } from './errors.ts';

type StartupCheckCode = 'port_in_use' | 'data_dir_unusable' | 'cache_dir_in_use' | 'cache_dir_not_a_cache';

export class StartupCheckError extends GatewayError {
  override readonly name = 'StartupCheckError';
  declare readonly code: StartupCheckCode;
  constructor(code: StartupCheckCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** Binds and releases `host:port`; port 0 (any free port) needs no check. */
export async function checkPortFree(host: string, port: number, variable = 'ARKVORY_PORT'): Promise<void> {
  if (port === 0) return;
  await new Promise<void>((resolve, reject) => {
    const probe = net.createServer();
    probe.unref();
    probe.once('error', (err: NodeJS.ErrnoException) => {
      const why =
        err.code === 'EADDRINUSE'
          ? 'is already in use (another gateway or program listens there)'
          : err.code === 'EACCES'
            ? 'needs privileges this user does not have'
            : `cannot be bound (${err.code ?? err.message})`;
      reject(
        startupCheckError(
          'port_in_use',
          `${host}:${port} ${why}; stop that process or choose another ${variable}. Nothing was created.`,
          err,
        ),
      );
    });
    probe.listen(port, host, () => probe.close(() => resolve()));
  });
}

function startupCheckError(code: StartupCheckError['code'], message: string, cause?: unknown): StartupCheckError {
  return new StartupCheckError(code, message, cause === undefined ? undefined : { cause });
}

async function exists(p: string, variable: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return false;
      throw startupCheckError(
        'data_dir_unusable',
        `${variable}: cannot inspect ${p} (${err.code ?? err.message})`,
        err,
      );
    },
  );
}

/**
 * Creates the data directory one level at a time and checks it is a writable directory. Node's
 * `mkdir(…, { recursive: true })` spins forever (blocking the event loop, so even SIGTERM waits)
 * under some kernel trees such as /proc/sys, where a missing entry is refused with ENOENT.
 */
export async function prepareDataDir(dir: string, variable = 'ARKVORY_DATA_DIR'): Promise<void> {
  const target = path.resolve(dir);
  const missing: string[] = [];
  for (let at = target; !(await exists(at, variable)); at = path.dirname(at)) {
    missing.unshift(at);
    if (path.dirname(at) === at) break;
  }
  for (const d of missing) {
    try {
      await mkdir(d);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') continue;
      throw startupCheckError(
        'data_dir_unusable',
        `${variable}=${dir}: cannot create ${d} (${code ?? (err as Error).message}); choose a directory this user can create and write`,
        err,
      );
    }
  }
  const s = await stat(target);
  if (!s.isDirectory()) throw startupCheckError('data_dir_unusable', `${variable}=${dir} is not a directory`);
  try {
    await access(target, constants.W_OK | constants.X_OK);
  } catch (err) {
    throw startupCheckError(
      'data_dir_unusable',
      `${variable}=${dir} is not writable by this user (${(err as NodeJS.ErrnoException).code ?? ''}); choose another directory or fix its owner`,
      err,
    );
  }
}

/**
 * From here on, whatever this process creates is closed to other accounts and to group writes
 * (what the shipped units' `UMask=0027` gives): the filesystem store keeps every repository's bytes
 * and uploads in progress under the data dir, and `npm start` runs under the user's umask, usually
 * 022. Called once the data dir and its parents exist (and the embedded cluster, whose initdb runs
 * as the `postgres` account when we are root), so those keep the caller's modes and that account
 * can still reach them.
 */
export function restrictCreatedFileModes(): void {
  const previous = process.umask(PRIVATE_UMASK);
  process.umask(previous | PRIVATE_UMASK);
}

const PRIVATE_UMASK = 0o027;
