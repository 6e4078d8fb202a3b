/**
 * Which rules apply to an identifier (spec 1.3, 1.4). Pure. Every `match` entry must hold: equality
 * on the string form of the value, or `{ regex }` (RE2 syntax, linear time, unanchored unless the
 * pattern anchors itself; see rule-regex.ts). A property missing from the identifier never matches.
 */
import { regexMatches } from './rule-regex.ts';
import type { MatchValue, Rule } from './rules.ts';

export type IdentifierValue = string | number | boolean | null | undefined;
/** Keys and values the caller knows about the request; a different shape per limiter. */
export type Identifier = Readonly<Record<string, IdentifierValue>>;

/** Sentinel for an unauthenticated caller; the angle brackets cannot collide with a real id. */
export const ANONYMOUS = '<anonymous>';

export function valueOf(identifier: Identifier, key: string): string | undefined {
  const v = identifier[key];
  return v === undefined || v === null ? undefined : String(v);
}

export function matchesValue(matcher: MatchValue, value: string | undefined): boolean {
  if (value === undefined) return false;
  if (typeof matcher === 'string') return matcher === value;
  return regexMatches(matcher.regex, value);
}

export function ruleMatches(rule: Rule, identifier: Identifier): boolean {
  for (const key in rule.match) {
    if (!matchesValue(rule.match[key]!, valueOf(identifier, key))) return false;
  }
  return true;
}

/**
 * The rules that apply, in order, cut after the first matching `skip` (terminal: later rules are
 * never reached). A `limit` that blocks is terminal too, which only the evaluation can know.
 */
export function applicableRules(rules: readonly Rule[], identifier: Identifier): Rule[] {
  const out: Rule[] = [];
  for (const rule of rules) {
    if (!ruleMatches(rule, identifier)) continue;
    out.push(rule);
    if (rule.action === 'skip') break;
  }
  return out;
}
