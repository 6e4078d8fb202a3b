/**
 * Rules a change of the replica removed (by name): a check that read its rules before the change
 * and finishes after it (it waited for Redis or the rules service) must not report their
 * evaluations, or it would bring back the `arkvory_rate_limit_rule_evaluations_total` series the
 * change dropped. Marked by object, so a rule of the same name published again, or served by the
 * rules service, is a new object and reports as usual; a WeakSet, so retired rules are collected
 * with the last check that held them.
 */
import type { Rule } from './rules.ts';

const retired = new WeakSet<Rule>();

export function retireRule(rule: Rule): void {
  retired.add(rule);
}

export function isRetired(rule: Rule): boolean {
  return retired.has(rule);
}
