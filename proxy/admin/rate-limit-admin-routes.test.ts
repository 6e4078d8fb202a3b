import { describe, expect, it } from 'vitest';
import { RateLimitError } from '../../policy/rate-limit/index.ts';
import { toHttpError } from '../server/http-errors.ts';
import { toPolicyError } from './rate-limit-admin-routes.ts';

const answer = (code: ConstructorParameters<typeof RateLimitError>[0]) =>
  toHttpError(toPolicyError(new RateLimitError(code, 'the rule store said something')));

describe('rule-store failures over HTTP', () => {
  it('a write stopped at its timeout says nothing was changed; one with no answer says the outcome is unknown', () => {
    expect(answer('store_timeout')).toMatchObject({ status: 503, code: 'unavailable' });
    expect(answer('store_timeout').message).toContain('nothing was changed');
    expect(answer('store_outcome_unknown')).toMatchObject({ status: 503, code: 'rules_outcome_unknown' });
    expect(answer('store_outcome_unknown').message).toContain('may or may not have been applied');
    expect(answer('store_unavailable')).toMatchObject({ status: 503, code: 'unavailable' });
  });
});
