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
  /**
   * Drops the rule-evaluation series of `limiter`'s rules `names`, which a change of the rules
   * removed (rule-replica.ts; retired first, so no check reports them again): the family names only
   * rules that exist, however many names publishes come and go with.
   */
  forgetRules(limiter: string, names: readonly string[]): void;
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
  const created = new Counter<L>({ name, help, labelNames, registers: [registry], collect: collectTallies });
  talliesOf.set(created as Counter<string>, { labelNames, root: new Map(), all: [] });
  return created;
}

/**
 * Distinct `rule` label values one limiter's rule evaluations keep at most; past it a new name is
 * counted as `OTHER_RULE`. Local rule names are bounded (document-bounds.ts) and forgotten when
 * removed, but a rules service names its rules freely (one per customer, say) and they are never
 * removed: without this bound every name it ever answered was a series of its own, for good.
 */
export const MAX_RULE_NAMES_PER_LIMITER = 1000;
/** The `rule` label of names past the bound: not a valid rule name, so never a real rule's. */
export const OTHER_RULE = '(other)';

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
  const names = new Map<string, Set<string>>();
  const ruleLabel = (limiter: string, rule: string): string => {
    let known = names.get(limiter);
    if (!known) names.set(limiter, (known = new Set()));
    if (known.has(rule)) return rule;
    if (known.size >= MAX_RULE_NAMES_PER_LIMITER) return OTHER_RULE;
    known.add(rule);
    return rule;
  };
  const checkInc = tally(checks);
  const ruleInc = tally(rules);
  const peekInc = tally(peeks);
  return {
    check: (l) => checkInc([l.limiter, l.action, l.matched ? 'true' : 'false', l.error ? 'true' : 'false']),
    ruleEvaluation: (l) => ruleInc([l.limiter, ruleLabel(l.limiter, l.rule), l.action, l.result]),
    peek: (l) => peekInc([l.limiter, l.action, l.error ? 'true' : 'false']),
    forgetRules: (limiter, gone) => {
      for (const rule of gone) {
        untally(rules, [limiter, rule]);
        names.get(limiter)?.delete(rule);
      }
    },
  };
}

interface Tally {
  readonly labels: Record<string, string>;
  value: number;
}
interface Tallies {
  readonly labelNames: readonly string[];
  /** Nested by label value, in `labelNames` order; the last level holds the tallies. */
  readonly root: Map<string, unknown>;
  readonly all: Tally[];
}
const talliesOf = new WeakMap<Counter<string>, Tallies>();

/**
 * A hot-path increment for a labelled prom-client counter: a plain number per label set, handed to
 * the counter when it is collected. prom-client's own inc() hashes and validates the label object on
 * every call, on every request's path. The label set is found by walking one Map per label with the
 * values themselves (rule names, limiter names, literals: strings whose hash V8 has already
 * computed), never by a key string built per call, which would have to be hashed too. The
 * counter must be created by `counter()` below (every increment then goes through here; a direct
 * inc() would be overwritten).
 */
export function tally<L extends string>(c: Counter<L>): (values: readonly string[], by?: number) => void {
  const t = talliesOf.get(c as Counter<string>);
  if (!t) throw new Error('tally() needs a counter created with tallies');
  const last = t.labelNames.length - 1;
  return (values, by = 1) => {
    if (values.length !== t.labelNames.length)
      throw new Error(`tally: ${values.length} values for ${t.labelNames.length} labels`);
    let node = t.root;
    for (let i = 0; i < last; i++) {
      let next = node.get(values[i]!) as Map<string, unknown> | undefined;
      if (!next) node.set(values[i]!, (next = new Map()));
      node = next;
    }
    const entry = node.get(values[last]!) as Tally | undefined;
    if (entry) {
      entry.value += by;
      return;
    }
    const labels: Record<string, string> = {};
    for (let i = 0; i <= last; i++) labels[t.labelNames[i]!] = values[i]!;
    const created = { labels, value: by };
    node.set(values[last]!, created);
    t.all.push(created);
  };
}

/**
 * Drops every tally of `c` whose first label values are `prefix`, and the series prom-client holds
 * for them from the last collect (its `remove`), so neither the next scrape nor memory keeps them.
 */
export function untally<L extends string>(c: Counter<L>, prefix: readonly string[]): void {
  const t = talliesOf.get(c as Counter<string>);
  if (!t) throw new Error('untally() needs a counter created with tallies');
  if (prefix.length === 0 || prefix.length > t.labelNames.length) throw new Error('untally: bad prefix');
  let parent = t.root;
  for (let i = 0; i < prefix.length - 1; i++) {
    const next = parent.get(prefix[i]!) as Map<string, unknown> | undefined;
    if (!next) return;
    parent = next;
  }
  if (!parent.delete(prefix[prefix.length - 1]!)) return;
  const gone = (labels: Record<string, string>) => prefix.every((v, i) => labels[t.labelNames[i]!] === v);
  const kept: Tally[] = [];
  for (const entry of t.all) {
    if (!gone(entry.labels)) kept.push(entry);
    else c.remove(entry.labels as Partial<Record<L, string>>);
  }
  t.all.length = 0;
  for (const entry of kept) t.all.push(entry);
}

/** Publishes the tallies of `c` (prom-client calls collect() before every read of the counter). */
function collectTallies(this: Counter<string>): void {
  const t = talliesOf.get(this);
  if (!t) return;
  this.reset();
  for (const { labels, value } of t.all) this.inc(labels, value);
}

export const noMetrics: RateLimitMetrics = { check() {}, ruleEvaluation() {}, peek() {}, forgetRules() {} };

/** What became of one rules-service lookup (Phase 3): a cache hit, a fetched answer, or why not. */
export type RulesServiceResult = 'hit' | 'miss' | 'error' | 'timeout' | 'invalid' | 'circuit_open';

export interface RulesServiceMetrics {
  request(limiter: string, result: RulesServiceResult): void;
}

export const RULES_SERVICE_METRIC = 'arkvory_rate_limit_rules_service_requests_total';
export const RULES_SERVICE_HELP =
  'Rules-service lookups by result: hit (cache), miss (fetched), error, timeout, invalid, circuit_open (the last four: local rules apply).';

/** One increment per lookup, tallied per (limiter, result) to keep the hot path cheap. */
export function createRulesServiceMetrics(registry: Registry = defaultRegistry): RulesServiceMetrics {
  const requests = tally(counter(registry, RULES_SERVICE_METRIC, RULES_SERVICE_HELP, ['limiter', 'result']));
  return {
    request(limiter, result) {
      requests([limiter, result]);
    },
  };
}

export const noRulesServiceMetrics: RulesServiceMetrics = { request() {} };
