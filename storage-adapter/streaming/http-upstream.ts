/**
 * The HTTP edge of the static-HTTP store: one keep-alive undici `Pool` per store (never `fetch`,
 * which decompresses), and the mapping of undici's stable error codes to storage codes.
 */
import { createRequire } from 'node:module';
import type { Pool } from 'undici';
import { StorageError } from '../errors.ts';

// undici (110 modules, about a sixth of a gateway's start-up CPU) is loaded by the first store that
// reaches a server: a gateway on a directory never needs it. `require`, not `import()`: a store
// opens its pool in its constructor, synchronously.
const requireModule = createRequire(import.meta.url);

/** Connect, header and body-silence timeouts end as `upstream_timeout`; see undici's Errors.md. */
const TIMEOUT_CODES = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
  'upstream_timeout',
]);

/** Maps a failure to talk to the store; a StorageError (ours, or a body check) passes through. */
export function upstreamError(err: unknown, what: string): StorageError {
  if (err instanceof StorageError) return err;
  const code = (err as { code?: string } | undefined)?.code ?? '';
  const detail = err instanceof Error ? err.message : String(err);
  if (TIMEOUT_CODES.has(code) || (err as { name?: string } | undefined)?.name === 'TimeoutError') {
    return new StorageError('upstream_timeout', `The artifact store did not answer in time (${what}: ${detail}).`, {
      cause: err,
    });
  }
  return new StorageError('upstream_unreachable', `The artifact store could not be reached (${what}: ${detail}).`, {
    cause: err,
  });
}

/** An answer the store should not give (a 5xx, an unexpected 4xx): reported, never guessed around. */
export function unexpectedStatus(status: number, what: string): StorageError {
  if (status === 507) return new StorageError('storage_full', `The artifact store has no space left (${what}: 507).`);
  return new StorageError('upstream_unreachable', `The artifact store answered ${status} to ${what}.`);
}

/** `bytes a-b/size` of a 206 answer; anything else (a `*` size, junk) is undefined. */
export function parseContentRange(
  value: string | string[] | undefined,
): { start: number; end: number; size: number } | undefined {
  const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(String(value ?? '').trim());
  return m ? { start: Number(m[1]), end: Number(m[2]), size: Number(m[3]) } : undefined;
}

/**
 * The object size a HEAD answer gives: its Content-Length, which must be a plain non-negative
 * integer. Without one (or with junk) the store's answer says nothing of the blob: 502
 * `upstream_unreachable`, not a size of NaN that later reads as a damaged catalog row (a 500).
 */
export function headLength(value: string | string[] | undefined, what: string): number {
  const text = String(value ?? '');
  const size = /^\d{1,16}$/.test(text) ? Number(text) : Number.NaN;
  if (Number.isSafeInteger(size)) return size;
  throw new StorageError(
    'upstream_unreachable',
    `The artifact store answered ${what} without a valid Content-Length (${JSON.stringify(text.slice(0, 40))}).`,
  );
}

export interface UpstreamOptions {
  readonly connectTimeoutMs: number;
  /** Longest wait for response headers and longest silence inside a response body. */
  readonly timeoutMs: number;
}

export function createUpstreamPool(origin: string, options: UpstreamOptions): Pool {
  const undici = requireModule('undici') as typeof import('undici');
  return new undici.Pool(origin, {
    connectTimeout: options.connectTimeoutMs,
    headersTimeout: options.timeoutMs,
    // undici only counts body silence while the body is flowing: a paused (slow-client) body never times out.
    bodyTimeout: options.timeoutMs,
    keepAliveTimeout: 4000,
  });
}

/** Our error classes carry lower_snake_case codes; Node's and undici's are upper case (ECONNRESET, UND_ERR_…). */
export function hasStableCode(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && /^[a-z][a-z0-9_]*$/.test(code);
}

/** The largest piece of an upload body handed to undici at once (a stream's default buffer). */
const STALL_PIECE_BYTES = 64 * 1024;

/**
 * Sends a streamed request body through `send` (the static and S3 stores' PUTs). undici's header
 * timeout only refreshes while the socket is full, so a slowly paced upload would trip it; instead our
 * own timer (`timeoutMs`, then `timeoutMessage` as 504 `upstream_timeout`) starts once the last byte
 * is handed over. While the body flows, a piece handed over and not followed by a request for the
 * next one within `timeoutMs` is a store that takes no bytes (504 `upstream_timeout` too): the
 * wait for the body's own next chunk (a slow or paced client) is never counted. The error that
 * wins says what really happened: the caller's abort, then a body that failed with one of our
 * stable codes (size, digest, a policy refusal), then the store's failure (a raw stream error from
 * the body is only the echo of the store failing under it). A success that comes before the body
 * ended is a failure (`upstream_unreachable`).
 */
export async function sendStreamedBody(
  body: AsyncIterable<Buffer>,
  options: { readonly signal?: AbortSignal | undefined; readonly timeoutMs: number; readonly timeoutMessage: string },
  send: (body: AsyncGenerator<Buffer>, signal: AbortSignal) => Promise<unknown>,
): Promise<void> {
  const controller = new AbortController();
  const { signal } = options;
  const onAbort = () => controller.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  let bodyError: unknown;
  let bodyEnded = false;
  const stalled = () =>
    controller.abort(
      new StorageError(
        'upstream_timeout',
        `The artifact store took no more of the upload for ${options.timeoutMs} ms.`,
      ),
    );
  async function* watched(): AsyncGenerator<Buffer> {
    const chunks = body[Symbol.asyncIterator]();
    /** The body ended or failed on its own: nothing to release. */
    let over = false;
    try {
      for (;;) {
        let next: IteratorResult<Buffer>;
        try {
          next = await chunks.next();
        } catch (err) {
          over = true;
          bodyError = err;
          throw err;
        }
        if (next.done) {
          over = true;
          break;
        }
        // In pieces no larger than the request stream's buffer: a piece is asked for as soon as the
        // socket took the one before, so a slow store (a long wait for a whole large chunk) is not a stalled one.
        for (let at = 0; at < next.value.length; at += STALL_PIECE_BYTES) {
          timer = setTimeout(stalled, options.timeoutMs);
          yield next.value.subarray(at, at + STALL_PIECE_BYTES);
          clearTimeout(timer);
        }
      }
    } finally {
      clearTimeout(timer);
      // Left early (the store failed, or answered): the body's producer is released too.
      if (!over) await chunks.return?.(undefined)?.catch(() => {});
    }
    bodyEnded = true;
    timer = setTimeout(
      () => controller.abort(new StorageError('upstream_timeout', options.timeoutMessage)),
      options.timeoutMs,
    );
  }
  const sent = watched();
  try {
    await send(sent, controller.signal);
    if (!bodyEnded) {
      // A success before the body ended (a store or proxy that answers without reading it) says
      // nothing about bytes the body's checks never saw: never taken as stored.
      controller.abort();
      void sent.return(undefined).catch(() => {});
      throw new StorageError(
        'upstream_unreachable',
        'The artifact store answered the upload before it had received the whole body.',
      );
    }
  } catch (err) {
    if (bodyError === undefined && signal?.aborted) throw signal.reason;
    throw hasStableCode(bodyError) ? bodyError : err;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}
