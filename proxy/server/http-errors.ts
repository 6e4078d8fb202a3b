import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { POLICY_ERRORS, type PolicyErrorCode } from '../../policy/errors.ts';
import { STORAGE_ERRORS, type StorageErrorCode } from '../../storage-adapter/errors.ts';
import { GATEWAY_ERRORS, type GatewayErrorCode } from './errors.ts';

export type ErrorCode = PolicyErrorCode | StorageErrorCode | GatewayErrorCode;

/** The only code → HTTP status table. A code missing here fails to compile. */
export const HTTP_STATUS: Record<ErrorCode, number> = {
  invalid_request: 400,
  part_missing: 400,
  part_mismatch: 400,
  parts_out_of_order: 400,
  unauthorized: 401,
  forbidden: 403,
  tls_required: 403,
  not_found: 404,
  method_not_allowed: 405,
  read_only: 405,
  conflict: 409,
  upload_expired: 410,
  request_timeout: 408,
  payload_too_large: 413,
  range_not_satisfiable: 416,
  rate_limited: 429,
  busy: 429,
  internal: 500,
  upstream_unreachable: 502,
  unavailable: 503,
  lease_lost: 503,
  storage_mismatch: 503,
  upstream_timeout: 504,
  storage_full: 507,
};

/** Every code with its default message, for the README contract test. */
export const ALL_ERROR_MESSAGES: Record<ErrorCode, string> = { ...GATEWAY_ERRORS, ...STORAGE_ERRORS, ...POLICY_ERRORS };

interface CodedError {
  code: ErrorCode;
  message: string;
  headers?: Readonly<Record<string, string | string[]>>;
}

function isCoded(err: unknown): err is CodedError {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && Object.hasOwn(HTTP_STATUS, code);
}

/** Turns any error into `{status, code, message, headers}`; unknown errors become 500 `internal`. */
export function toHttpError(err: unknown): {
  status: number;
  code: ErrorCode;
  message: string;
  headers: Record<string, string | string[]>;
} {
  if (isCoded(err)) {
    return { status: HTTP_STATUS[err.code], code: err.code, message: err.message, headers: { ...(err.headers ?? {}) } };
  }
  return { status: 500, code: 'internal', message: GATEWAY_ERRORS.internal, headers: {} };
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
    ...headers,
  });
  res.end(res.req.method === 'HEAD' ? undefined : text);
}

/**
 * Answers with the JSON error body, or, when headers are already out, destroys the response so the
 * client never sees a truncated body that looks complete.
 */
export function sendError(res: ServerResponse, err: unknown, log: Logger): void {
  const mapped = toHttpError(err);
  // `unavailable` is a state (draining, a queue closed at shutdown), not a fault: the error level is for faults.
  if (mapped.status >= 500 && mapped.code !== 'unavailable') log.error({ err, code: mapped.code }, 'request failed');
  else log.info({ code: mapped.code }, mapped.message);
  if (res.headersSent) {
    res.destroy(err instanceof Error ? err : undefined);
    return;
  }
  sendJson(res, mapped.status, { code: mapped.code, message: mapped.message }, mapped.headers);
}
