/**
 * The Phase 3 wire contract (spec 3.1, 3.3), shared by the gateway's client and the reference rules
 * service so both validate it with the same code. Pure: no I/O.
 *
 * Query:  { service, limiter, identifier }  — the caller's service name scopes the rules, so two
 *         services that share a limiter name never see each other's rules.
 * Answer: { rules: [Rule…], ttl_s, varies_by: [property…] } — `rules` use the one rule schema
 *         (rules.ts) checked against the limiter's available properties; `varies_by` names the
 *         identifier properties the answer depended on (its cache key: per principal, per
 *         repository, … or [] for "the same for every identifier"); `ttl_s` how long it may be cached.
 */
import { quoted } from '../../lib/quoted.ts';
import type { RuleProblem } from './errors.ts';
import type { Identifier } from './match.ts';
import { validateRuleList, NAME_PATTERN, type AvailableLimiters, type RuleSpec } from './rules.ts';

/** Service names: like limiter names, plus dots and dashes (`arkvory-eu`, `gitlab.rails`). */
export const SERVICE_NAME_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
const MAX_TTL_S = 86_400;
/**
 * Rules in one answer at most. Every rule of an answer is evaluated, and a counting one is a Redis
 * operation, on every request of the identifiers it is cached for: as for the published tier
 * (document-bounds.ts), a service answering thousands of rules would multiply each such request's
 * cost. The reference service keeps each override to half of it (rule-overrides.ts), so its answer
 * for a principal and a repository together always fits.
 */
export const MAX_ANSWER_RULES = 100;

export interface RulesQuery {
  service: string;
  limiter: string;
  identifier: Record<string, string | number | boolean>;
}

export interface RulesAnswer {
  rules: RuleSpec[];
  ttl_s: number;
  varies_by: string[];
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The query body for one check: the identifier's defined values only. */
export function buildRulesQuery(service: string, limiter: string, identifier: Identifier): RulesQuery {
  const out: Record<string, string | number | boolean> = {};
  for (const key in identifier) {
    const v = identifier[key];
    if (v !== undefined && v !== null) out[key] = v;
  }
  return { service, limiter, identifier: out };
}

export function validateRulesQuery(
  body: unknown,
  available: AvailableLimiters,
): { query: RulesQuery | undefined; problems: RuleProblem[] } {
  const problems: RuleProblem[] = [];
  if (!isPlainObject(body))
    return {
      query: undefined,
      problems: [{ path: [], message: 'expected a JSON object { service, limiter, identifier }' }],
    };
  for (const k of Object.keys(body))
    if (!['service', 'limiter', 'identifier'].includes(k))
      problems.push({ path: [k], message: `unknown field "${k}"` });
  const { service, limiter, identifier } = body;
  if (typeof service !== 'string' || !SERVICE_NAME_PATTERN.test(service))
    problems.push({ path: ['service'], message: `service must match ${SERVICE_NAME_PATTERN.source}` });
  if (typeof limiter !== 'string' || !NAME_PATTERN.test(limiter))
    problems.push({ path: ['limiter'], message: 'limiter must match ^[a-z0-9_]{1,64}$' });
  else if (!available.has(limiter)) problems.push({ path: ['limiter'], message: `unknown limiter ${quoted(limiter)}` });
  const values: Record<string, string | number | boolean> = {};
  if (!isPlainObject(identifier))
    problems.push({
      path: ['identifier'],
      message: 'identifier must be an object of property → string, number or boolean',
    });
  else
    for (const [k, v] of Object.entries(identifier)) {
      if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') values[k] = v;
      else
        problems.push({ path: ['identifier', k], message: 'an identifier value must be a string, number or boolean' });
    }
  if (problems.length) return { query: undefined, problems };
  return { query: { service: service as string, limiter: limiter as string, identifier: values }, problems };
}

/** Validates an answer for `limiter`: the rule schema, the limiter's properties, `ttl_s`, `varies_by`. */
export function validateRulesAnswer(
  body: unknown,
  limiter: string,
  available: AvailableLimiters,
): { answer: RulesAnswer | undefined; problems: RuleProblem[] } {
  const problems: RuleProblem[] = [];
  const spec = available.get(limiter);
  if (!spec) return { answer: undefined, problems: [{ path: [], message: `unknown limiter ${quoted(limiter)}` }] };
  if (!isPlainObject(body))
    return {
      answer: undefined,
      problems: [{ path: [], message: 'expected a JSON object { rules, ttl_s, varies_by }' }],
    };
  for (const k of Object.keys(body))
    if (!['rules', 'ttl_s', 'varies_by'].includes(k)) problems.push({ path: [k], message: `unknown field "${k}"` });
  const properties = new Set(spec.available_properties);
  if (body.rules === undefined)
    problems.push({ path: ['rules'], message: 'rules is required (a list, possibly empty)' });
  // A missing list is reported above; the rule list's own check reads it as no rules.
  const rules = validateRuleList(body.rules, ['rules'], problems, properties, spec.limit_rules_count_by);
  if (rules.length > MAX_ANSWER_RULES)
    problems.push({ path: ['rules'], message: `at most ${MAX_ANSWER_RULES} rules, got ${rules.length}` });
  const ttl = body.ttl_s;
  if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 0 || ttl > MAX_TTL_S)
    problems.push({
      path: ['ttl_s'],
      message: `ttl_s must be an integer from 0 to ${MAX_TTL_S}, got ${JSON.stringify(ttl)}`,
    });
  const variesBy: string[] = [];
  if (!Array.isArray(body.varies_by))
    problems.push({
      path: ['varies_by'],
      message: 'varies_by must be a list of identifier properties (empty: the same answer for every identifier)',
    });
  else
    body.varies_by.forEach((p, i) => {
      // Stryker disable next-line ConditionalExpression: equivalent: the set holds strings only; the type test is for the compiler
      if (typeof p !== 'string' || !properties.has(p))
        problems.push({
          path: ['varies_by', i],
          message: `"${String(p)}" is not an available property of limiter "${limiter}"`,
        });
      else if (variesBy.includes(p)) problems.push({ path: ['varies_by', i], message: `"${p}" is listed twice` });
      else variesBy.push(p);
    });
  if (problems.length) return { answer: undefined, problems };
  return { answer: { rules, ttl_s: ttl as number, varies_by: variesBy }, problems };
}
