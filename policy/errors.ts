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
  rate_limit_unavailable: {
    status: 503,
    message: 'A rate-limit rule that fails closed could not reach its counter store; retry later.',
    advice:
      'A rule with `on_store_error: deny` applies and Redis is down or slow (`ARKVORY_REDIS_URL`); retry after `Retry-After` seconds. Rules without it fail open.',
  },
  quota_exceeded: {
    status: 507,
    message: 'The upload would exceed a storage quota.',
    advice:
      'The body names the quota (`scope`, `subject`), its `quotaBytes`, `usageBytes`, `remainingBytes` and `requestedBytes`; delete artifacts or ask an admin to raise it (`arkvory quota set`).',
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
  link_content_changed: {
    status: 410,
    message:
      'The name this link was made for no longer holds the same content (deleted and replaced); ask for a new link.',
    advice: 'The object was deleted or replaced by other bytes after the link was made; ask its owner for a new link.',
  },
  link_outdated: {
    status: 410,
    message: 'This link was made by an older version that did not bind links to content; ask for a new link.',
    advice: 'Links made before content binding are refused; ask for a new link (`arkvory presign`).',
  },
  rules_too_large: {
    status: 400,
    message:
      'The published rate-limit rules would exceed a bound: rules per limiter, document size, or the number and cost of regexes.',
    advice:
      'Publish fewer rules per limiter (at most 100), fewer or simpler regexes (32, 4000 instructions together); delete rules no longer needed (docs/rate-limits.md, "Bounds on published rules").',
  },
  rules_outcome_unknown: {
    status: 503,
    message:
      'The rate-limit rule store did not confirm the change in time: it may or may not have been applied. Read the rules before sending it again.',
    advice:
      'Read the rules (`GET /api/v1/admin/rate-limits`) to see whether it landed; publishing the same batch again is harmless (rules are replaced by name), a delete that landed answers 404. Check the rule store (Redis or PostgreSQL): it is very slow or hung.',
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
