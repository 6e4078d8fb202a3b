/**
 * Which rate-limit rule shadows which, for the console (pure). Two kinds (docs/rate-limits.md):
 * - overridden: a rule of a higher tier with the same name replaces it (file > published > default);
 * - unreachable: an earlier effective `skip` rule matches every request this rule matches, so
 *   evaluation stops before it. That holds when each of the skip's `match` entries appears in this
 *   rule's `match` with the same value (a skip with no match entry covers every later rule).
 *   A skip that covers only part of a rule's requests is reported as `partlyAfter`.
 */
import {
  mergeTiers,
  TIERS,
  type LimiterRules,
  type MatchValue,
  type RuleSpec,
  type Tier,
} from '../../policy/rate-limit/index.ts';

export interface AnnotatedRule {
  readonly tier: Tier;
  readonly rule: RuleSpec;
  /** Position in evaluation order (0 first), absent when overridden. */
  readonly order?: number;
  /** The higher tier whose same-named rule replaces this one. */
  readonly overriddenBy?: Tier;
  /** Lower tiers whose same-named rule this one replaces. */
  readonly overrides: Tier[];
  /** An earlier skip rule that every request of this rule meets first. */
  readonly unreachableAfter?: string;
  /** Earlier skip rules that may match some of this rule's requests. */
  readonly partlyAfter: string[];
}

function sameMatch(a: MatchValue, b: MatchValue | undefined): boolean {
  if (b === undefined) return false;
  if (typeof a === 'string') return a === b;
  return typeof b !== 'string' && a.regex === b.regex;
}

/** True when every request `later` matches is also matched by `skip`. */
export function covers(skip: RuleSpec, later: RuleSpec): boolean {
  const laterMatch = later.match ?? {};
  return Object.entries(skip.match ?? {}).every(([key, value]) => sameMatch(value, laterMatch[key]));
}

/** False only when the two rules require different fixed values of one property. */
function mayOverlap(skip: RuleSpec, later: RuleSpec): boolean {
  const laterMatch = later.match ?? {};
  for (const [key, value] of Object.entries(skip.match ?? {})) {
    const other = laterMatch[key];
    if (typeof value === 'string' && typeof other === 'string' && value !== other) return false;
  }
  return true;
}

export function annotateTiers(doc: LimiterRules): Record<Tier, AnnotatedRule[]> {
  const effective = mergeTiers(doc);
  const winner = new Map(effective.map((t, i) => [t.spec.name, { tier: t.tier, order: i }]));
  const out = {} as Record<Tier, AnnotatedRule[]>;
  for (const tier of TIERS) {
    out[tier] = doc[tier].rules.map((rule) => {
      const win = winner.get(rule.name)!;
      const overrides = TIERS.filter(
        (t) => TIERS.indexOf(t) > TIERS.indexOf(tier) && doc[t].rules.some((r) => r.name === rule.name),
      );
      if (win.tier !== tier) return { tier, rule, overriddenBy: win.tier, overrides: [], partlyAfter: [] };
      const earlierSkips = effective.slice(0, win.order).filter((t) => t.spec.action === 'skip');
      const full = earlierSkips.find((t) => covers(t.spec, rule));
      const partlyAfter = full ? [] : earlierSkips.filter((t) => mayOverlap(t.spec, rule)).map((t) => t.spec.name);
      return {
        tier,
        rule,
        order: win.order,
        overrides,
        partlyAfter,
        ...(full ? { unreachableAfter: full.spec.name } : {}),
      };
    });
  }
  return out;
}
