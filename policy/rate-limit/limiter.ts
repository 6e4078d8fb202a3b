/**
 * `Limiter` (spec 1.1): built once per checkpoint with a name and ordered rules, then
 * `check` / `peek` / `clear` per request. A store failure or a store slower than `timeoutMs` fails
 * open (unless an applicable rule says `on_store_error: deny`: `storeFailure` in evaluate.ts): the
 * result carries `error`, is counted (the `error` label of checks and peeks; a failed `clear` is
 * only logged, spec 1.10), and is logged at most once per interval.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import {
  ALLOW_NOTHING_MATCHED,
  buildPlan,
  failOpen,
  storeFailure,
  summarize,
  type Mode,
  type Plan,
  type RateLimitResult,
} from './evaluate.ts';
import { banKey, counterBase, counterKey, RuleKeyMemo, windowStartMs } from './keys.ts';
import { applicableRules, type Identifier } from './match.ts';
import { noMetrics, type RateLimitMetrics } from './metrics.ts';
import { isRetired } from './retired-rules.ts';
import { isPromise, type MaybePromise } from '../../lib/maybe-promise.ts';
import type { RulesNow } from './rule-tiers.ts';
import type { Rule } from './rules.ts';
import type { CounterStore } from './counter-store.ts';
import { withTimeout } from './timeout.ts';

export interface LimiterDeps {
  store: CounterStore;
  clock: Clock;
  log: Logger;
  metrics?: RateLimitMetrics;
  /** Prepended to every key; default `arkvory:rl:`. */
  keyPrefix?: string;
  /** Longest a store call may take before the check fails open. Default 100 ms. */
  timeoutMs?: number;
  /** Store errors are logged at most once per this interval. Default 10 s. */
  errorLogIntervalMs?: number;
}

export interface LimiterDefinition {
  name: string;
  /**
   * Ordered rules, or a function returning the current ones for an identifier (the tiered rule
   * store's replica; with Phase 3 the rules service's tier in front of it, see rule-tiers.ts).
   */
  rules: readonly Rule[] | ((identifier: Identifier) => RulesNow);
}

export interface Limiter {
  readonly name: string;
  /** Counts `cost` (default 1; floats allowed) against every applicable rule and returns the verdict. */
  check(identifier: Identifier, options?: { cost?: number }): Promise<RateLimitResult>;
  /** The verdict `check` would return for `cost` (default 1), without counting or starting bans. */
  peek(identifier: Identifier, options?: { cost?: number }): Promise<RateLimitResult>;
  /**
   * `check`, answering at once when nothing had to wait (counters in memory, rules cached), else a
   * promise. An invalid cost throws here rather than rejecting.
   */
  checkNow(identifier: Identifier, options?: { cost?: number }): MaybePromise<RateLimitResult>;
  /** `peek`, at once when nothing had to wait (as `checkNow`). */
  peekNow(identifier: Identifier, options?: { cost?: number }): MaybePromise<RateLimitResult>;
  /** Drops this limiter's counters and bans (shadow bans too) for one identifier, all rules. */
  clear(identifier: Identifier): Promise<void>;
}

export const DEFAULT_TIMEOUT_MS = 100;

export function createLimiter(deps: LimiterDeps, definition: LimiterDefinition): Limiter {
  const { store, clock, log } = deps;
  const metrics = deps.metrics ?? noMetrics;
  const prefix = deps.keyPrefix ?? 'arkvory:rl:';
  const timeoutMs = deps.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const errorLogIntervalMs = deps.errorLogIntervalMs ?? 10_000;
  const name = definition.name;
  const rulesNow: (identifier: Identifier) => RulesNow =
    typeof definition.rules === 'function' ? definition.rules : () => definition.rules as readonly Rule[];
  const keyMemo = new RuleKeyMemo();
  let lastErrorLogMs = -Infinity;
  let suppressedErrors = 0;

  const reportError = (operation: string, err: unknown): Error => {
    const error = err instanceof Error ? err : new Error(String(err));
    const code = (error as { code?: unknown }).code;
    const now = clock.monotonicMs();
    if (now - lastErrorLogMs >= errorLogIntervalMs) {
      log.warn(
        {
          limiter: name,
          operation,
          err: error,
          code: typeof code === 'string' ? code : 'store_unavailable',
          suppressed: suppressedErrors,
        },
        'rate-limit store failed; failing open except for rules with on_store_error: deny',
      );
      lastErrorLogMs = now;
      suppressedErrors = 0;
    } else suppressedErrors++;
    return error;
  };

  /**
   * The verdict, synchronously when nothing had to wait (the memory store, a warm rules cache): no
   * timer and no promise per check then. Redis (or a cold remote rules cache) answers with a promise.
   */
  const run = (identifier: Identifier, cost: number, mode: Mode): RateLimitResult | Promise<RateLimitResult> => {
    if (!(Number.isFinite(cost) && cost >= 0)) throw new RangeError(`cost must be a finite number >= 0, got ${cost}`);
    const now = rulesNow(identifier);
    // A cold remote cache answers with a promise (bounded by its own timeout); a warm one does not.
    return isPromise(now)
      ? now.then((rules) => decide(rules, identifier, cost, mode))
      : decide(now, identifier, cost, mode);
  };

  const decide = (
    rules: readonly Rule[],
    identifier: Identifier,
    cost: number,
    mode: Mode,
  ): RateLimitResult | Promise<RateLimitResult> => {
    const applicable = applicableRules(rules, identifier);
    if (applicable.length === 0) return ALLOW_NOTHING_MATCHED;
    const nowMs = clock.wallMs();
    let plan: Plan;
    try {
      plan = buildPlan(prefix, name, applicable, identifier, nowMs, keyMemo);
    } catch (err) {
      // A callable limit/period that throws is a host bug; fail open rather than fail the request.
      return failOpen(reportError(mode, err));
    }
    if (plan.counting.length === 0) return summarize(plan, []);
    try {
      const outcomes = store.run(plan, { nowMs, cost, mode, timeoutMs });
      if (!isPromise(outcomes)) return summarize(plan, outcomes);
      return (store.boundsOwnWait ? outcomes : withTimeout(outcomes, timeoutMs))
        .then((o) => summarize(plan, o))
        .catch((err: unknown) => storeFailure(plan, reportError(mode, err)));
    } catch (err) {
      return storeFailure(plan, reportError(mode, err));
    }
  };

  const counted = (result: RateLimitResult, late = false): RateLimitResult => {
    metrics.check({
      limiter: name,
      action: result.action,
      matched: result.evaluations.length > 0,
      error: result.error !== undefined,
    });
    for (const e of result.evaluations) {
      // A check that waited may have read rules a change removed meanwhile: their series are gone
      // and stay gone (retired-rules.ts). One answered at once cannot straddle a change.
      if (late && isRetired(e.rule)) continue;
      metrics.ruleEvaluation({ limiter: name, rule: e.rule.name, action: e.rule.action, result: e.result });
    }
    return result;
  };
  const countedLate = (result: RateLimitResult): RateLimitResult => counted(result, true);
  const peeked = (result: RateLimitResult): RateLimitResult => {
    metrics.peek({ limiter: name, action: result.action, error: result.error !== undefined });
    return result;
  };
  const checkNow = (identifier: Identifier, options?: { cost?: number }): MaybePromise<RateLimitResult> => {
    const result = run(identifier, options?.cost ?? 1, 'check');
    return isPromise(result) ? result.then(countedLate) : counted(result);
  };
  const peekNow = (identifier: Identifier, options?: { cost?: number }): MaybePromise<RateLimitResult> => {
    const result = run(identifier, options?.cost ?? 1, 'peek');
    return isPromise(result) ? result.then(peeked) : peeked(result);
  };

  return {
    name,
    checkNow,
    peekNow,
    async check(identifier, options) {
      return checkNow(identifier, options);
    },
    async peek(identifier, options) {
      return peekNow(identifier, options);
    },
    async clear(identifier) {
      const nowMs = clock.wallMs();
      const keys: string[] = [];
      const now = rulesNow(identifier);
      for (const rule of isPromise(now) ? await now : now) {
        if (rule.action === 'skip') continue;
        const base = counterBase(prefix, name, rule.name, rule.characteristics, identifier);
        const period = typeof rule.periodS === 'function' ? rule.periodS() : rule.periodS;
        if (typeof period === 'number' && period > 0) {
          const periodMs = Math.round(period * 1000);
          keys.push(counterKey(base, rule.countDistinct !== undefined, windowStartMs(nowMs, periodMs)));
        }
        keys.push(banKey(base));
      }
      try {
        await withTimeout(store.clear(keys), timeoutMs);
        log.info({ limiter: name, keys: keys.length }, 'rate-limit state cleared');
      } catch (err) {
        reportError('clear', err);
      }
    },
  };
}
