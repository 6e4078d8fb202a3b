/**
 * `arkvory_rate_limit_rule_evaluations_total` names only rules that exist: a rule a change removed
 * (an unpublish here, or one another gateway made, read by the refresh) loses its series, and a
 * check that read its rules before the change and answers after it does not bring the series back.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../clock.ts';
import type { CounterStore } from './counter-store.ts';
import { createLimiter } from './limiter.ts';
import { createMemoryCounterStore } from './memory-counter-store.ts';
import { createRateLimitMetrics, METRIC_NAMES } from './metrics.ts';
import { createMemoryRuleDocuments } from './rule-documents.ts';
import { createRuleRegistry } from './rule-registry.ts';
import type { LimiterSpec, RuleSpec } from './rules.ts';

const log = pino({ level: 'silent' });
const available = new Map<string, LimiterSpec>([
  ['api', { description: 'x', available_properties: ['user'], default_rules: [] }],
]);

function rule(name: string): RuleSpec {
  return { name, action: 'limit', characteristics: ['user'], limit: 1000, period_s: 60 };
}

function setup(store: CounterStore = createMemoryCounterStore()) {
  const prom = new Registry();
  const metrics = createRateLimitMetrics(prom);
  const rules = createRuleRegistry({
    documents: createMemoryRuleDocuments(),
    available,
    fileRules: new Map(),
    clock: new ManualClock(),
    log,
    onRulesRemoved: (limiter, names) => metrics.forgetRules(limiter, names),
  });
  const limiter = createLimiter(
    { store, clock: new ManualClock(), log, metrics },
    { name: 'api', rules: () => rules.rules('api') },
  );
  /** The rule names the family has series for, and the checks counted. */
  const scrape = async () => {
    const families = await prom.getMetricsAsJSON();
    const values = (name: string) => families.find((f) => f.name === name)?.values ?? [];
    return {
      rules: [...new Set(values(METRIC_NAMES.ruleEvaluations).map((v) => String(v.labels.rule)))].sort(),
      checks: values(METRIC_NAMES.checks).reduce((n, v) => n + v.value, 0),
    };
  };
  return { rules, limiter, scrape };
}

describe('rule evaluation series', () => {
  it('follow the rules through publishes with changing names: a removed rule leaves the family', async () => {
    const { rules, limiter, scrape } = setup();
    await rules.start();
    await rules.publish({ rate_limits: { api: [rule('steady')] } });
    for (let i = 0; i < 20; i++) {
      await rules.publish({ rate_limits: { api: [rule(`rule_${i}`)] } });
      if (i > 0) await rules.unpublish('api', `rule_${i - 1}`);
      await limiter.check({ user: 'u' });
      expect((await scrape()).rules).toEqual([`rule_${i}`, 'steady']);
    }
    expect((await scrape()).checks).toBe(20);
    // A name published again counts afresh.
    await rules.publish({ rate_limits: { api: [rule('rule_0')] } });
    await limiter.check({ user: 'u' });
    expect((await scrape()).rules).toEqual(['rule_0', 'rule_19', 'steady']);
    rules.stop();
  });

  it('a check that read the rules before a removal and answers after it does not bring the series back', async () => {
    const memory = createMemoryCounterStore();
    // A store that answers when told (as Redis does, later), the memory store's answer then.
    const waiting: Array<() => void> = [];
    const slow: CounterStore = {
      kind: 'redis',
      run: (plan, input) => new Promise((resolve) => waiting.push(() => resolve(memory.run(plan, input)))),
      clear: (keys) => memory.clear(keys),
    };
    const { rules, limiter, scrape } = setup(slow);
    await rules.start();
    await rules.publish({ rate_limits: { api: [rule('kept'), rule('removed')] } });
    const first = limiter.check({ user: 'u' });
    waiting.shift()!();
    await first;
    expect((await scrape()).rules).toEqual(['kept', 'removed']);

    const straddling = limiter.check({ user: 'u' });
    await rules.unpublish('api', 'removed');
    expect((await scrape()).rules).toEqual(['kept']);
    waiting.shift()!();
    const result = await straddling;
    // Its verdict stands and its check is counted; the removed rule's evaluation is not reported.
    expect(result.evaluations.map((e) => e.rule.name)).toEqual(['kept', 'removed']);
    expect(await scrape()).toEqual({ rules: ['kept'], checks: 2 });
    rules.stop();
  });
});
