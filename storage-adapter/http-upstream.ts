/**
 * The HTTP edge of the static-HTTP store: one keep-alive undici `Pool` per store (never `fetch`,
 * which decompresses), and the mapping of undici's stable error codes to storage codes.
 */
import { Pool } from 'undici';
import { StorageError } from './errors.ts';

/** Connect, header and body-silence timeouts end as `upstream_timeout`; see undici's Errors.md. */
const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT', 'upstream_timeout']);

/** Maps a failure to talk to the store; a StorageError (ours, or a body check) passes through. */
export function upstreamError(err: unknown, what: string): StorageError {
  if (err instanceof StorageError) return err;
  const code = (err as { code?: string } | undefined)?.code ?? '';
  const detail = err instanceof Error ? err.message : String(err);
  if (TIMEOUT_CODES.has(code) || (err as { name?: string } | undefined)?.name === 'TimeoutError') {
    return new StorageError('upstream_timeout', `The artifact store did not answer in time (${what}: ${detail}).`, { cause: err });
  }
  return new StorageError('upstream_unreachable', `The artifact store could not be reached (${what}: ${detail}).`, { cause: err });
}

/** An answer the store should not give (a 5xx, an unexpected 4xx): reported, never guessed around. */
export function unexpectedStatus(status: number, what: string): StorageError {
  if (status === 507) return new StorageError('storage_full', `The artifact store has no space left (${what}: 507).`);
  return new StorageError('upstream_unreachable', `The artifact store answered ${status} to ${what}.`);
}

/** `bytes a-b/size` of a 206 answer; anything else (a `*` size, junk) is undefined. */
export function parseContentRange(value: string | string[] | undefined): { start: number; end: number; size: number } | undefined {
  const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(String(value ?? '').trim());
  return m ? { start: Number(m[1]), end: Number(m[2]), size: Number(m[3]) } : undefined;
}

export interface UpstreamOptions {
  readonly connectTimeoutMs: number;
  /** Longest wait for response headers and longest silence inside a response body. */
  readonly timeoutMs: number;
}

export function createUpstreamPool(origin: string, options: UpstreamOptions): Pool {
  return new Pool(origin, {
    connectTimeout: options.connectTimeoutMs,
    headersTimeout: options.timeoutMs,
    // undici only counts body silence while the body is flowing: a paused (slow-client) body never times out.
    bodyTimeout: options.timeoutMs,
    keepAliveTimeout: 4000,
  });
}

