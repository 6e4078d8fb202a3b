/**
 * Problems in a rule document quote the caller's keys and values back (a publish body of up to
 * 1 MiB, a file): bounded, as every value an error message quotes (lib/quoted.ts).
 */
import { describe, expect, it } from 'vitest';
import { formatProblem } from './errors.ts';
import { type LimiterSpec, validateRateLimits } from './rules.ts';

const available = new Map<string, LimiterSpec>([
  ['api', { description: 'x', available_properties: ['user'], default_rules: [] }],
]);

describe('problems quoting a wide key or value', () => {
  const wide = 'X'.repeat(5000);
  it.each([
    ['a limiter name', { rate_limits: { [wide]: [] } }],
    ['a rule name', { rate_limits: { api: [{ name: wide, action: 'skip' }] } }],
    ['an action', { rate_limits: { api: [{ name: 'a', action: wide }] } }],
    ['a match property', { rate_limits: { api: [{ name: 'a', action: 'skip', match: { [wide]: 'x' } }] } }],
    ['a top-level key', { [wide]: 1 }],
    ['a rule field', { rate_limits: { api: [{ name: 'a', action: 'skip', [wide]: 1 }] } }],
    ['a limit', { rate_limits: { api: [{ name: 'a', action: 'log', limit: wide, period_s: 1 }] } }],
  ])('%s: its first 128 characters and its length, not all 5,000', (_, document) => {
    const messages = validateRateLimits(document, available).problems.map(formatProblem);
    expect(messages.length).toBeGreaterThan(0);
    for (const message of messages) {
      expect(message.length, message.slice(0, 200)).toBeLessThan(600);
      expect(message).toContain(`${'X'.repeat(128)}`);
      expect(message).toContain('(5000 characters)');
    }
  });
});
