import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createRateLimitMetrics, MAX_RULE_NAMES_PER_LIMITER, METRIC_NAMES, OTHER_RULE } from './metrics.ts';

/** `rule` label values of `limiter` in the rule-evaluations family, as scraped. */
async function ruleLabels(registry: Registry, limiter: string): Promise<string[]> {
  const text = await registry.getSingleMetricAsString(METRIC_NAMES.ruleEvaluations);
  return [...text.matchAll(new RegExp(`limiter="${limiter}",rule="([^"]*)"`, 'g'))].map((m) => m[1]!);
}

describe('rule-evaluation series', () => {
  it('keep at most 1000 rule names per limiter (a rules service names rules freely); the rest count as (other)', async () => {
    const registry = new Registry();
    const metrics = createRateLimitMetrics(registry);
    const evaluate = (limiter: string, rule: string) =>
      metrics.ruleEvaluation({ limiter, rule, action: 'limit', result: 'allow' });
    for (let i = 0; i < 3000; i++) evaluate('gateway_request', `contract_cap_${i}`);
    evaluate('auth_failure', 'other_limiter_rule');
    const labels = await ruleLabels(registry, 'gateway_request');
    expect(labels).toHaveLength(MAX_RULE_NAMES_PER_LIMITER + 1);
    expect(labels).toContain('contract_cap_999');
    expect(labels).not.toContain('contract_cap_1000');
    expect(await registry.getSingleMetricAsString(METRIC_NAMES.ruleEvaluations)).toContain(
      `limiter="gateway_request",rule="${OTHER_RULE}",action="limit",result="allow"} 2000`,
    );
    // Another limiter has a bound of its own.
    expect(await ruleLabels(registry, 'auth_failure')).toEqual(['other_limiter_rule']);
    // A removed rule's name frees its place: the next new name has a series of its own again.
    metrics.forgetRules('gateway_request', ['contract_cap_0']);
    evaluate('gateway_request', 'new_rule');
    expect(await ruleLabels(registry, 'gateway_request')).toContain('new_rule');
    expect(await ruleLabels(registry, 'gateway_request')).toHaveLength(MAX_RULE_NAMES_PER_LIMITER + 1);
  });
});
