/**
 * The rule files a gateway starts from: the shipped limiter list (available_limiters.yaml) and the
 * operator's optional ARKVORY_RATE_LIMITS_FILE.
 */
import { readFile } from 'node:fs/promises';
import {
  formatProblem,
  parseAvailableLimiters,
  parseRateLimits,
  RateLimitError,
  type AvailableLimiters,
  type RuleSpec,
} from '../../policy/rate-limit/index.ts';

export const AVAILABLE_LIMITERS_FILE = new URL('../../policy/rate-limit/available_limiters.yaml', import.meta.url);
/** Rule files refused at start or by `arkvory ratelimit validate`: one `file:line: …` line per problem. */
export class RateLimitConfigError extends RateLimitError {
  override readonly name = 'RateLimitConfigError';
  declare readonly code: 'invalid_rules';
  readonly lines: readonly string[];
  constructor(lines: readonly string[]) {
    super('invalid_rules', `invalid rate-limit rules:\n${lines.map((l) => `  ${l}`).join('\n')}`);
    this.lines = lines;
  }
}

/** What became of ARKVORY_RATE_LIMITS_FILE at start: not set, loaded, absent, or refused. */
export type RulesFileStatus = 'unset' | 'loaded' | 'missing' | 'invalid';

export interface RuleFiles {
  available: AvailableLimiters;
  fileRules: Map<string, RuleSpec[]>;
  fileStatus: RulesFileStatus;
  /** For `invalid`: one `file:line: …` line per problem. */
  fileProblems: string[];
}

/**
 * Reads the shipped limiter list (a problem there is our bug: it throws) and the operator file.
 * The file is optional (spec 2.7, 2.8: "ignored if it does not exist"), and a violation in it is
 * raised, caught and logged by the caller (spec 2.8.2), never fatal: none of its rules is applied
 * and the stored file tier is left as it was. `arkvory ratelimit validate` is the gate before a deploy.
 */
export async function loadRuleFiles(rateLimitsFile: string | undefined): Promise<RuleFiles> {
  const shipped = parseAvailableLimiters(await readFile(AVAILABLE_LIMITERS_FILE, 'utf8'), 'available_limiters.yaml');
  if (shipped.problems.length) throw new RateLimitConfigError(shipped.problems.map(formatProblem));
  const none = (fileStatus: RulesFileStatus, fileProblems: string[] = []): RuleFiles => ({
    available: shipped.available,
    fileRules: new Map(),
    fileStatus,
    fileProblems,
  });
  if (!rateLimitsFile) return none('unset');
  let text: string;
  try {
    text = await readFile(rateLimitsFile, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return none('missing');
    return none('invalid', [
      `${rateLimitsFile}: cannot read ARKVORY_RATE_LIMITS_FILE (${code ?? (err as Error).message})`,
    ]);
  }
  const parsed = parseRateLimits(text, rateLimitsFile, shipped.available);
  if (parsed.problems.length) return none('invalid', parsed.problems.map(formatProblem));
  return { available: shipped.available, fileRules: parsed.rateLimits, fileStatus: 'loaded', fileProblems: [] };
}
