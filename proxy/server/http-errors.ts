/**
 * The one error catalogue of the HTTP edge, merged from every layer's at module load (a code declared
 * by two layers stops the process before it listens), and the one way an error becomes a response.
 */
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import http from '../../lib/node-http.ts';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { type CodeOf, type ErrorEntry, mergeCatalogues } from '../../lib/coded-error.ts';
import { COMMON_ERRORS } from '../../lib/common-errors.ts';
import { POLICY_ERRORS } from '../../policy/errors.ts';
import { RATE_LIMIT_ERRORS } from '../../policy/rate-limit/errors.ts';
import { BACKUP_ERRORS } from '../../storage-adapter/backup/errors.ts';
import { STORAGE_ERRORS } from '../../storage-adapter/errors.ts';
import { GATEWAY_ERRORS } from './errors.ts';

/** Every layer's catalogue, in the order the README lists their codes when statuses tie. */
export const LAYER_CATALOGUES = [
  COMMON_ERRORS,
  POLICY_ERRORS,
  RATE_LIMIT_ERRORS,
  STORAGE_ERRORS,
  BACKUP_ERRORS,
  GATEWAY_ERRORS,
] as const;

/** Every code of every layer, each declared once. */
export const ERROR_CATALOGUE = mergeCatalogues('http', ...LAYER_CATALOGUES);

export type ErrorCode = CodeOf<typeof ERROR_CATALOGUE>;

/**
 * The store layer's codes: their errors quote the store (its address, bucket, keys, its own error
 * text, a filesystem path). A 5xx among them answers with the catalogue's words; the log line of the
 * failure keeps the detail.
 */
const STORE_CODES: ReadonlySet<string> = new Set(Object.keys(STORAGE_ERRORS.entries));

function entryOf(code: string): ErrorEntry | undefined {
  return Object.hasOwn(ERROR_CATALOGUE.entries, code) ? ERROR_CATALOGUE.entries[code as ErrorCode] : undefined;
}

export interface HttpError {
  status: number;
  code: string;
  message: string;
  headers: Record<string, string | string[]>;
  /** Fields of the JSON body besides `code` and `message`. */
  details: Readonly<Record<string, unknown>>;
}

/**
 * Turns any error into its response: a coded error whose code has a status keeps its code, message,
 * headers and details; anything else (no code, or a code no response carries) is 500 `internal`
 * with the generic message, the real error going to the log only.
 */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof Error) {
    const { code, headers, details } = err as { code?: unknown; headers?: unknown; details?: unknown };
    const status = typeof code === 'string' ? entryOf(code)?.status : undefined;
    if (typeof code === 'string' && typeof status === 'number') {
      // Details add fields; they never replace the code or the message.
      const { code: _code, message: _message, ...extra } = (details as Record<string, unknown> | undefined) ?? {};
      return {
        status,
        code,
        message: status >= 500 && STORE_CODES.has(code) ? entryOf(code)!.message : err.message,
        headers: { ...((headers as Record<string, string | string[]> | undefined) ?? {}) },
        details: extra,
      };
    }
  }
  return { status: 500, code: 'internal', message: GATEWAY_ERRORS.entries.internal.message, headers: {}, details: {} };
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string | string[]> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    ...headers,
  });
  res.end(res.req.method === 'HEAD' ? undefined : text);
}

function errorBody(mapped: HttpError): Record<string, unknown> {
  return { code: mapped.code, message: mapped.message, ...mapped.details };
}

/**
 * 5xx answers that are states, not faults, so never at the error level (which is for ours): the
 * gateway's `unavailable` (draining, a queue closed at shutdown), and `quota_exceeded`, the client's
 * use of its storage quota (507 as RFC 4331 has it, but a client sending past it is no fault of ours).
 */
const NOT_FAULTS: ReadonlySet<string> = new Set(['unavailable', 'quota_exceeded']);

function logError(log: Logger, err: unknown, mapped: HttpError): void {
  if (mapped.status >= 500 && !NOT_FAULTS.has(mapped.code)) log.error({ err, code: mapped.code }, 'request failed');
  else log.info({ code: mapped.code }, mapped.message);
}

/**
 * Answers with the JSON error body `{ code, message, ...details }`, or, when headers are already
 * out, destroys the response so the client never sees a truncated body that looks complete. Every
 * error response of the gateway and the router is written here (or by `sendErrorOnSocket`).
 */
export function sendError(res: ServerResponse, err: unknown, log?: Logger): void {
  const mapped = toHttpError(err);
  // Without a logger the caller keeps its own record (a counter, its own line).
  if (log) logError(log, err, mapped);
  if (res.headersSent) {
    res.destroy(err instanceof Error ? err : undefined);
    return;
  }
  sendJson(res, mapped.status, errorBody(mapped), mapped.headers);
}

/**
 * The same answer written on a bare socket and closed, for a request Node could not parse (there is
 * no response object then). It carries a fresh `x-request-id`: every response has one. False when
 * the socket could no longer take it (it is destroyed instead).
 */
export function sendErrorOnSocket(
  socket: Duplex,
  err: unknown,
  /** The listener's own headers (proxy/server/listener-headers.ts): Strict-Transport-Security. */
  extra: readonly (readonly [string, string])[] = [],
): boolean {
  if (!socket.writable || socket.destroyed) {
    socket.destroy();
    return false;
  }
  const mapped = toHttpError(err);
  const body = JSON.stringify(errorBody(mapped));
  const headers: (readonly [string, string])[] = [
    ['content-type', 'application/json; charset=utf-8'],
    ['content-length', String(Buffer.byteLength(body))],
    ['cache-control', 'no-store'],
    ['x-content-type-options', 'nosniff'],
    ['x-request-id', randomUUID()],
  ];
  for (const [name, value] of Object.entries(mapped.headers))
    for (const one of Array.isArray(value) ? value : [value]) headers.push([name, one]);
  headers.push(...extra, ['connection', 'close']);
  const head = headers.map(([name, value]) => `${name}: ${value}\r\n`).join('');
  socket.end(`HTTP/1.1 ${mapped.status} ${http.STATUS_CODES[mapped.status] ?? 'Error'}\r\n${head}\r\n${body}`);
  return true;
}
