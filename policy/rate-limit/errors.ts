import { clipped } from '../../lib/quoted.ts';
import { type CodeOf, CodedError, defineErrors } from '../../lib/coded-error.ts';

/**
 * Codes of the rate-limit engine. None of them reaches a client as such: the gate turns a block into
 * the policy code `rate_limited`, the admin routes map these onto `invalid_request`, `not_found`,
 * `forbidden` (a bypass rule, or a weakened default rule, from a publisher not allowed to add one),
 * `rules_too_large` and `unavailable`.
 */
export const RATE_LIMIT_ERRORS = defineErrors('policy/rate-limit/errors.ts', {
  invalid_rules: {
    status: null,
    message: 'The rate-limit rules are invalid.',
    advice:
      'Each problem line names the file, line and rule; fix them and check with `arkvory ratelimit validate` before deploying.',
  },
  invalid_regex: {
    status: null,
    message: 'A rule regex is not valid RE2 or is too large.',
    advice: 'Rule regexes use RE2 syntax (no lookaround or backreferences) and stay small; simplify the pattern.',
  },
  unknown_limiter: {
    status: null,
    message: 'No such limiter.',
    advice: 'Name a limiter of `policy/rate-limit/available_limiters.yaml` (`arkvory ratelimit show` lists them).',
  },
  unknown_rule: {
    status: null,
    message: 'No such published rule.',
    advice: '`arkvory ratelimit show` lists the published rules by limiter.',
  },
  bypass_not_allowed: {
    status: null,
    message: 'This publisher may not add bypass (skip) rules or weaken a default rule.',
    advice: 'Publish as a principal listed in `ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS`, or drop the skip rule.',
  },
  rules_over_bounds: {
    status: null,
    message: 'The published rules would exceed a bound (rules per limiter, document size, regex count or cost).',
    advice:
      'Publish fewer rules per limiter (at most 100), fewer or simpler regexes (32, 4000 instructions together); delete rules no longer needed (docs/rate-limits.md, "Bounds on published rules").',
  },
  store_unavailable: {
    status: null,
    message: 'The rate-limit store is unavailable.',
    advice:
      'Check the rule store: Redis (`ARKVORY_REDIS_URL`), or the database without it; checks fail open until Redis is back.',
  },
  store_timeout: {
    status: null,
    message: 'The rate-limit store did not answer in time.',
    advice: 'Redis is slow or overloaded; check it. Checks fail open meanwhile.',
  },
  store_outcome_unknown: {
    status: null,
    message:
      'The rate-limit rule store did not answer a write, even after it was told to stop; the write may or may not have landed.',
    advice:
      'Read the rules (`arkvory ratelimit show`) before publishing again; the log says later whether the write landed. Check the rule store (Redis or PostgreSQL): it is very slow or hung.',
  },
});

export type RateLimitErrorCode = CodeOf<typeof RATE_LIMIT_ERRORS>;

/** One validation problem: where (file, line, key path, rule) and what. */
export interface RuleProblem {
  /** Key path inside the document, e.g. `["rate_limits", "user_sign_in", 1, "ban_for_s"]`. */
  readonly path: readonly (string | number)[];
  readonly message: string;
  /** Name of the rule the problem is in, when known. */
  readonly rule?: string | undefined;
  readonly file?: string | undefined;
  readonly line?: number | undefined;
}

export class RateLimitError extends CodedError<RateLimitErrorCode> {
  override readonly name: string = 'RateLimitError';
  /** Set for `invalid_rules`: every problem found, not just the first. */
  readonly problems: readonly RuleProblem[];
  constructor(
    code: RateLimitErrorCode,
    message?: string,
    options?: { cause?: unknown; problems?: readonly RuleProblem[] },
  ) {
    super(RATE_LIMIT_ERRORS, code, message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.problems = options?.problems ?? [];
  }
}

/** `file:line: path (rule "x"): message`, the format the CLI and the startup error print. */
export function formatProblem(p: RuleProblem): string {
  const where = p.file ? `${p.file}${p.line ? `:${p.line}` : ''}: ` : p.line ? `line ${p.line}: ` : '';
  const path = formatPath(p.path);
  return `${where}${path}${p.rule ? ` (rule "${clipped(p.rule)}")` : ''}: ${p.message}`;
}

export function formatPath(path: readonly (string | number)[]): string {
  let out = '';
  // A key is the caller's (a publish body's, a file's): bounded, as every value quoted back.
  for (const part of path) out += typeof part === 'number' ? `[${part}]` : out ? `.${clipped(part)}` : clipped(part);
  return out || '(document)';
}
