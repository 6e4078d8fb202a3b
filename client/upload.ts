/**
 * `upload`: publishes a file at a target path. Small files go in one streamed `PUT` with
 * `Content-Digest` (the gateway refuses bytes that do not match). Above `multipartThreshold` the
 * multipart API is used: parts are sent in parallel (at most `concurrency` at once), the session is
 * remembered in `stateDir` (private, see upload-state.ts), so a run that was killed resumes it —
 * parts the gateway already holds with the same sha256 are not sent again — and the client waits
 * for the completion job.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleepFor } from 'node:timers/promises';
import { request, type Dispatcher } from 'undici';
import { pathOnOrigin } from './credential-scope.ts';
import { errorBody } from './error-body.ts';
import { ArkvoryClientError, gatewayError, unsendable } from './errors.ts';
import { backoffMs, retryAfterMs } from './retry-decision.ts';
import { privateStateDir, rememberedUrl, remember } from './upload-state.ts';

const MiB = 1024 * 1024;

export interface UploadOptions {
  readonly file: string;
  /** The target's base URL (`…/artifacts/{id}`, `…/packages/{name}/{version}[/assets/{asset}]`). */
  readonly url: string;
  readonly key: string;
  readonly contentType?: string;
  readonly signal?: AbortSignal;
  /** Files larger than this use the multipart API (default 64 MiB). */
  readonly multipartThreshold?: number;
  /** Part size (default 16 MiB). */
  readonly partSize?: number;
  /** Parts in flight at once (default 4). */
  readonly concurrency?: number;
  /** Where unfinished sessions are remembered (default `~/.cache/arkvory/uploads`): a directory of this user, made 0700. */
  readonly stateDir?: string;
  /** Attempts per request on 429/502/503/504 or a dropped connection (default 8). */
  readonly maxAttempts?: number;
  readonly pollIntervalMs?: number;
  readonly onPart?: (event: { partNumber: number; sizeBytes: number; reused: boolean }) => void;
  readonly dispatcher?: Dispatcher;
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly now?: () => number;
}

export interface UploadResult {
  readonly sha256: string;
  readonly sizeBytes: number;
  /** `created` (201), `exists` (the same bytes were already there). */
  readonly outcome: 'created' | 'exists';
  readonly multipart: boolean;
  readonly partsSent: number;
  readonly partsReused: number;
  readonly upload: string | undefined;
}

interface SessionBody {
  upload: string;
  url: string;
  state: 'open' | 'completing' | 'done' | 'failed' | 'aborted' | 'expired';
  parts: Array<{ partNumber: number; sizeBytes: number; sha256: string }>;
  error: string | null;
  artifact: { sha256: string; sizeBytes: number } | null;
}

interface Part {
  partNumber: number;
  start: number;
  sizeBytes: number;
  sha256: string;
}

const defaultSleep = (ms: number, signal?: AbortSignal) => sleepFor(ms, undefined, signal ? { signal } : undefined);

async function sha256Of(file: string, start?: number, end?: number): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(file, start === undefined ? {} : { start, end }), hash);
  return hash.digest('hex');
}

export function contentDigestHeader(sha256Hex: string): string {
  return `sha-256=:${Buffer.from(sha256Hex, 'hex').toString('base64')}:`;
}

export async function upload(options: UploadOptions): Promise<UploadResult> {
  const info = await stat(options.file);
  if (!info.isFile()) throw new ArkvoryClientError('invalid_argument', `${options.file} is not a file.`);
  const size = info.size;
  const sha256 = await sha256Of(options.file);
  const threshold = options.multipartThreshold ?? 64 * MiB;
  const http = new Requests(options);
  if (size <= threshold) {
    const res = await http.send('PUT', options.url, {
      headers: {
        'content-type': options.contentType ?? 'application/octet-stream',
        'content-length': String(size),
        'content-digest': contentDigestHeader(sha256),
      },
      body: () => createReadStream(options.file),
    });
    return {
      sha256,
      sizeBytes: size,
      outcome: res.status === 201 ? 'created' : 'exists',
      multipart: false,
      partsSent: 0,
      partsReused: 0,
      upload: undefined,
    };
  }
  return uploadMultipart(options, http, size, sha256);
}

async function uploadMultipart(
  options: UploadOptions,
  http: Requests,
  size: number,
  sha256: string,
): Promise<UploadResult> {
  const partSize = options.partSize ?? 16 * MiB;
  const stateDir =
    options.stateDir ??
    path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'arkvory', 'uploads');
  const stateFile = path.join(
    stateDir,
    `${createHash('sha256').update([options.url, sha256, size, partSize].join('\n')).digest('hex').slice(0, 32)}.json`,
  );
  const origin = new URL(options.url).origin;

  await privateStateDir(stateDir);
  const remembered = await rememberedUrl(stateFile);
  let session = await resumeSession(http, remembered, origin);
  if (!session) {
    const res = await http.send('POST', `${options.url}/uploads`, {
      json: { size, sha256, contentType: options.contentType ?? 'application/octet-stream' },
    });
    session = JSON.parse(res.body) as SessionBody;
  }
  const sessionUrl = pathOnOrigin(origin, session.url);
  if (sessionUrl === undefined)
    throw new ArkvoryClientError(
      'protocol',
      `The gateway named an upload session off its own origin: ${String(session.url)}.`,
    );
  // Written only when it changes: a resume on a full disk goes on with the state it has.
  if (remembered !== sessionUrl) await remember(stateFile, sessionUrl);

  const parts: Part[] = [];
  for (let start = 0, n = 1; start < size; start += partSize, n++) {
    const sizeBytes = Math.min(partSize, size - start);
    parts.push({ partNumber: n, start, sizeBytes, sha256: await sha256Of(options.file, start, start + sizeBytes - 1) });
  }
  let sent = 0;
  let reused = 0;
  if (session.state === 'open') {
    const held = new Map(session.parts.map((p) => [p.partNumber, p]));
    const missing = parts.filter((p) => {
      const h = held.get(p.partNumber);
      const same = h !== undefined && h.sizeBytes === p.sizeBytes && h.sha256 === p.sha256;
      if (same) {
        reused++;
        options.onPart?.({ partNumber: p.partNumber, sizeBytes: p.sizeBytes, reused: true });
      }
      return !same;
    });
    // A bounded pool: each worker takes the next missing part until none is left.
    const queue = [...missing];
    const worker = async () => {
      for (let part = queue.shift(); part; part = queue.shift()) {
        const p = part;
        await http.send('PUT', `${sessionUrl}/parts/${p.partNumber}`, {
          headers: { 'content-length': String(p.sizeBytes), 'content-type': 'application/octet-stream' },
          body: () => createReadStream(options.file, { start: p.start, end: p.start + p.sizeBytes - 1 }),
        });
        sent++;
        options.onPart?.({ partNumber: p.partNumber, sizeBytes: p.sizeBytes, reused: false });
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(options.concurrency ?? 4, missing.length)) }, worker));
    await http.send('POST', `${sessionUrl}/complete`, {
      json: { parts: parts.map((p) => ({ partNumber: p.partNumber, sha256: p.sha256 })) },
      accept: [202, 409],
    });
  }
  const done = await waitForCompletion(http, sessionUrl, options);
  await rm(stateFile, { force: true });
  if (done.artifact?.sha256 !== sha256)
    throw new ArkvoryClientError(
      'upload_failed',
      `The gateway published sha256 ${done.artifact?.sha256}, the file is ${sha256}.`,
    );
  return {
    sha256,
    sizeBytes: size,
    outcome: 'created',
    multipart: true,
    partsSent: sent,
    partsReused: reused,
    upload: done.upload,
  };
}

/** The remembered session, when the gateway still has it open, completing or done. */
async function resumeSession(
  http: Requests,
  remembered: string | undefined,
  origin: string,
): Promise<SessionBody | undefined> {
  if (remembered === undefined || !remembered.startsWith(`${origin}/`)) return undefined;
  try {
    const session = JSON.parse((await http.send('GET', remembered, {})).body) as SessionBody;
    return session.state === 'open' || session.state === 'completing' || session.state === 'done' ? session : undefined;
  } catch (err) {
    if (err instanceof ArkvoryClientError && (err.status === 404 || err.status === 410)) return undefined;
    throw err;
  }
}

async function waitForCompletion(http: Requests, sessionUrl: string, options: UploadOptions): Promise<SessionBody> {
  for (;;) {
    const session = JSON.parse((await http.send('GET', sessionUrl, {})).body) as SessionBody;
    if (session.state === 'done') return session;
    if (session.state !== 'completing')
      throw new ArkvoryClientError(
        'upload_failed',
        `The upload ended ${session.state}${session.error ? `: ${session.error}` : ''}.`,
      );
    await (options.sleep ?? defaultSleep)(options.pollIntervalMs ?? 250, options.signal);
  }
}

/** One request with the key, retried on 429 (Retry-After), 502/503/504 and dropped connections. */
class Requests {
  readonly #options: UploadOptions;
  constructor(options: UploadOptions) {
    this.#options = options;
  }

  async send(
    method: 'GET' | 'PUT' | 'POST',
    url: string,
    what: { headers?: Record<string, string>; body?: () => NodeJS.ReadableStream; json?: unknown; accept?: number[] },
  ): Promise<{ status: number; body: string }> {
    const o = this.#options;
    const sleep = o.sleep ?? defaultSleep;
    const maxAttempts = o.maxAttempts ?? 8;
    for (let attempt = 1; ; attempt++) {
      if (o.signal?.aborted) throw new ArkvoryClientError('aborted', undefined, { cause: o.signal.reason });
      const headers: Record<string, string> = { authorization: `Bearer ${o.key}`, ...what.headers };
      let body: string | NodeJS.ReadableStream | undefined;
      if (what.json !== undefined) {
        body = JSON.stringify(what.json);
        headers['content-type'] = 'application/json';
      } else if (what.body) body = what.body();
      let waitMs: number;
      try {
        const res = await request(url, {
          method,
          headers,
          body: body as string,
          ...(o.signal ? { signal: o.signal } : {}),
          ...(o.dispatcher ? { dispatcher: o.dispatcher } : {}),
        });
        if ((res.statusCode >= 200 && res.statusCode < 300) || what.accept?.includes(res.statusCode))
          return { status: res.statusCode, body: await res.body.text() };
        const error = gatewayError(res.statusCode, await errorBody(res.body));
        if (res.statusCode === 429) waitMs = retryAfterMs(res.headers, (o.now ?? Date.now)(), 1000, 60_000);
        else if (res.statusCode >= 502 && res.statusCode <= 504) waitMs = backoffMs(attempt);
        else throw error;
        if (attempt >= maxAttempts) throw error;
      } catch (err) {
        if (o.signal?.aborted) throw new ArkvoryClientError('aborted', undefined, { cause: err });
        const refused = unsendable(err);
        if (refused) throw refused;
        if (err instanceof ArkvoryClientError || attempt >= maxAttempts) throw err;
        waitMs = backoffMs(attempt);
      }
      await sleep(waitMs, o.signal);
    }
  }
}
