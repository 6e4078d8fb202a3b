import { describe, expect, it } from 'vitest';
import { ruleWriteFailure } from './pg-rule-documents.ts';

/** An error as pg reports one the server sent. */
const serverError = (code: string, message: string) => Object.assign(new Error(message), { code, severity: 'ERROR' });

describe('ruleWriteFailure', () => {
  it('is store_unavailable for any failure before the COMMIT, the connection lost included', () => {
    expect(
      ruleWriteFailure(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), false).code,
    ).toBe('store_unavailable');
    expect(ruleWriteFailure(new Error('Connection terminated unexpectedly'), false).code).toBe('store_unavailable');
    expect(ruleWriteFailure(serverError('25006', 'cannot execute INSERT in a read-only transaction'), false).code).toBe(
      'store_unavailable',
    );
  });

  it('is store_unavailable for a COMMIT the server refused (rolled back), store_outcome_unknown for one whose connection was lost', () => {
    expect(ruleWriteFailure(serverError('40001', 'could not serialize access'), true).code).toBe('store_unavailable');
    expect(
      ruleWriteFailure(serverError('57P01', 'terminating connection due to administrator command'), true).code,
    ).toBe('store_outcome_unknown');
    expect(ruleWriteFailure(new Error('Connection terminated unexpectedly'), true).code).toBe('store_outcome_unknown');
  });
});
