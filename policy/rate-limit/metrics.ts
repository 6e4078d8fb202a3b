/**
 * Prometheus counters of the engine (spec 1.10). One `checks` increment per check, so a request is
 * never counted twice however many rules it walked through; rule evaluations are counted apart.
 * `peek` has its own counter (its errors are its `error` label); `clear` is only logged. The
 * pre-split `calls_total` and `errors_total` were removed by the spec and are never exported.
 */
import { Counter, register as defaultRegistry, type Registry } from 'prom-client';

export interface RateLimitMetrics {
  check(labels: { limiter: string; action: string; matched: boolean; error: boolean }): void;
  ruleEvaluation(labels: { limiter: string; rule: string; action: string; result: string }): void;
  peek(labels: { limiter: string; action: string; error: boolean }): void;
}

export const METRIC_NAMES = {
  checks: 'arkvory_rate_limit_checks_total',
  ruleEvaluations: 'arkvory_rate_limit_rule_evaluations_total',
  peeks: 'arkvory_rate_limit_peeks_total',
} as const;

/** Families spec 1.10 removed (`calls_total`, `errors_total`): tests check they stay absent. */
export const REMOVED_METRIC_NAMES = ['arkvory_rate_limit_calls_total', 'arkvory_rate_limit_errors_total'] as const;

function counter<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[],
): Counter<L> {
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Counter<L>;
  return new Counter<L>({ name, help, labelNames, registers: [registry] });
}

export function createRateLimitMetrics(registry: Registry = defaultRegistry): RateLimitMetrics {
  const checks = counter(registry, METRIC_NAMES.checks, 'Rate-limit checks, one per check() call.', [
    'limiter',
    'action',
    'matched',
    'error',
  ]);
  const rules = counter(registry, METRIC_NAMES.ruleEvaluations, 'Rule evaluations inside checks.', [
    'limiter',
    'rule',
    'action',
    'result',
  ]);
  const peeks = counter(registry, METRIC_NAMES.peeks, 'Rate-limit peeks (no counting).', [
    'limiter',
    'action',
    'error',
  ]);
  return {
    check: (l) =>
      checks.inc({ limiter: l.limiter, action: l.action, matched: String(l.matched), error: String(l.error) }),
    ruleEvaluation: (l) => rules.inc(l),
    peek: (l) => peeks.inc({ limiter: l.limiter, action: l.action, error: String(l.error) }),
  };
}

export const noMetrics: RateLimitMetrics = { check() {}, ruleEvaluation() {}, peek() {} };

/** What became of one rules-service lookup (Phase 3): a cache hit, a fetched answer, or why not. */
export type RulesServiceResult = 'hit' | 'miss' | 'error' | 'timeout' | 'invalid' | 'circuit_open';

export interface RulesServiceMetrics {
  request(limiter: string, result: RulesServiceResult): void;
}

export const RULES_SERVICE_METRIC = 'arkvory_rate_limit_rules_service_requests_total';
export const RULES_SERVICE_HELP =
  'Rules-service lookups by result: hit (cache), miss (fetched), error, timeout, invalid, circuit_open (the last four: local rules apply).';

/** One increment per lookup; children are bound once per (limiter, result) to keep the hot path cheap. */
export function createRulesServiceMetrics(registry: Registry = defaultRegistry): RulesServiceMetrics {
  const requests = counter(registry, RULES_SERVICE_METRIC, RULES_SERVICE_HELP, ['limiter', 'result']);
  const bound = new Map<string, { inc(): void }>();
  return {
    request(limiter, result) {
      const key = `${limiter}\0${result}`;
      let child = bound.get(key);
      if (!child) bound.set(key, (child = requests.labels({ limiter, result })));
      child.inc();
    },
  };
}

export const noRulesServiceMetrics: RulesServiceMetrics = { request() {} };
