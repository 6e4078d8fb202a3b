/**
 * The decision, pure: counters and bans × now → outcomes and the writes that make them true.
 * `check.lua` is the same algorithm, atomically in Redis; the memory store runs this function.
 * The shared conformance suite (store.int.test.ts) holds the two to the same table.
 *
 * Window algorithm: aligned fixed windows. A counter covers [floor(now/P)*P, +P) and its key names
 * the window start, so a new window is a new key (the old one expires by TTL). "now" is the
 * caller's wall clock, passed in (ARGV in Lua), so every process and the tests agree on it.
 *
 * Per applicable counting rule, in order:
 *  - ban active (ban end > now): exceeded, no counting, resetAt = ban end;
 *  - otherwise count += cost (or add the value to the distinct set, unless the set already holds
 *    more than limit values: so it never holds more than limit + 1); exceeded when count > limit;
 *    exceeded with ban_for_s starts a ban of ban_for_s, resetAt = ban end, else resetAt = window end;
 *  - a `limit` rule that is exceeded blocks and is terminal; `log` never blocks and never stops.
 * A `skip` rule is terminal (applicableRules cut the list after it) and counts nothing.
 * `peek` computes the same outcomes for the given cost and writes nothing.
 *
 * When the store fails there are no outcomes: `storeFailure` decides from the plan alone (fail open,
 * unless a limit rule the check would have counted says `on_store_error: deny`).
 */
import { banKey, counterBase, counterKey, windowStartMs, type RuleKeyMemo } from './keys.ts';
import type { Identifier } from './match.ts';
import { valueOf } from './match.ts';
import { encodeValue } from './keys.ts';
import type { Resolvable, Rule } from './rules.ts';

export type Mode = 'check' | 'peek';

/** One counting rule, resolved for one check: numbers, keys, window. */
export interface PlannedRule {
  readonly rule: Rule;
  readonly action: 'limit' | 'log';
  readonly limit: number;
  readonly periodMs: number;
  readonly banMs: number;
  readonly windowEndMs: number;
  readonly counterKey: string;
  readonly banKey: string;
  /** For count_distinct: the (encoded) value to add; undefined for plain counters. */
  readonly distinctValue: string | undefined;
}

export interface Plan {
  readonly counting: readonly PlannedRule[];
  /** The terminal skip rule that ended the list, if any. */
  readonly skip: Rule | undefined;
}

/** Counter state the store read for one planned rule. */
export interface RuleState {
  /** Current count (plain) or set size (distinct). */
  readonly count: number;
  /** Ban end in ms, 0 when none. */
  readonly banUntilMs: number;
  /** Distinct rules: whether the value is already in the set. */
  readonly isMember: boolean;
}

export interface Outcome {
  readonly count: number;
  readonly exceeded: boolean;
  readonly banned: boolean;
  readonly resetAtMs: number;
}

export type Write =
  | { readonly op: 'incr'; readonly key: string; readonly by: number; readonly expireAtMs: number }
  | { readonly op: 'sadd'; readonly key: string; readonly member: string; readonly expireAtMs: number }
  | { readonly op: 'ban'; readonly key: string; readonly untilMs: number };

/** Keys are kept this long past the end of their window (a cheap margin for clock skew). */
export const KEY_SLACK_MS = 1000;

function resolve(value: Resolvable | undefined, what: string, rule: Rule): number {
  const n = typeof value === 'function' ? value() : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || n < 0)
    throw new TypeError(`rule "${rule.name}": ${what} resolved to ${String(n)}, expected a non-negative number`);
  return n;
}

export function buildPlan(
  prefix: string,
  limiter: string,
  applicable: readonly Rule[],
  identifier: Identifier,
  nowMs: number,
  memo?: RuleKeyMemo,
): Plan {
  const counting: PlannedRule[] = [];
  let skip: Rule | undefined;
  for (const rule of applicable) {
    if (rule.action === 'skip') {
      skip = rule;
      break;
    }
    const limit = resolve(rule.limit, 'limit', rule);
    const periodMs = Math.max(1, Math.round(resolve(rule.periodS, 'period_s', rule) * 1000));
    const start = windowStartMs(nowMs, periodMs);
    const distinct = rule.countDistinct !== undefined;
    const keys = memo
      ? memo.keys(prefix, limiter, rule, identifier, start)
      : keysOf(counterBase(prefix, limiter, rule.name, rule.characteristics, identifier), distinct, start);
    counting.push({
      rule,
      action: rule.action,
      limit,
      periodMs,
      banMs: rule.banForS ? rule.banForS * 1000 : 0,
      windowEndMs: start + periodMs,
      counterKey: keys.counterKey,
      banKey: keys.banKey,
      distinctValue: distinct ? encodeValue(valueOf(identifier, rule.countDistinct!)) : undefined,
    });
  }
  return { counting, skip };
}

function keysOf(base: string, distinct: boolean, start: number): { counterKey: string; banKey: string } {
  return { counterKey: counterKey(base, distinct, start), banKey: banKey(base) };
}

/** The reference algorithm (see the header). `states[i]` belongs to `plan.counting[i]`. */
export function evaluate(
  plan: Plan,
  states: readonly RuleState[],
  input: { nowMs: number; cost: number; mode: Mode },
): { outcomes: Outcome[]; writes: Write[] } {
  const { nowMs, cost, mode } = input;
  const outcomes: Outcome[] = [];
  const writes: Write[] = [];
  for (let i = 0; i < plan.counting.length; i++) {
    const p = plan.counting[i]!;
    const s = states[i]!;
    let outcome: Outcome;
    if (p.banMs > 0 && s.banUntilMs > nowMs) {
      // A ban lasts ban_for_s: an end further off was written by a gateway whose clock runs ahead.
      outcome = { count: s.count, exceeded: true, banned: true, resetAtMs: Math.min(s.banUntilMs, nowMs + p.banMs) };
    } else {
      const expireAtMs = p.windowEndMs + KEY_SLACK_MS;
      let count: number;
      if (p.distinctValue !== undefined) {
        // A set already past its limit takes no new value: every value is over it anyway, and the
        // values are the client's to choose, so adding them would grow the set with each request.
        const full = s.count > p.limit;
        count = s.count + (s.isMember || full ? 0 : 1);
        if (mode === 'check' && !full)
          writes.push({ op: 'sadd', key: p.counterKey, member: p.distinctValue, expireAtMs });
      } else {
        count = s.count + cost;
        if (mode === 'check') writes.push({ op: 'incr', key: p.counterKey, by: cost, expireAtMs });
      }
      const exceeded = count > p.limit;
      if (exceeded && p.banMs > 0) {
        const untilMs = nowMs + p.banMs;
        if (mode === 'check') writes.push({ op: 'ban', key: p.banKey, untilMs });
        outcome = { count, exceeded, banned: true, resetAtMs: untilMs };
      } else {
        outcome = { count, exceeded, banned: false, resetAtMs: p.windowEndMs };
      }
    }
    outcomes.push(outcome);
    if (outcome.exceeded && p.action === 'limit') break;
  }
  return { outcomes, writes };
}

/** `store_error`: the store failed and the rule says `on_store_error: deny`, so it blocked. */
export type RuleResult = 'allow' | 'exceeded' | 'banned' | 'skip' | 'store_error';

export interface RuleEvaluation {
  readonly rule: Rule;
  readonly result: RuleResult;
  /** The rule's count after this call (before it, for a peek of cost 0); 0 for the skip rule. */
  readonly count: number;
}

export interface RateLimitInfo {
  /** The limit of `rule`, resolved at check time. */
  readonly resolvedLimit: number;
  /** The period of `rule` in seconds, resolved at check time. */
  readonly resolvedPeriodS: number;
  /** When the caller may usefully retry: the window end, or the ban end while banned. */
  readonly resetAtMs: number;
  /** What is left of `limit` in this window (0 when exceeded or banned). */
  readonly remaining: number;
}

export interface RateLimitResult {
  /** What the caller should do. */
  readonly action: 'allow' | 'block';
  /** Whether `rule`'s count exceeded its limit (or its ban is active); true for an exceeded shadow rule too. */
  readonly exceeded: boolean;
  /** The most constraining evaluated rule; the skip rule when a skip ended the evaluation. */
  readonly rule: Rule | undefined;
  /** Set when the store failed; the result then allows (fail open) unless a rule fails closed. */
  readonly error: Error | undefined;
  /** Absent for skip, for errors and when no counting rule applied. */
  readonly info: RateLimitInfo | undefined;
  /** Every rule evaluated, in order (for metrics and logs). */
  readonly evaluations: readonly RuleEvaluation[];
  /**
   * The most constraining enforcing (`limit`) rule and its info, what a client is told of its
   * limits (RateLimit header fields): `rule` and `info` unless an exceeded shadow rule took their
   * place, which must not change what a client sees. Absent when no limit rule was counted.
   */
  readonly enforcing?: { readonly rule: Rule; readonly info: RateLimitInfo } | undefined;
}

export const ALLOW_NOTHING_MATCHED: RateLimitResult = Object.freeze({
  action: 'allow',
  exceeded: false,
  rule: undefined,
  error: undefined,
  info: undefined,
  evaluations: [],
});

export function failOpen(error: Error): RateLimitResult {
  return { action: 'allow', exceeded: false, rule: undefined, error, info: undefined, evaluations: [] };
}

/**
 * The verdict when the store failed (or timed out) for `plan`: blocked by the first counting rule
 * with `on_store_error: deny` (validation allows it on limit rules only), else open. Rules after a
 * skip are not in the plan, so a skip still bypasses them. Nothing was counted: no info, and the
 * one evaluation reported is the denying rule's.
 */
export function storeFailure(plan: Plan, error: Error): RateLimitResult {
  for (const p of plan.counting) {
    if (p.rule.onStoreError === 'deny')
      return {
        action: 'block',
        exceeded: false,
        rule: p.rule,
        error,
        info: undefined,
        evaluations: [{ rule: p.rule, result: 'store_error', count: 0 }],
      };
  }
  return failOpen(error);
}

/**
 * Builds the caller's result from the outcomes (either store's). The most constraining rule is:
 * the blocking limit rule; else the first exceeded shadow (log) rule; else the limit rule with the
 * least remaining (earliest reset on ties); else the log rule with the least remaining; else the
 * reached skip rule (no counter, so no info). Rules counted before a skip still count and report.
 */
export function summarize(plan: Plan, outcomes: readonly Outcome[]): RateLimitResult {
  const evaluations: RuleEvaluation[] = [];
  let blocking = -1;
  let firstExceededLog = -1;
  let bestLimit = -1;
  let bestLog = -1;
  const remainingOf = (i: number) => Math.max(0, plan.counting[i]!.limit - outcomes[i]!.count);
  const better = (i: number, j: number) =>
    j === -1 ||
    remainingOf(i) < remainingOf(j) ||
    (remainingOf(i) === remainingOf(j) && outcomes[i]!.resetAtMs < outcomes[j]!.resetAtMs);
  for (let i = 0; i < outcomes.length; i++) {
    const p = plan.counting[i]!;
    const o = outcomes[i]!;
    evaluations.push({
      rule: p.rule,
      result: o.banned && o.exceeded ? 'banned' : o.exceeded ? 'exceeded' : 'allow',
      count: o.count,
    });
    if (p.action === 'limit') {
      if (o.exceeded) blocking = i;
      else if (better(i, bestLimit)) bestLimit = i;
    } else if (o.exceeded) {
      if (firstExceededLog === -1) firstExceededLog = i;
    } else if (better(i, bestLog)) bestLog = i;
  }
  const reachedSkip = plan.skip !== undefined && blocking === -1;
  if (reachedSkip) evaluations.push({ rule: plan.skip!, result: 'skip', count: 0 });
  const chosen =
    blocking !== -1 ? blocking : firstExceededLog !== -1 ? firstExceededLog : bestLimit !== -1 ? bestLimit : bestLog;
  if (chosen === -1) {
    return {
      action: 'allow',
      exceeded: false,
      rule: reachedSkip ? plan.skip : undefined,
      error: undefined,
      info: undefined,
      evaluations,
    };
  }
  const infoOf = (i: number): RateLimitInfo => {
    const p = plan.counting[i]!;
    const o = outcomes[i]!;
    return {
      resolvedLimit: p.limit,
      resolvedPeriodS: p.periodMs / 1000,
      resetAtMs: o.resetAtMs,
      remaining: o.exceeded ? 0 : remainingOf(i),
    };
  };
  const info = infoOf(chosen);
  const limitRule = blocking !== -1 ? blocking : bestLimit;
  return {
    action: blocking !== -1 ? 'block' : 'allow',
    exceeded: outcomes[chosen]!.exceeded,
    rule: plan.counting[chosen]!.rule,
    error: undefined,
    info,
    evaluations,
    enforcing:
      limitRule === -1
        ? undefined
        : { rule: plan.counting[limitRule]!.rule, info: limitRule === chosen ? info : infoOf(limitRule) },
  };
}
