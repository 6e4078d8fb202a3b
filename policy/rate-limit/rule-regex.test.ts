import { describe, expect, it } from 'vitest';
import type { RuleProblem } from './errors.ts';
import { applicableRules } from './match.ts';
import {
  compileRuleRegex,
  MAX_ANSWERS_PER_PATTERN,
  MAX_REGEX_LENGTH,
  MAX_REMEMBERED_VALUE,
  regexMatches,
} from './rule-regex.ts';
import { defineRule, validateRule, validateRateLimits, type LimiterSpec } from './rules.ts';
import { validateRulesAnswer } from './rules-answer.ts';

// Patterns that take a backtracking engine from milliseconds to minutes (issue #21): `(.*.*)*X` on
// 24 characters runs for over a minute in plain Node. With RE2 each match is linear in the value,
// so these finish inside the test timeout however long the value is.
const CATASTROPHIC: Array<[string, string]> = [
  ['.*.*.*.*.*X', 'abXc'],
  ['(.*.*)*X', 'abXc'],
  ['^(a|a)*$', 'aaaa'],
  ['(a+a+)+y', 'aay'],
];

describe('rule regexes run on a linear-time engine', () => {
  it.each(CATASTROPHIC)('%s answers at once on long non-matching values', (pattern, matching) => {
    for (const length of [24, 1000, 50_000]) expect(regexMatches(pattern, `${'a'.repeat(length)}!`)).toBe(false);
    expect(regexMatches(pattern, matching)).toBe(true);
  });

  it('keeps the matching semantics rules rely on: unanchored unless anchored, unicode', () => {
    expect(regexMatches('^[^<]', 'principal-id')).toBe(true);
    expect(regexMatches('^[^<]', '<anonymous>')).toBe(false);
    expect(regexMatches('artifacts', '/api/v1/repositories/:repo/artifacts/:id')).toBe(true);
    expect(regexMatches('^/health/', '/api/health/')).toBe(false);
    expect(regexMatches('^caf.$', 'café')).toBe(true);
  });

  it('remembers answers without changing them, past the memo bound and for long values too', () => {
    const pattern = '^p-[0-9]*[02468]$';
    const expected = (v: string) => /^p-[0-9]*[02468]$/.test(v);
    const values = Array.from({ length: MAX_ANSWERS_PER_PATTERN + 500 }, (_, i) => `p-${i}`);
    for (let round = 0; round < 2; round++)
      for (const v of values) expect(regexMatches(pattern, v), `${v}, round ${round}`).toBe(expected(v));
    const long = `p-${'1'.repeat(MAX_REMEMBERED_VALUE)}`;
    for (const v of [`${long}2`, `${long}3`, `${long}2`]) expect(regexMatches(pattern, v)).toBe(expected(v));
  });

  it('refuses what RE2 cannot run in linear time, and oversized programs, with the reason', () => {
    expect(() => compileRuleRegex('(?=a)b')).toThrow(/RE2 syntax/);
    expect(() => compileRuleRegex('(a)\\1')).toThrow(/RE2 syntax/);
    expect(() => compileRuleRegex('[a-z]{1000}')).toThrow(/too large/);
    expect(() => compileRuleRegex('a'.repeat(MAX_REGEX_LENGTH + 1))).toThrow(/longer than/);
    expect(compileRuleRegex('^/api/v\\d+/projects').test('/api/v4/projects/1')).toBe(true);
  });

  it('a rule with such a regex is a validation problem naming the rule, wherever it comes from', () => {
    const problems: RuleProblem[] = [];
    expect(
      validateRule(
        { name: 'look', action: 'skip', match: { route: { regex: '(?!/health)' } } },
        ['rules', 0],
        problems,
      ),
    ).toBeUndefined();
    expect(problems).toEqual([
      expect.objectContaining({
        rule: 'look',
        path: ['rules', 0, 'match', 'route', 'regex'],
        message: expect.stringContaining('invalid regular expression'),
      }),
    ]);
    const available = new Map<string, LimiterSpec>([
      ['gateway_request', { description: 'd', available_properties: ['route'], default_rules: [] }],
    ]);
    const file = validateRateLimits(
      {
        rate_limits: { gateway_request: [{ name: 'big', action: 'skip', match: { route: { regex: '(.{100}){9}' } } }] },
      },
      available,
    );
    expect(file.problems.map((p) => p.rule)).toEqual(['big']);
    const answer = validateRulesAnswer(
      { rules: [{ name: 'back', action: 'skip', match: { route: { regex: '(a)\\1' } } }], ttl_s: 10 },
      'gateway_request',
      available,
    );
    expect(answer.problems.length).toBeGreaterThan(0);
    expect(() => defineRule({ name: 'code', action: 'skip', match: { route: { regex: '(?<=x)y' } } })).toThrow(
      /invalid regular expression/,
    );
  });

  it('a rule built without validation whose regex does not compile matches nothing', () => {
    const rule = { name: 'raw', action: 'skip' as const, match: { route: { regex: '(?=x)' } }, characteristics: [] };
    expect(applicableRules([rule], { route: 'x' })).toEqual([]);
  });
});
