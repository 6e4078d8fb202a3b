import { describe, expect, it } from 'vitest';
import { DatabaseUnavailable, lookupFailure } from './statement-deadline.ts';

describe('lookupFailure', () => {
  it("keeps a database deadline's Retry-After for the lookup's own error", () => {
    const timedOut = new DatabaseUnavailable('the database did not answer a statement within 1000 ms');
    expect(lookupFailure(timedOut)).toEqual({ cause: timedOut, headers: { 'retry-after': '1' } });
  });

  it('adds no header for any other failure', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    expect(lookupFailure(refused)).toEqual({ cause: refused });
  });
});
