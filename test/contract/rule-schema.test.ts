/**
 * One source of truth for the rate-limit rule's shape: policy/rate-limit/rule.schema.json.
 * - the `Rule` component of both OpenAPI documents is exactly that schema (`npm run docs` regenerates);
 * - the code that validates rules (policy/rate-limit/rules.ts, used by the YAML file, the publish API
 *   and the rules-service answers) accepts exactly what the schema accepts, over generated rules.
 */
import { readFile } from 'node:fs/promises';
import { Ajv2020 } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadOpenApiDocument } from '../../proxy/openapi/contract.ts';
import { validateRule } from '../../policy/rate-limit/rules.ts';
import type { RuleProblem } from '../../policy/rate-limit/errors.ts';
import { RULE_SCHEMA_DOCUMENTS, RULE_SCHEMA_FILE, ruleComponent } from '../support/readme-tables.ts';

const schema = JSON.parse(await readFile(RULE_SCHEMA_FILE, 'utf8'));
const validateBySchema = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true }).compile(schema);

function validByCode(value: unknown): boolean {
  const problems: RuleProblem[] = [];
  return validateRule(value, [], problems) !== undefined && problems.length === 0;
}

describe('the rule schema', () => {
  it('is the Rule component of every OpenAPI document (npm run docs regenerates them)', async () => {
    const component = await ruleComponent();
    for (const file of RULE_SCHEMA_DOCUMENTS) {
      // Read as the contract reads them: past the parser's default guard of 100 aliases, which the
      // admin operations' shared answers outgrow.
      const doc = await loadOpenApiDocument(file);
      expect(doc.components.schemas?.Rule, file).toEqual(component);
    }
  });

  it('accepts and refuses what the code accepts and refuses (spot checks)', () => {
    const cases: Array<[unknown, boolean]> = [
      [{ name: 'r', action: 'limit', limit: 10, period_s: 60 }, true],
      [{ name: 'r', action: 'skip', match: { route: { regex: '^/api/' } } }, true],
      [{ name: 'r', action: 'limit', limit: 10.5, period_s: 60 }, false],
      [{ name: 'r', action: 'limit', limit: 10 }, false],
      [{ name: 'R', action: 'log', limit: 1, period_s: 1 }, false],
      [{ name: 'r', action: 'limit', limit: 1, period_s: 1, extra: true }, false],
      [{ name: 'r', action: 'skip', ban_for_s: 60 }, false],
      [{ name: 'r', action: 'limit', limit: 1, period_s: 1, ban_for_s: 9, count_distinct: 'ip' }, false],
      [{ name: 'r', action: 'limit', limit: 1, period_s: 1, characteristics: ['ip', 'ip'] }, false],
      [{ name: 'r', action: 'limit', limit: 1, period_s: 1, match: { ip: { regex: 'a', flags: 'i' } } }, false],
      [{ name: 'r', action: 'limit', limit: 1, period_s: 1, on_store_error: 'deny' }, true],
      [{ name: 'r', action: 'log', limit: 1, period_s: 1, on_store_error: 'allow' }, true],
      [{ name: 'r', action: 'log', limit: 1, period_s: 1, on_store_error: 'deny' }, false],
      [{ name: 'r', action: 'skip', on_store_error: 'deny' }, false],
      [{ name: 'r', action: 'limit', limit: 1, period_s: 1, on_store_error: 'block' }, false],
    ];
    for (const [value, valid] of cases) {
      expect(validByCode(value), JSON.stringify(value)).toBe(valid);
      expect(validateBySchema(value), JSON.stringify(value)).toBe(valid);
    }
  });

  it('agrees with the code on generated rules', () => {
    // Mostly valid values with a few wrong ones mixed in, so that most rules are near the boundary.
    const mostly = <T, U>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<U>) =>
      fc.oneof({ arbitrary: valid, weight: 6 }, { arbitrary: invalid, weight: 1 });
    const property = mostly(fc.constantFrom('ip', 'route', 'principal', 'x.y-z'), fc.constantFrom('Bad', '', 'a b'));
    const count = (max: number) =>
      mostly(
        fc.oneof(fc.integer({ min: 1, max }), fc.constantFrom(1, max)),
        fc.constantFrom(0, -1, max + 1, 1.5, null, '10', Number.MAX_SAFE_INTEGER + 2),
      );
    const matchValue = mostly(
      fc.oneof(fc.constantFrom('GET', '/api', 7, true), fc.record({ regex: fc.constantFrom('^/api/', 'a+') })),
      fc.oneof(fc.record({ regex: fc.constant('a'), flags: fc.constant('i') }), fc.constantFrom(null, [], {})),
    );
    const rule = fc.record(
      {
        name: mostly(fc.constantFrom('r', 'rule_1', 'x'.repeat(64)), fc.constantFrom('A', '', 'x'.repeat(65), 3)),
        description: mostly(fc.string(), fc.constant(null)),
        action: mostly(fc.constantFrom('limit', 'log', 'skip'), fc.constantFrom('block', null)),
        characteristics: mostly(fc.array(property, { maxLength: 3 }), fc.constantFrom('ip', null)),
        match: mostly(fc.dictionary(property, matchValue, { maxKeys: 2 }), fc.constantFrom(null, 'x')),
        limit: count(Number.MAX_SAFE_INTEGER),
        period_s: count(31622400),
        ban_for_s: count(31622400),
        count_distinct: mostly(property, fc.constantFrom(null, '')),
        on_store_error: mostly(fc.constantFrom('allow', 'deny'), fc.constantFrom('open', null, true)),
      },
      { requiredKeys: [] },
    );
    const withoutUnknown = fc
      .tuple(rule, fc.integer({ min: 0, max: 9 }))
      .map(([r, n]) => (n === 0 ? { ...r, unknown_field: 1 } : r));
    fc.assert(
      fc.property(withoutUnknown, (value) => {
        expect(validByCode(value)).toBe(validateBySchema(value));
      }),
      { numRuns: 5000 },
    );
  });
});
