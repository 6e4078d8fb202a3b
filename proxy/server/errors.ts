/** Stable codes raised by the HTTP edge itself. */
export const GATEWAY_ERRORS = {
  not_found: 'Not found.',
  invalid_request: 'The request is malformed.',
  method_not_allowed: 'Method not allowed on this route.',
  read_only: 'This gateway is read-only; send writes to the writer.',
  unavailable: 'The gateway cannot serve right now.',
  internal: 'Internal error.',
  upstream_unreachable: 'The upstream could not be reached.',
  upstream_timeout: 'The upstream did not answer in time.',
  payload_too_large: 'The request body is larger than allowed.',
  request_timeout: 'The request body stalled past the body timeout; the upload was dropped.',
  tls_required: 'Credentials are refused over plain HTTP here; use https.',
} as const;

export type GatewayErrorCode = keyof typeof GATEWAY_ERRORS;

export class GatewayError extends Error {
  override readonly name = 'GatewayError';
  readonly code: GatewayErrorCode;
  readonly headers: Readonly<Record<string, string>>;
  constructor(
    code: GatewayErrorCode,
    message?: string,
    options?: { cause?: unknown; headers?: Record<string, string> },
  ) {
    super(message ?? GATEWAY_ERRORS[code], options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.headers = options?.headers ?? {};
  }
}
