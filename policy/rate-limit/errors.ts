/**
 * Codes of the rate-limit engine. None of them reaches a client as such: the gate turns a block into
 * the policy code `rate_limited`, the admin routes map these onto `invalid_request`, `not_found`,
 * `forbidden` (a bypass rule, or a weakened default rule, from a publisher not allowed to add one),
 * `rules_too_large` and `unavailable`.
 */
export const RATE_LIMIT_ERRORS = {
  invalid_rules: 'The rate-limit rules are invalid.',
  unknown_limiter: 'No such limiter.',
  unknown_rule: 'No such published rule.',
  bypass_not_allowed: 'This publisher may not add bypass (skip) rules or weaken a default rule.',
  rules_too_large: 'The published rules would exceed a bound (rules per limiter, document size, regex count or cost).',
  store_unavailable: 'The rate-limit store is unavailable.',
  store_timeout: 'The rate-limit store did not answer in time.',
} as const;

export type RateLimitErrorCode = keyof typeof RATE_LIMIT_ERRORS;

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

export class RateLimitError extends Error {
  override readonly name = 'RateLimitError';
  readonly code: RateLimitErrorCode;
  /** Set for `invalid_rules`: every problem found, not just the first. */
  readonly problems: readonly RuleProblem[];
  constructor(
    code: RateLimitErrorCode,
    message?: string,
    options?: { cause?: unknown; problems?: readonly RuleProblem[] },
  ) {
    super(message ?? RATE_LIMIT_ERRORS[code], options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.problems = options?.problems ?? [];
  }
}

/** `file:line: path (rule "x"): message`, the format the CLI and the startup error print. */
export function formatProblem(p: RuleProblem): string {
  const where = p.file ? `${p.file}${p.line ? `:${p.line}` : ''}: ` : p.line ? `line ${p.line}: ` : '';
  const path = formatPath(p.path);
  return `${where}${path}${p.rule ? ` (rule "${p.rule}")` : ''}: ${p.message}`;
}

export function formatPath(path: readonly (string | number)[]): string {
  let out = '';
  for (const part of path) out += typeof part === 'number' ? `[${part}]` : out ? `.${part}` : part;
  return out || '(document)';
}
