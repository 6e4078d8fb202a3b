import { describe, expect, it } from 'vitest';
import { publishedRuleNames } from './admin-details.ts';

describe('publishedRuleNames', () => {
  it('names the rules of both forms a publish takes: a list, or { rules: [...] } per limiter', () => {
    expect(
      publishedRuleNames({
        rate_limits: {
          gateway_request: [{ name: 'a' }, { name: 'b' }],
          transfer_bytes: { rules: [{ name: 'c' }] },
        },
      }),
    ).toEqual({ gateway_request: ['a', 'b'], transfer_bytes: ['c'] });
  });

  it('names nothing for what is no batch', () => {
    expect(publishedRuleNames(null)).toEqual({});
    expect(publishedRuleNames({ rate_limits: { gateway_request: null } })).toEqual({ gateway_request: [] });
  });
});
