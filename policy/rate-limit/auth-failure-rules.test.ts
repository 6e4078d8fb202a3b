/**
 * `auth_failure` limit rules count by address, wherever they come from (the operator's file, a
 * publish, a stored document, the rules service's answer): one counted without `ip` is a single
 * counter and ban for every client, which any client's bad keys would start.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { validateRulesAnswer } from './rules-answer.ts';
import { validateLimiterDocument, validateRateLimits } from './rules.ts';
import { parseAvailableLimiters } from './yaml-source.ts';

const shipped = parseAvailableLimiters(
  readFileSync(new URL('./available_limiters.yaml', import.meta.url), 'utf8'),
  'available_limiters.yaml',
);
const available = shipped.available;

const rule = (extra: Record<string, unknown>) => ({
  name: 'ban_everyone',
  action: 'limit',
  limit: 20,
  period_s: 60,
  ban_for_s: 900,
  ...extra,
});

describe('auth_failure limit rules', () => {
  it('ship valid', () => {
    expect(shipped.problems).toEqual([]);
    expect(available.get('auth_failure')?.limit_rules_count_by).toEqual(['ip']);
  });

  it.each([
    ['without characteristics', {}],
    ['with an empty list', { characteristics: [] }],
  ])('are refused %s, from a file or a publish, a stored document and a rules answer', (_name, extra) => {
    const file = validateRateLimits({ rate_limits: { auth_failure: [rule(extra)] } }, available);
    expect(file.problems.map((p) => p.message).join('\n')).toMatch(/must count by "ip"/);
    const stored = validateLimiterDocument({ published_rules: { rules: [rule(extra)] } }, 'auth_failure', available);
    expect(stored.document).toBeUndefined();
    expect(stored.problems.map((p) => p.message).join('\n')).toMatch(/must count by "ip"/);
    const answer = validateRulesAnswer({ rules: [rule(extra)], ttl_s: 60, varies_by: [] }, 'auth_failure', available);
    expect(answer.answer).toBeUndefined();
    expect(answer.problems.map((p) => p.message).join('\n')).toMatch(/must count by "ip"/);
  });

  it('are accepted by address; log and skip rules, and other limiters, need not count by it', () => {
    for (const rules of [
      { auth_failure: [rule({ characteristics: ['ip'] })] },
      { auth_failure: [rule({ action: 'log', ban_for_s: undefined })] },
      { auth_failure: [{ name: 'never', action: 'skip', match: { ip: '192.0.2.1' } }] },
      { gateway_request: [rule({ ban_for_s: undefined })] },
    ])
      expect(validateRateLimits({ rate_limits: rules }, available).problems).toEqual([]);
  });
});
