import { describe, expect, it } from 'vitest';
import { GatewayError } from '../server/errors.ts';
import { parsePrincipalStatsQuery } from './stats-query.ts';

describe('parsePrincipalStatsQuery: since and until', () => {
  it('takes calendar days, leap days included', () => {
    expect(parsePrincipalStatsQuery({ since: '2024-02-29', until: '2024-03-01' })).toMatchObject({
      since: '2024-02-29',
      until: '2024-03-01',
    });
    expect(parsePrincipalStatsQuery({ since: '0001-01-01', until: '9999-12-31' })).toMatchObject({
      since: '0001-01-01',
      until: '9999-12-31',
    });
  });

  // Each one reached PostgreSQL's `::date`, which refused it: a 500 instead of a 400.
  it.each([
    '2024-02-30',
    '2023-02-29',
    '2024-04-31',
    '2024-13-01',
    '2024-00-10',
    '2024-01-00',
    '0000-01-01',
    '2024-1-01',
    'today',
  ])('refuses %s as invalid_request, naming the parameter', (raw) => {
    for (const name of ['since', 'until'] as const) {
      let thrown: unknown;
      try {
        parsePrincipalStatsQuery({ [name]: raw });
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(GatewayError);
      expect(thrown).toMatchObject({ code: 'invalid_request' });
      expect((thrown as Error).message).toMatch(new RegExp(`^${name} must be a calendar day`));
    }
  });
});
