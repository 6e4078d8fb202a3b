/**
 * `download`: fetches one object to a file through one or more gateways, resuming after any cut.
 *
 * Bytes go to `<output>.partial`, with `<output>.partial.json` holding the strong ETag they belong
 * to, so even a killed process resumes. Every retry asks `Range: bytes=<held>-` with `If-Range:
 * <etag>`: if the object changed the gateway answers 200 and the file starts over. A 502/503/504
 * (`lease_lost`, `unavailable`) or a dropped connection moves to the next URL (mirrors, or a router
 * that picks another gateway); a 429 waits `Retry-After` on the same one. When the last byte is in,
 * the whole file is hashed against the digest the gateway published and only then renamed to
 * `output`: a corrupt file never appears under the final name. A file already under `output` keeps
 * its permission bits and owner (replaced-file.ts); the partial file is created with its bits too,
 * and the state file private. A directory at any of the names, or a full disk, is a coded error.
 * The file is flushed to disk before its rename, and one run at a time writes an output (download-lock.ts).
 */
import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { constants } from 'node:fs';
import { access, type FileHandle, lstat, open, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleepFor } from 'node:timers/promises';
import { request, type Dispatcher } from 'undici';
import { KeyScope } from './credential-scope.ts';
import { errorBody } from './error-body.ts';
import { ArkvoryClientError, gatewayError, unsendable } from './errors.ts';
import type { Progress } from './progress.ts';
import { lockOutput, readSmallFile } from './download-lock.ts';
import { replacedFileOf, takeOver } from './replaced-file.ts';
import { backoffMs, decide, mirrorUrl, retryAfterMs } from './retry-decision.ts';

export interface DownloadOptions {
  /** The object's content URL (a gateway, a router, or a pre-signed link). */
  readonly url: string;
  /** Other gateways (origins, or full URLs) tried in turn when one fails. */
  readonly mirrors?: readonly string[];
  readonly output: string;
  /** API key, sent as Bearer; omit for a pre-signed link. */
  readonly key?: string | undefined;
  /**
   * The gateways (URLs or origins) the key may go to; a request to any other origin carries no
   * credentials. Default: the origins of `url` and `mirrors`, which the caller named. Redirects are
   * never followed (a 3xx fails the transfer), so the key cannot travel on with one.
   */
  readonly keyOrigins?: readonly string[];
  readonly signal?: AbortSignal;
  /** Called at most every `progressIntervalMs` and once at the end. */
  readonly onProgress?: (progress: Progress) => void;
  readonly progressIntervalMs?: number;
  /** Consecutive attempts that gain no byte before giving up (default 12). */
  readonly maxStalledAttempts?: number;
  /** Longest wait a Retry-After may impose (default 60 s). */
  readonly maxRetryAfterMs?: number;
  /** Longest silence inside a body before the connection counts as dropped (default 30 s). */
  readonly bodyTimeoutMs?: number;
  readonly dispatcher?: Dispatcher;
  /** Injected for tests: time, and how to wait. */
  readonly now?: () => number;
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Injected for tests: the calls that write the partial and state files (one failed stands for a crash there). */
  readonly files?: DownloadFiles;
}

/**
 * The file system calls that write `<output>.partial` (`open`) and `<output>.partial.json`
 * (`writeFile`); `open` also opens the partial file and the directory to flush them.
 */
export interface DownloadFiles {
  readonly open: typeof open;
  readonly writeFile: typeof writeFile;
}

export interface DownloadResult {
  readonly path: string;
  readonly bytes: number;
  readonly sha256: string;
  /** Requests made, and how many of them resumed from an offset. */
  readonly attempts: number;
  readonly resumes: number;
}

interface PartialState {
  etag: string;
  total: number;
  digestHex: string | undefined;
}

/** Failures of the local file system are the caller's to fix, never a reason to try another gateway. */
const FILE_SYSCALLS = new Set([
  'open',
  'write',
  'rename',
  'unlink',
  'fstat',
  'stat',
  'access',
  'mkdir',
  'close',
  'ftruncate',
  'writev',
  'read',
  'lstat',
  'fsync',
  'chmod',
  'chown',
]);

const defaultSleep = (ms: number, signal?: AbortSignal) => sleepFor(ms, undefined, signal ? { signal } : undefined);

async function sizeOf(file: string): Promise<number> {
  return stat(file).then(
    (s) => s.size,
    () => 0,
  );
}

/** A running sha256 of the first `bytes` bytes of a file (all of it when `bytes` is undefined). */
async function hashPrefix(file: string, bytes?: number): Promise<Hash> {
  const hash = createHash('sha256');
  if (bytes === 0) return hash;
  for await (const chunk of createReadStream(file, bytes === undefined ? {} : { end: bytes - 1 }))
    hash.update(chunk as Buffer);
  return hash;
}

/**
 * The output's directory may be writable by others (a shared one): a symlink planted at the partial
 * or state file's name would have this run write the file it points at. Both are opened without
 * following one (a link planted between the check below and the open fails the open instead).
 */
const { O_CREAT, O_DIRECTORY, O_NOFOLLOW, O_RDONLY, O_TRUNC, O_WRONLY } = constants;
const CREATE = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW;

/** Removes a symlink (not what it points at), or other non-file, at `file`; a directory is left to fail the open. */
async function dropSymlink(file: string): Promise<void> {
  const stats = await lstat(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (stats !== undefined && !stats.isFile() && !stats.isDirectory()) await rm(file, { force: true });
}

async function readState(file: string): Promise<PartialState | undefined> {
  try {
    const state = JSON.parse((await readSmallFile(file)) ?? '') as PartialState;
    return typeof state.etag === 'string' && Number.isSafeInteger(state.total) ? state : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Drops a body that is not read. undici ends a body destroyed before its end with an 'error'
 * (RequestAbortedError) that nobody else listens for: unheard, it is an uncaught exception that
 * kills the process (for a body already received whole, a tick after the destroy).
 */
function discard(body: Readable): void {
  body.on('error', () => {}).destroy();
}

/** The names a download writes: the output, its partial file, its state file and its lock. */
function namesOf(output: string): string[] {
  const partial = `${output}.partial`;
  return [output, partial, `${partial}.json`, `${partial}.lock`];
}

function outputIsDirectory(name: string, cause?: unknown): ArkvoryClientError {
  return new ArkvoryClientError(
    'output_is_directory',
    `${name} is a directory, where the download writes a file: remove it, or write to another file.`,
    cause === undefined ? undefined : { cause },
  );
}

/**
 * A local file failure the user can act on, as a coded error: a directory where a file is written
 * (one made after the check in `download`), or a full disk (the bytes written so far stay in the
 * partial file, with the state naming them, so the next run resumes). Any other error as it is.
 */
function localFileError(err: unknown, output: string): unknown {
  const { code, syscall } = err as NodeJS.ErrnoException;
  if (!FILE_SYSCALLS.has(String(syscall))) return err;
  if (code === 'EISDIR') return outputIsDirectory((err as NodeJS.ErrnoException).path ?? output, err);
  if (code === 'ENOSPC' || code === 'EDQUOT')
    return new ArkvoryClientError(
      'no_space',
      `No space left to write ${output}.partial (${code === 'EDQUOT' ? 'disk quota exceeded' : 'the disk is full'}); the bytes written so far are kept: free some space and run the download again to resume it.`,
      { cause: err },
    );
  return err;
}

export async function download(options: DownloadOptions): Promise<DownloadResult> {
  await access(path.dirname(path.resolve(options.output)), constants.W_OK);
  // Refused before the lock is taken and any byte is asked for: a directory at the final name
  // failed only at the rename, once the whole file was fetched.
  for (const name of namesOf(options.output))
    if ((await lstat(name).catch(() => undefined))?.isDirectory()) throw outputIsDirectory(name);
  try {
    const release = await lockOutput(options.output);
    try {
      return await downloadLocked(options);
    } finally {
      await release();
    }
  } catch (err) {
    throw localFileError(err, options.output);
  }
}

/** Flushes `file` to the disk (its bytes, or a directory's entries), so what a rename publishes survives a crash. */
async function flush(files: DownloadFiles, file: string, flags: number): Promise<void> {
  const handle = await files.open(file, flags);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function downloadLocked(options: DownloadOptions): Promise<DownloadResult> {
  const urls = [options.url, ...(options.mirrors ?? []).map((m) => mirrorUrl(options.url, m))];
  const keyScope = new KeyScope(options.keyOrigins ?? urls);
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? defaultSleep;
  const files = options.files ?? { open, writeFile };
  const partial = `${options.output}.partial`;
  const stateFile = `${partial}.json`;
  const maxStalled = options.maxStalledAttempts ?? 12;
  const started = now();
  // The new bytes of a file kept private are not readable by others while they arrive either; the
  // owner may always read and write the partial file (a resume opens and hashes it again).
  const replacing = await replacedFileOf(options.output);
  const partialMode = replacing === undefined ? 0o666 : replacing.mode | 0o600;

  await dropSymlink(partial);
  await dropSymlink(stateFile);
  let state = await readState(stateFile);
  let held = state ? await sizeOf(partial) : 0;
  if (!state) await rm(partial, { force: true });
  const heldAtStart = held;
  let which = 0;
  let attempts = 0;
  let resumes = 0;
  let stalled = 0;
  let lastError: unknown;
  let lastReport = Number.NEGATIVE_INFINITY;
  // Bytes held from an earlier run are whole only once a gateway says so in this one (its 416 to
  // the If-Range resume): the name may hold other bytes by now, or the partial file be another URL's.
  let confirmed = false;
  // The whole-file digest is computed as bytes arrive; only bytes held from before (a resumed run,
  // or a cut that lost counted bytes) are read back from disk.
  let hash: Hash | undefined;
  let hashed = 0;
  const report = (done: boolean, force = false) => {
    const t = now();
    if (!options.onProgress || (!force && t - lastReport < (options.progressIntervalMs ?? 250))) return;
    lastReport = t;
    options.onProgress({
      bytes: held,
      total: state?.total ?? -1,
      transferred: held - heldAtStart,
      elapsedMs: t - started,
      attempt: attempts,
      url: urls[which]!,
      done,
    });
  };

  for (;;) {
    if (options.signal?.aborted) throw new ArkvoryClientError('aborted', undefined, { cause: options.signal.reason });
    if (confirmed && state && held === state.total) break;
    if (stalled >= maxStalled)
      throw new ArkvoryClientError(
        'gave_up',
        `No progress after ${stalled} attempts; last error: ${(lastError as Error)?.message ?? 'none'}`,
        { cause: lastError },
      );
    const url = urls[which]!;
    const headers: Record<string, string> = {};
    if (options.key && keyScope.allows(url)) headers.authorization = `Bearer ${options.key}`;
    if (held > 0 && state) {
      headers.range = `bytes=${held}-`;
      headers['if-range'] = state.etag;
      resumes++;
    }
    attempts++;
    const before = held;
    let failover = false;
    try {
      const res = await request(url, {
        method: 'GET',
        headers,
        ...(options.signal ? { signal: options.signal } : {}),
        ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
        headersTimeout: options.bodyTimeoutMs ?? 30_000,
        bodyTimeout: options.bodyTimeoutMs ?? 30_000,
      });
      const decision = decide(res.statusCode, res.headers, held, headers.range ? state : undefined);
      switch (decision.kind) {
        case 'body': {
          if (!decision.etag) {
            await res.body.dump();
            throw new ArkvoryClientError(
              'protocol',
              'The gateway sent no strong ETag; the download cannot be resumed safely.',
              { status: res.statusCode },
            );
          }
          // Starting over (offset 0), the partial file is emptied before the state file names the new
          // representation: a crash between the two leaves the old ETag over no bytes (the next run
          // starts from 0), never the new ETag over the old bytes, which a resume would extend with
          // the new ones.
          let file: FileHandle | undefined;
          try {
            file = await files.open(partial, decision.offset === 0 ? CREATE : O_WRONLY | O_NOFOLLOW, partialMode);
            if (decision.offset === 0) held = 0;
            const named = state;
            state = { etag: decision.etag, total: decision.total, digestHex: decision.digestHex };
            confirmed = true;
            // Rewritten only when it changes: a rewrite empties the file first, and one that fails
            // then (a full disk) would lose the state of the bytes held, which the next run drops.
            // Private: it names the digest of a file that may be kept from other users.
            if (JSON.stringify(named) !== JSON.stringify(state))
              await files.writeFile(stateFile, JSON.stringify(state), { flag: CREATE, mode: 0o600 });
            if (!hash || hashed !== decision.offset) {
              hash = await hashPrefix(partial, decision.offset);
              hashed = decision.offset;
            }
          } catch (err) {
            discard(res.body);
            await file?.close().catch(() => {});
            throw err;
          }
          const running = hash;
          const end = decision.end;
          const status = res.statusCode;
          const counter = new Transform({
            transform(chunk: Buffer, _enc, done) {
              // Nothing of a chunk past the end is written: the bytes there are not what the headers said.
              if (end !== undefined && held + chunk.length > end) {
                done(
                  new ArkvoryClientError(
                    'protocol',
                    `The ${status}'s body runs past byte ${end}, where its ${status === 206 ? 'Content-Range' : 'Content-Length'} ends it.`,
                    { status },
                  ),
                );
                return;
              }
              running.update(chunk);
              hashed += chunk.length;
              held += chunk.length;
              report(false);
              done(null, chunk);
            },
          });
          try {
            await pipeline(res.body, counter, file.createWriteStream({ start: decision.offset }));
          } finally {
            // What is on disk is the truth (a chunk counted may not have been written).
            held = await sizeOf(partial);
          }
          break;
        }
        case 'complete':
          // The range starts at the end: what we hold is the whole (a body without a length ends here).
          await res.body.dump();
          if (state) state = { ...state, total: held };
          confirmed = true;
          break;
        case 'restart':
          await res.body.dump();
          await rm(partial, { force: true });
          held = 0;
          state = undefined;
          break;
        case 'wait': {
          await res.body.dump();
          const ms = retryAfterMs(res.headers, now(), 1000, options.maxRetryAfterMs ?? 60_000);
          await sleep(ms, options.signal);
          break;
        }
        case 'failover':
          lastError = gatewayError(res.statusCode, await errorBody(res.body));
          failover = true;
          break;
        case 'fail':
          throw gatewayError(res.statusCode, await errorBody(res.body));
        case 'protocol':
          // Not read into an error message: a hostile or broken server's body may be of any size.
          discard(res.body);
          throw new ArkvoryClientError('protocol', decision.reason, { status: res.statusCode });
      }
    } catch (err) {
      if (options.signal?.aborted) throw new ArkvoryClientError('aborted', undefined, { cause: err });
      const refused = unsendable(err);
      if (refused) throw refused;
      if (err instanceof ArkvoryClientError && !failover) throw err;
      if (FILE_SYSCALLS.has(String((err as NodeJS.ErrnoException).syscall))) throw err;
      // A dropped connection, a reset, a timeout: this gateway failed us; try the next one.
      lastError = err;
      failover = true;
    }
    if (held > before || (state && held === state.total)) stalled = 0;
    else stalled++;
    if (failover) {
      which = (which + 1) % urls.length;
      // A full lap over every gateway without progress: back off before the next lap.
      if (stalled > 0 && which === 0) await sleep(backoffMs(Math.ceil(stalled / urls.length)), options.signal);
    }
  }

  if (!state) throw new ArkvoryClientError('protocol', 'The download ended without a representation.');
  const sha256 = (hash && hashed === held ? hash : await hashPrefix(partial)).digest('hex');
  if (state.digestHex && sha256 !== state.digestHex) {
    await rm(partial, { force: true });
    await rm(stateFile, { force: true });
    throw new ArkvoryClientError(
      'digest_mismatch',
      `The file hashes to sha256 ${sha256}, the gateway published ${state.digestHex}; the partial file was removed.`,
    );
  }
  if (!state.digestHex)
    throw new ArkvoryClientError('protocol', 'The gateway published no digest to verify the file against.');
  const replaced = await replacedFileOf(options.output);
  if (replaced) await takeOver(partial, replaced);
  // The bytes reach the disk before the name does: renamed first, a crash (power lost) could leave
  // the final name over an empty or partly written file. The directory is flushed for the rename.
  await flush(files, partial, O_RDONLY | O_NOFOLLOW);
  await rename(partial, options.output);
  await flush(files, path.dirname(path.resolve(options.output)), O_RDONLY | O_DIRECTORY);
  await rm(stateFile, { force: true });
  report(true, true);
  return { path: options.output, bytes: held, sha256, attempts, resumes };
}
