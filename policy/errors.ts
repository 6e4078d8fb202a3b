/** Stable codes of policy decisions and failures (auth, admission, bandwidth, leases, rate limits). */
export const POLICY_ERRORS = {
  unauthorized: 'A valid API key is required.',
  forbidden: 'This key may not do that here.',
  not_found: 'Not found.',
  rate_limited: 'Too many requests; retry later.',
  busy: 'Too many transfers for this principal; retry later.',
  lease_lost: 'This gateway lost its share of the download budget and must be restarted.',
  unavailable: 'A dependency is unavailable; retry later.',
  invalid_request: 'The request is malformed.',
  conflict: 'The request conflicts with the current state.',
  rules_too_large:
    'The published rate-limit rules would exceed a bound: rules per limiter, document size, or the number and cost of regexes.',
} as const;

export type PolicyErrorCode = keyof typeof POLICY_ERRORS;

export class PolicyError extends Error {
  override readonly name = 'PolicyError';
  readonly code: PolicyErrorCode;
  /** Response headers the edge should copy (Retry-After, RateLimit-*, WWW-Authenticate). */
  readonly headers: Readonly<Record<string, string | string[]>>;
  constructor(
    code: PolicyErrorCode,
    message?: string,
    options?: { cause?: unknown; headers?: Record<string, string | string[]> },
  ) {
    super(message ?? POLICY_ERRORS[code], options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.headers = options?.headers ?? {};
  }
}
