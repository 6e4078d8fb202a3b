/** Stable codes of policy decisions and failures (auth, admission, bandwidth, leases). */
import { type CodeOf, CodedError, type CodedErrorOptions, defineErrors, mergeCatalogues } from '../lib/coded-error.ts';
import { COMMON_ERRORS } from '../lib/common-errors.ts';

export const POLICY_ERRORS = defineErrors('policy/errors.ts', {
  unauthorized: {
    status: 401,
    message: 'A valid API key is required.',
    advice: 'Send `Authorization: Bearer ark_<keyId>_<secret>` with a live key.',
  },
  forbidden: {
    status: 403,
    message: 'This key may not do that here.',
    advice: 'Ask an admin for the grant or scope the call needs.',
  },
  rate_limited: {
    status: 429,
    message: 'Too many requests; retry later.',
    advice: 'Wait `Retry-After` seconds; see the RateLimit headers.',
  },
  busy: {
    status: 429,
    message: 'Too many transfers for this principal; retry later.',
    advice: 'Too many transfers for this principal; wait `Retry-After` seconds.',
  },
  lease_lost: {
    status: 503,
    message: 'This gateway lost its share of the download budget and must be restarted.',
    advice: 'This gateway lost its lease and is fenced; restart it (clients retry with Range).',
  },
  reset_refused: {
    status: null,
    message: '`arkvory policy reset` refused: something still runs.',
    advice: 'Stop every gateway and the worker, wait until their leases expire, then run the reset again.',
  },
});

/** What a policy module may raise: its own codes and the common ones. */
const RAISED = mergeCatalogues('policy', COMMON_ERRORS, POLICY_ERRORS);

export type PolicyErrorCode = CodeOf<typeof RAISED>;

export class PolicyError extends CodedError<PolicyErrorCode> {
  override readonly name: string = 'PolicyError';
  constructor(code: PolicyErrorCode, message?: string, options?: CodedErrorOptions) {
    super(RAISED, code, message, options);
  }
}
