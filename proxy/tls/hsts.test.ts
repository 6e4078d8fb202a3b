import { describe, expect, it } from 'vitest';
import { MAX_AGE_LIMIT, parseHsts } from './hsts.ts';

describe('parseHsts (RFC 6797 §6.1)', () => {
  it.each([
    ['max-age=31536000', 'max-age=31536000'],
    ['max-age=0', 'max-age=0'],
    ['max-age=31536000; includeSubDomains', 'max-age=31536000; includeSubDomains'],
    ['max-age=63072000; includeSubDomains; preload', 'max-age=63072000; includeSubDomains; preload'],
    // Names are case-insensitive, the order free, whitespace and empty directives allowed, max-age quoted.
    ['  INCLUDESUBDOMAINS ;Max-Age = "600";; ', 'max-age=600; includeSubDomains'],
    ['preload;max-age=1', 'max-age=1; preload'],
    [`max-age=${MAX_AGE_LIMIT}`, `max-age=${MAX_AGE_LIMIT}`],
  ])('%j is sent as %j', (value, header) => {
    expect(parseHsts(value)).toMatchObject({ header });
  });

  it('reads the policy', () => {
    expect(parseHsts('max-age=10; preload')).toEqual({
      policy: { maxAge: 10, includeSubDomains: false, preload: true },
      header: 'max-age=10; preload',
    });
  });

  it.each([
    ['', /max-age is required/],
    ['includeSubDomains', /max-age is required/],
    ['max-age', /non-negative integer/],
    ['max-age=', /not a directive/],
    ['max-age=-1', /non-negative integer/],
    ['max-age=1.5', /non-negative integer/],
    ['max-age=1e6', /non-negative integer/],
    ['max-age="12a"', /non-negative integer/],
    [`max-age=${MAX_AGE_LIMIT + 1}`, /at most 2147483648/],
    ['max-age=1; max-age=2', /max-age appears twice/],
    ['max-age=1; includeSubDomains; INCLUDESUBDOMAINS', /appears twice/],
    ['max-age=1; includeSubDomains=yes', /includeSubDomains takes no value/],
    ['max-age=1; preload=1', /preload takes no value/],
    ['max-age=1; includeSubdomain', /unknown directive "includeSubdomain"/],
    ['max-age=1, includeSubDomains', /not a directive/],
    ['max-age=1\r\nSet-Cookie: a=b', /control/],
    ['max-age=1; é', /non-ASCII/],
  ])('%j is refused: %s', (value, problem) => {
    const parsed = parseHsts(value);
    expect(parsed).not.toHaveProperty('header');
    expect((parsed as { problem: string }).problem).toMatch(problem);
  });
});
