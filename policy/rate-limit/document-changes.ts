/**
 * The changes a registry makes to stored `LimiterRules` documents, as pure functions from the current
 * documents to the next ones (the store applies them atomically). Each writer replaces only its own
 * tier (spec 2.5): seeding writes file and default tiers, publishing and unpublishing the published one.
 */
import { quoted } from '../../lib/quoted.ts';
import { RateLimitError, type RuleProblem } from './errors.ts';
import { emptyDocument, upsertRules, type LimiterRules, type RuleSpec } from './rules.ts';

/** Reads one stored document: valid, or undefined (the caller logs why). */
export type AcceptDocument = (limiter: string, raw: unknown) => LimiterRules | undefined;

/**
 * File and default tiers from this process; the published tier kept. A document that cannot be read
 * is left alone: overwriting it would lose its published tier. With `replaceFileTier` false (this
 * process's file was invalid) the stored file tier stays: the last good file of the fleet.
 */
export function seededDocuments(
  current: ReadonlyMap<string, unknown>,
  options: {
    limiters: readonly string[];
    fileRules: ReadonlyMap<string, RuleSpec[]>;
    defaults: (limiter: string) => RuleSpec[];
    replaceFileTier: boolean;
    accept: AcceptDocument;
  },
): Map<string, LimiterRules> {
  const next = new Map<string, LimiterRules>();
  for (const limiter of options.limiters) {
    const raw = current.get(limiter);
    const file = options.fileRules.get(limiter) ?? [];
    const defaults = options.defaults(limiter);
    if (raw === undefined && file.length === 0 && defaults.length === 0) continue;
    const existing = raw === undefined ? emptyDocument() : options.accept(limiter, raw);
    if (!existing) continue;
    next.set(limiter, {
      file_rules: options.replaceFileTier ? { rules: [...file] } : existing.file_rules,
      published_rules: existing.published_rules,
      default_rules: { rules: [...defaults] },
    });
  }
  return next;
}

/** The published tier of each limiter with `rules` upserted by name; `base` is a missing or unreadable document's start. */
export function withPublished(
  current: ReadonlyMap<string, unknown>,
  rateLimits: ReadonlyMap<string, RuleSpec[]>,
  options: { base: (limiter: string) => LimiterRules; read: AcceptDocument; onUnreadable: (limiter: string) => void },
): Map<string, LimiterRules> {
  const next = new Map<string, LimiterRules>();
  for (const [limiter, rules] of rateLimits) {
    const raw = current.get(limiter);
    let doc = raw === undefined ? options.base(limiter) : options.read(limiter, raw);
    if (!doc) {
      options.onUnreadable(limiter);
      doc = options.base(limiter);
    }
    next.set(limiter, { ...doc, published_rules: { rules: upsertRules(doc.published_rules.rules, rules) } });
  }
  return next;
}

/** The limiter's document without published rule `rule`; `unknown_rule` when it has none by that name. */
export function withoutPublished(
  current: ReadonlyMap<string, unknown>,
  limiter: string,
  rule: string,
  read: AcceptDocument,
): Map<string, LimiterRules> {
  const raw = current.get(limiter);
  const doc = raw === undefined ? undefined : read(limiter, raw);
  if (!doc?.published_rules.rules.some((r) => r.name === rule))
    throw new RateLimitError('unknown_rule', `limiter ${quoted(limiter)} has no published rule ${quoted(rule)}`);
  return new Map([
    [limiter, { ...doc, published_rules: { rules: doc.published_rules.rules.filter((r) => r.name !== rule) } }],
  ]);
}

/** How binding an action is: a rule overridden by a less binding one is weakened. */
const ACTION_STRENGTH = { limit: 2, log: 1, skip: 0 } as const;

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

/**
 * Why `override` (a published rule with a default rule's name, which replaces it: spec 2.5) is
 * weaker than `base`, or undefined when it is as strict or stricter on every count: the same
 * or a more binding action, no higher limit, no shorter window, no shorter ban, still failing
 * closed if it did, and the same match, characteristics and count_distinct (a changed match may
 * stop matching anything).
 */
export function weakening(base: RuleSpec, override: RuleSpec): string | undefined {
  if (ACTION_STRENGTH[override.action] < ACTION_STRENGTH[base.action])
    return `turns action ${base.action} into ${override.action}`;
  if (base.action === 'skip') return undefined;
  if (base.limit !== undefined && (override.limit ?? Number.POSITIVE_INFINITY) > base.limit)
    return `raises limit from ${base.limit} to ${override.limit}`;
  if (base.period_s !== undefined && (override.period_s ?? 0) < base.period_s)
    return `shortens period_s from ${base.period_s} to ${override.period_s}`;
  if (base.ban_for_s !== undefined && (override.ban_for_s ?? 0) < base.ban_for_s)
    return override.ban_for_s === undefined
      ? `removes the ${base.ban_for_s} s ban`
      : `shortens ban_for_s from ${base.ban_for_s} to ${override.ban_for_s}`;
  if (base.on_store_error === 'deny' && override.on_store_error !== 'deny')
    return 'turns on_store_error deny into allow';
  if (!same(base.match, override.match)) return 'changes match';
  if (!same(base.characteristics, override.characteristics)) return 'changes characteristics';
  if (!same(base.count_distinct, override.count_distinct)) return 'changes count_distinct';
  return undefined;
}

/** A rule that bypasses a limiter: a `skip`, or (`weakens`) a weaker replacement of the default rule of its name. */
export interface Bypass {
  /** Its position in the rules given. */
  index: number;
  rule: string;
  /** Why it weakens the default rule of its name; undefined for a skip. */
  weakens: string | undefined;
}

/**
 * The bypasses among `rules`, each with why. A rule replaces the rule of its name in every lower
 * tier (spec 2.5), so one named like a default rule but weaker (republishing
 * `ban_ip_after_auth_failures` with `action: log`) disables that default as surely as a skip.
 */
export function bypassesIn(rules: readonly RuleSpec[], defaults: readonly RuleSpec[]): Bypass[] {
  const base = new Map(defaults.map((r) => [r.name, r]));
  const found: Bypass[] = [];
  rules.forEach((r, index) => {
    if (r.action === 'skip') {
      found.push({ index, rule: r.name, weakens: undefined });
      return;
    }
    const original = base.get(r.name);
    const why = original && weakening(original, r);
    if (why) found.push({ index, rule: r.name, weakens: why });
  });
  return found;
}

/** One line per bypass: `rule "x" is a bypass (skip) rule`, `rule "y" weakens the default rule of that name (…)`. */
export function describeBypass(b: Bypass, where = ''): string {
  const at = where ? ` in ${where}` : '';
  return b.weakens === undefined
    ? `rule "${b.rule}"${at} is a bypass (skip) rule`
    : `rule "${b.rule}"${at} weakens the default rule of that name (${b.weakens})`;
}

/**
 * Spec 2.1, guardrails on who may add bypasses: a batch with a bypass (`bypassesIn`) is refused
 * whole with `bypass_not_allowed`, naming every such rule.
 */
export function refuseBypassRules(
  rateLimits: ReadonlyMap<string, readonly RuleSpec[]>,
  defaults: (limiter: string) => readonly RuleSpec[] = () => [],
): void {
  const problems: RuleProblem[] = [];
  const reasons: string[] = [];
  for (const [limiter, rules] of rateLimits) {
    for (const b of bypassesIn(rules, defaults(limiter))) {
      problems.push(
        b.weakens === undefined
          ? {
              path: ['rate_limits', limiter, b.index, 'action'],
              rule: b.rule,
              message:
                'bypass (skip) rules may be published only by the principals in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS, or deployed in the operator file',
            }
          : {
              path: ['rate_limits', limiter, b.index],
              rule: b.rule,
              message: `overrides the default rule "${b.rule}" and ${b.weakens}; weakening a default rule is a bypass`,
            },
      );
      reasons.push(describeBypass(b, limiter));
    }
  }
  if (problems.length)
    throw new RateLimitError(
      'bypass_not_allowed',
      `Refused: ${reasons.join('; ')}. Only the principals in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS may publish bypass rules or weaken default rules; operators can also deploy them in ARKVORY_RATE_LIMITS_FILE.`,
      { problems },
    );
}
