import { describe, expect, it } from 'vitest';
import { buildRulesQuery, SERVICE_NAME_PATTERN, validateRulesAnswer, validateRulesQuery } from './rules-answer.ts';
import type { RuleProblem } from './errors.ts';
import type { AvailableLimiters } from './rules.ts';

const available: AvailableLimiters = new Map([
  ['gateway_request', { description: 'd', available_properties: ['principal', 'repository', 'ip'], default_rules: [] }],
  ['auth_failure', { description: 'd', available_properties: ['ip'], default_rules: [] }],
]);

const messages = (r: { problems: readonly RuleProblem[] }) =>
  r.problems.map((p) => `${p.path.join('.')}: ${p.message}`);

describe('the rules query (spec 3.1)', () => {
  it('carries only the defined values of the identifier', () => {
    expect(
      buildRulesQuery('arkvory', 'gateway_request', {
        principal: 'p',
        ip: undefined,
        repository: null,
        n: 0,
        b: false,
      }),
    ).toEqual({ service: 'arkvory', limiter: 'gateway_request', identifier: { principal: 'p', n: 0, b: false } });
  });

  it('a valid query comes back as it was sent', () => {
    const body = {
      service: 'gitlab.rails-eu_1',
      limiter: 'gateway_request',
      identifier: { principal: 'p', n: 1, admin: false },
    };
    expect(validateRulesQuery(body, available)).toEqual({ query: body, problems: [] });
    expect(validateRulesQuery({ ...body, identifier: {} }, available).query).toEqual({ ...body, identifier: {} });
  });

  it('refuses what is not an object, naming the shape it wants', () => {
    for (const body of [null, [], 'x', 5, undefined])
      expect(messages(validateRulesQuery(body, available))).toEqual([
        ': expected a JSON object { service, limiter, identifier }',
      ]);
  });

  it('names every problem of a query at once', () => {
    const result = validateRulesQuery(
      { service: 'Arkvory', limiter: 'nope', identifier: { ok: 'x', bad: { nested: 1 }, none: null }, extra: 1 },
      available,
    );
    expect(result.query).toBeUndefined();
    expect(messages(result)).toEqual([
      'extra: unknown field "extra"',
      `service: service must match ${SERVICE_NAME_PATTERN.source}`,
      'limiter: unknown limiter "nope"',
      'identifier.bad: an identifier value must be a string, number or boolean',
      'identifier.none: an identifier value must be a string, number or boolean',
    ]);
    expect(messages(validateRulesQuery({ service: 5, limiter: 'Bad-Name', identifier: [] }, available))).toEqual([
      `service: service must match ${SERVICE_NAME_PATTERN.source}`,
      'limiter: limiter must match ^[a-z0-9_]{1,64}$',
      'identifier: identifier must be an object of property → string, number or boolean',
    ]);
    expect(messages(validateRulesQuery({ service: 'a', limiter: 5, identifier: null }, available))).toEqual([
      'limiter: limiter must match ^[a-z0-9_]{1,64}$',
      'identifier: identifier must be an object of property → string, number or boolean',
    ]);
  });

  it('service names: a letter or digit, then up to 63 of letters, digits, `_`, `.` and `-`', () => {
    for (const ok of ['a', '0', 'arkvory-eu', 'gitlab.rails', `a${'b'.repeat(63)}`])
      expect(SERVICE_NAME_PATTERN.test(ok), ok).toBe(true);
    for (const bad of ['', '-a', '.a', '_a', 'A', 'a b', `a${'b'.repeat(64)}`, 'a\n', 'x/y'])
      expect(SERVICE_NAME_PATTERN.test(bad), bad).toBe(false);
  });
});

describe('the rules answer (spec 3.3)', () => {
  const valid = {
    rules: [{ name: 'cap', action: 'limit', characteristics: ['principal'], limit: 5, period_s: 60 }],
    ttl_s: 30,
    varies_by: ['principal', 'repository'],
  };

  it('a valid answer: its rules, its ttl and what it varies by', () => {
    const { answer, problems } = validateRulesAnswer(valid, 'gateway_request', available);
    expect(problems).toEqual([]);
    expect(answer).toMatchObject({ ttl_s: 30, varies_by: ['principal', 'repository'] });
    expect(answer!.rules.map((r) => r.name)).toEqual(['cap']);
    for (const ttl of [0, 86_400])
      expect(validateRulesAnswer({ ...valid, ttl_s: ttl }, 'gateway_request', available).answer?.ttl_s).toBe(ttl);
  });

  it('at most 100 rules: more would multiply the cost of every request the answer is cached for', () => {
    const rules = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ name: `r${i}`, action: 'log', limit: 1, period_s: 1 }));
    expect(validateRulesAnswer({ ...valid, rules: rules(100) }, 'gateway_request', available).problems).toEqual([]);
    const over = validateRulesAnswer({ ...valid, rules: rules(5000) }, 'gateway_request', available);
    expect(over.answer).toBeUndefined();
    expect(messages(over)).toEqual(['rules: at most 100 rules, got 5000']);
  });

  it('an unknown limiter, or a body that is not an object, is refused before anything else', () => {
    expect(messages(validateRulesAnswer(valid, 'nope', available))).toEqual([': unknown limiter "nope"']);
    for (const body of [null, [], 'x'])
      expect(messages(validateRulesAnswer(body, 'gateway_request', available))).toEqual([
        ': expected a JSON object { rules, ttl_s, varies_by }',
      ]);
  });

  it('names every problem of an answer at once', () => {
    const result = validateRulesAnswer(
      { ttl_s: 1.5, varies_by: 'principal', colour: 'red' },
      'gateway_request',
      available,
    );
    expect(result.answer).toBeUndefined();
    expect(messages(result)).toEqual([
      'colour: unknown field "colour"',
      'rules: rules is required (a list, possibly empty)',
      'ttl_s: ttl_s must be an integer from 0 to 86400, got 1.5',
      'varies_by: varies_by must be a list of identifier properties (empty: the same answer for every identifier)',
    ]);
  });

  it('ttl_s: an integer from 0 to a day', () => {
    for (const ttl of [-1, 86_401, '30', null, Number.NaN, Number.POSITIVE_INFINITY])
      expect(messages(validateRulesAnswer({ ...valid, ttl_s: ttl }, 'gateway_request', available))).toEqual([
        `ttl_s: ttl_s must be an integer from 0 to 86400, got ${JSON.stringify(ttl)}`,
      ]);
  });

  it("varies_by: the limiter's own properties, each once", () => {
    expect(
      messages(validateRulesAnswer({ ...valid, varies_by: ['ip', 'principal', 'ip', 5] }, 'auth_failure', available)),
    ).toEqual([
      // The rule's characteristic is not a property of this limiter either.
      'rules.0.characteristics.0: characteristic "principal" is not an available property of this limiter (available: ip)',
      'varies_by.1: "principal" is not an available property of limiter "auth_failure"',
      'varies_by.2: "ip" is listed twice',
      'varies_by.3: "5" is not an available property of limiter "auth_failure"',
    ]);
    expect(validateRulesAnswer({ ...valid, varies_by: [] }, 'gateway_request', available).answer?.varies_by).toEqual(
      [],
    );
  });
});
