/**
 * Rule regexes (`match: { key: { regex } }`) run on the event loop for every request, and they come
 * from people and services over the network (publish, console, rules service, file). A backtracking
 * engine lets one published `(.*.*)*X` freeze every gateway sharing the rule store, so rule regexes
 * are compiled by RE2JS (a pure-JS port of RE2, linear in the input): no lookaround, no
 * backreferences, and a bounded program so the per-request cost stays small.
 *
 * Why re2js and not the `re2` native addon: the addon downloads a prebuilt binary from GitHub at
 * install and otherwise compiles RE2 and Abseil with node-gyp (minutes of C++ on a fresh machine,
 * plus a toolchain); re2js installs as plain JS with `npm ci`. See docs/rate-limits.md.
 */
import { RE2JS } from 're2js';
import { RateLimitError } from './errors.ts';

/** Longest pattern accepted; rules match short values (routes, names, addresses). */
export const MAX_REGEX_LENGTH = 512;
/** Largest compiled program accepted: matching costs O(value length × program size). */
export const MAX_REGEX_PROGRAM = 500;

export class RuleRegexError extends RateLimitError {
  override readonly name = 'RuleRegexError';
  declare readonly code: 'invalid_regex';
  constructor(message: string) {
    super('invalid_regex', message);
  }
}

/** Compiles a rule regex or throws `RuleRegexError` saying why (syntax RE2 refuses, or too large). */
export function compileRuleRegex(pattern: string): RE2JS {
  if (pattern.length > MAX_REGEX_LENGTH)
    throw new RuleRegexError(`regular expression is longer than ${MAX_REGEX_LENGTH} characters`);
  let re: RE2JS;
  try {
    re = RE2JS.compile(pattern);
  } catch (err) {
    // RE2 syntax: what a linear-time engine cannot do (lookaround, backreferences) is refused here.
    throw new RuleRegexError(
      `${(err as Error).message} (rule regexes use RE2 syntax: no lookaround or backreferences)`,
    );
  }
  if (re.programSize() > MAX_REGEX_PROGRAM)
    throw new RuleRegexError(
      `regular expression is too large (${re.programSize()} instructions, at most ${MAX_REGEX_PROGRAM}); simplify its repetitions`,
    );
  return re;
}

interface CompiledPattern {
  /** `null`: the pattern does not compile (it then matches nothing). */
  readonly re: RE2JS | null;
  /** Answers for values seen lately: the same principal or route asks again on every request. */
  readonly answers: Map<string, boolean>;
}

/** Patterns compiled so far, and answers per pattern; both bounded (cleared when full). */
const compiled = new Map<string, CompiledPattern>();
export const MAX_PATTERNS = 10_000;
export const MAX_ANSWERS_PER_PATTERN = 4096;
/** Longer values are matched every time: the memo's memory stays under ~1 MiB per pattern. */
export const MAX_REMEMBERED_VALUE = 256;

/**
 * Whether `value` contains a match of `pattern` (unanchored unless the pattern anchors itself).
 * Every rule source validates its regexes first; a pattern that slipped past (a rule built in code
 * without validation) matches nothing rather than failing the request. An answer is pure (pattern,
 * value), so it is remembered: re2js costs a few microseconds a call, a Map lookup a fraction.
 */
export function regexMatches(pattern: string, value: string): boolean {
  let entry = compiled.get(pattern);
  if (entry === undefined) {
    let re: RE2JS | null;
    try {
      re = compileRuleRegex(pattern);
    } catch {
      re = null;
    }
    if (compiled.size >= MAX_PATTERNS) compiled.clear();
    entry = { re, answers: new Map() };
    compiled.set(pattern, entry);
  }
  if (entry.re === null) return false;
  if (value.length > MAX_REMEMBERED_VALUE) return entry.re.test(value);
  let answer = entry.answers.get(value);
  if (answer === undefined) {
    answer = entry.re.test(value);
    if (entry.answers.size >= MAX_ANSWERS_PER_PATTERN) entry.answers.clear();
    entry.answers.set(value, answer);
  }
  return answer;
}
