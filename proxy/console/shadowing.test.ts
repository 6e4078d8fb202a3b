import { describe, expect, it } from 'vitest';
import type { LimiterRules, RuleSpec } from '../../policy/rate-limit/rules.ts';
import { annotateTiers, covers } from './shadowing.ts';

const rule = (name: string, action: RuleSpec['action'], match: RuleSpec['match'] = {}): RuleSpec => ({
  name,
  action,
  match,
  characteristics: [],
  ...(action === 'skip' ? {} : { limit: 1, period_s: 60 }),
});
const doc = (file: RuleSpec[], published: RuleSpec[], defaults: RuleSpec[]): LimiterRules => ({
  file_rules: { rules: file },
  published_rules: { rules: published },
  default_rules: { rules: defaults },
});

describe('covers', () => {
  it.each([
    [{}, { request_type: 'write' }, true],
    [{ request_type: 'health' }, { request_type: 'health', ip: '1.2.3.4' }, true],
    [{ request_type: 'health' }, { request_type: 'write' }, false],
    [{ request_type: 'health' }, {}, false],
    [{ route: { regex: '^/a' } }, { route: { regex: '^/a' } }, true],
    [{ route: { regex: '^/a' } }, { route: '/a' }, false],
  ] as const)('skip %j over %j → %s', (skip, later, expected) => {
    expect(covers(rule('s', 'skip', skip as RuleSpec['match']), rule('r', 'limit', later as RuleSpec['match']))).toBe(
      expected,
    );
  });
});

describe('annotateTiers', () => {
  it('marks a lower rule overridden by a higher tier with the same name, and the higher one as overriding', () => {
    const a = annotateTiers(
      doc([rule('x', 'limit')], [rule('x', 'log'), rule('y', 'limit')], [rule('x', 'limit'), rule('z', 'limit')]),
    );
    expect(a.file_rules[0]).toMatchObject({ order: 0, overrides: ['published_rules', 'default_rules'] });
    expect(a.published_rules[0]).toMatchObject({ overriddenBy: 'file_rules' });
    expect(a.published_rules[0]!.order).toBeUndefined();
    expect(a.published_rules[1]).toMatchObject({ order: 1, overrides: [] });
    expect(a.default_rules[0]).toMatchObject({ overriddenBy: 'file_rules' });
    expect(a.default_rules[1]).toMatchObject({ order: 2 });
  });

  it('marks rules after a covering skip unreachable, and after a narrower one partly shadowed', () => {
    const a = annotateTiers(
      doc(
        [],
        [
          rule('skip_health', 'skip', { request_type: 'health' }),
          rule('writes', 'limit', { request_type: 'write' }),
          rule('all', 'limit'),
        ],
        [rule('health_too', 'limit', { request_type: 'health', ip: '::1' })],
      ),
    );
    expect(a.published_rules[1]).toMatchObject({ partlyAfter: [] });
    expect(a.published_rules[1]!.unreachableAfter).toBeUndefined();
    expect(a.published_rules[2]).toMatchObject({ partlyAfter: ['skip_health'] });
    expect(a.default_rules[0]).toMatchObject({ unreachableAfter: 'skip_health' });
  });

  it('a skip with no match makes every later rule unreachable, not earlier ones', () => {
    const a = annotateTiers(doc([rule('first', 'limit')], [rule('off', 'skip')], [rule('later', 'limit')]));
    expect(a.file_rules[0]!.unreachableAfter).toBeUndefined();
    expect(a.default_rules[0]).toMatchObject({ unreachableAfter: 'off' });
  });
});
