/**
 * Bounds on what publishing may store (pure). Every rule of a limiter is evaluated on every request
 * it guards, and a rule document is read by every gateway: 3,000 published match-everything rules
 * took the median request from 0.95 to 20.6 ms and took 95 s to delete. So the published tier of one
 * limiter holds at most `publishedRulesPerLimiter` rules, the stored document at most
 * `documentBytes`, and its regexes are bounded in number and in total program size (a regex costs
 * O(value length × program size) per request: rule-regex.ts). File and default tiers are the
 * operator's and are not bounded here.
 */
import type { RuleProblem } from './errors.ts';
import { compileRuleRegex } from './rule-regex.ts';
import type { LimiterRules } from './rules.ts';

export const DOCUMENT_BOUNDS = {
  publishedRulesPerLimiter: 100,
  /** The stored document (all tiers) as JSON, in bytes. */
  documentBytes: 256 * 1024,
  /** `{ regex }` match values in the published tier of one limiter. */
  regexesPerLimiter: 32,
  /** The published regexes' compiled programs together (one may have 500: rule-regex.ts). */
  regexProgramPerLimiter: 4000,
} as const;

/** What `doc` (the next stored document of `limiter`) breaks, if anything. */
export function documentBoundProblems(
  limiter: string,
  doc: LimiterRules,
  bounds: typeof DOCUMENT_BOUNDS = DOCUMENT_BOUNDS,
): RuleProblem[] {
  const problems: RuleProblem[] = [];
  const path = ['rate_limits', limiter];
  const published = doc.published_rules.rules;
  if (published.length > bounds.publishedRulesPerLimiter)
    problems.push({
      path,
      message: `limiter "${limiter}" would hold ${published.length} published rules; at most ${bounds.publishedRulesPerLimiter} are allowed (delete some, or combine them with characteristics and regexes)`,
    });
  const bytes = Buffer.byteLength(JSON.stringify(doc));
  if (bytes > bounds.documentBytes)
    problems.push({
      path,
      message: `limiter "${limiter}"'s rule document would be ${bytes} bytes; at most ${bounds.documentBytes} are allowed`,
    });
  let regexes = 0;
  let program = 0;
  for (const rule of published)
    for (const value of Object.values(rule.match ?? {}))
      if (typeof value === 'object') {
        regexes++;
        program += compileRuleRegex(value.regex).programSize();
      }
  if (regexes > bounds.regexesPerLimiter)
    problems.push({
      path,
      message: `limiter "${limiter}" would hold ${regexes} published regexes; at most ${bounds.regexesPerLimiter} are allowed`,
    });
  if (program > bounds.regexProgramPerLimiter)
    problems.push({
      path,
      message: `limiter "${limiter}"'s published regexes would compile to ${program} instructions together; at most ${bounds.regexProgramPerLimiter} are allowed (simplify them)`,
    });
  return problems;
}
