/**
 * The one rule schema (spec 2.2, 2.3, 2.5, 2.6): the YAML file, the publish payload and the stored
 * per-limiter document are all validated here, by the same code. Pure: no I/O.
 *
 * Wire form (`RuleSpec`) is snake_case, as in the spec's YAML and JSON; `Rule` is the camelCase form
 * a `Limiter` evaluates (limit and period may be callables, spec 1.7).
 */
import { quoted } from '../../lib/quoted.ts';
import { RateLimitError, type RuleProblem } from './errors.ts';
import { compileRuleRegex } from './rule-regex.ts';

export const ACTIONS = ['limit', 'log', 'skip'] as const;
export type Action = (typeof ACTIONS)[number];

export const NAME_PATTERN = /^[a-z0-9_]{1,64}$/;
/** Properties may be named like rules, and also with dots/dashes (e.g. `request_type`). */
const PROPERTY_PATTERN = /^[a-z0-9_.-]{1,64}$/;
const MAX_LIMIT = Number.MAX_SAFE_INTEGER;
/** uint32 in the protobuf schema; a year is plenty for a window or a ban. */
const MAX_SECONDS = 366 * 24 * 3600;

export type MatchValue = string | { readonly regex: string };

/** What a rule does when its counter store cannot answer: `allow` (fail open, the default) or `deny`. */
export const STORE_ERROR_ACTIONS = ['allow', 'deny'] as const;
export type StoreErrorAction = (typeof STORE_ERROR_ACTIONS)[number];

/** A rule as written in YAML/JSON (spec 2.3 `Rule`). */
export interface RuleSpec {
  name: string;
  description?: string;
  action: Action;
  characteristics?: string[];
  match?: Record<string, MatchValue>;
  limit?: number;
  period_s?: number;
  count_distinct?: string;
  ban_for_s?: number;
  on_store_error?: StoreErrorAction;
}

/** A number, or a callable resolved at check time (spec 1.7; Phase 1 passthrough only). */
export type Resolvable = number | (() => number);

/** A rule as a limiter evaluates it. Build with `ruleFromSpec` or `defineRule`. */
export interface Rule {
  readonly name: string;
  readonly action: Action;
  readonly description?: string | undefined;
  readonly match: Readonly<Record<string, MatchValue>>;
  readonly characteristics: readonly string[];
  readonly limit?: Resolvable | undefined;
  readonly periodS?: Resolvable | undefined;
  readonly countDistinct?: string | undefined;
  readonly banForS?: number | undefined;
  /** `deny`: a check this rule applies to is refused when the store fails; absent or `allow`: fail open. */
  readonly onStoreError?: StoreErrorAction | undefined;
}

/** What one limiter declares in `available_limiters.yaml` (spec 2.2). */
export interface LimiterSpec {
  description: string;
  available_properties: string[];
  default_rules: RuleSpec[];
  /**
   * Properties every `limit` rule of the limiter must count by (`characteristics`). `auth_failure`:
   * `ip`, since a limit or ban counted without it is one for every address, which any client's
   * failures could then start (a lockout of everyone by anyone).
   */
  limit_rules_count_by?: string[];
}

export type AvailableLimiters = ReadonlyMap<string, LimiterSpec>;

/** The stored per-limiter document (spec 2.5 `LimiterRules`); each tier is a `RuleList`. */
export interface LimiterRules {
  file_rules: { rules: RuleSpec[] };
  published_rules: { rules: RuleSpec[] };
  default_rules: { rules: RuleSpec[] };
}

export const TIERS = ['file_rules', 'published_rules', 'default_rules'] as const;
export type Tier = (typeof TIERS)[number];

export function emptyDocument(): LimiterRules {
  return { file_rules: { rules: [] }, published_rules: { rules: [] }, default_rules: { rules: [] } };
}

type Path = (string | number)[];

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const RULE_FIELDS = new Set([
  'name',
  'description',
  'action',
  'characteristics',
  'match',
  'limit',
  'period_s',
  'count_distinct',
  'ban_for_s',
  'on_store_error',
]);

/**
 * Validates one rule; returns it normalized (match/characteristics present) or undefined, pushing
 * every problem found. `properties`, when given, is the limiter's available_properties
 * (the cross-document check of spec 2.8.2).
 */
export function validateRule(
  value: unknown,
  path: Path,
  problems: RuleProblem[],
  properties?: ReadonlySet<string>,
  limitRulesCountBy: readonly string[] = [],
): RuleSpec | undefined {
  if (!isPlainObject(value)) {
    problems.push({ path, message: 'a rule must be a mapping' });
    return undefined;
  }
  const start = problems.length;
  const rawName = value.name;
  const ruleName = typeof rawName === 'string' ? rawName : undefined;
  const problem = (key: string | undefined, message: string) =>
    problems.push({ path: key === undefined ? path : [...path, key], message, rule: ruleName });
  for (const key of Object.keys(value)) if (!RULE_FIELDS.has(key)) problem(key, `unknown field ${quoted(key)}`);
  if (typeof rawName !== 'string')
    problem(rawName === undefined ? undefined : 'name', 'name is required (a string matching ^[a-z0-9_]{1,64}$)');
  else if (!NAME_PATTERN.test(rawName)) problem('name', `name must match ^[a-z0-9_]{1,64}$, got ${quoted(rawName)}`);
  if (value.description !== undefined && typeof value.description !== 'string')
    problem('description', 'description must be a string');
  const action = value.action;
  if (action === undefined) problem(undefined, 'action is required (limit, log or skip)');
  else if (!ACTIONS.includes(action as Action))
    problem('action', `action must be one of limit, log, skip; got ${quoted(action)}`);

  const checkProperty = (name: unknown, where: Path, what: string): name is string => {
    if (typeof name !== 'string' || !PROPERTY_PATTERN.test(name)) {
      problems.push({
        path: where,
        message: `${what} must be a property name, got ${quoted(name)}`,
        rule: ruleName,
      });
      return false;
    }
    if (properties && !properties.has(name)) {
      problems.push({
        path: where,
        message: `${what} ${quoted(name)} is not an available property of this limiter (available: ${[...properties].join(', ') || 'none'})`,
        rule: ruleName,
      });
      return false;
    }
    return true;
  };

  const characteristics: string[] = [];
  if (value.characteristics !== undefined) {
    if (!Array.isArray(value.characteristics))
      problem('characteristics', 'characteristics must be a list of property names');
    else
      value.characteristics.forEach((c, i) => {
        if (checkProperty(c, [...path, 'characteristics', i], 'characteristic')) {
          if (characteristics.includes(c))
            problems.push({
              path: [...path, 'characteristics', i],
              message: `characteristic ${quoted(c)} is listed twice`,
              rule: ruleName,
            });
          else characteristics.push(c);
        }
      });
  }

  // A limit rule counted without these is one counter, and one ban, for every client (LimiterSpec).
  const listed: unknown[] | undefined =
    value.characteristics === undefined ? [] : Array.isArray(value.characteristics) ? value.characteristics : undefined;
  const uncounted = action === 'limit' && listed ? limitRulesCountBy.filter((p) => !listed.includes(p)) : [];
  if (uncounted.length > 0)
    problem(
      'characteristics',
      `a limit rule of this limiter must count by ${uncounted.map((p) => quoted(p)).join(', ')} (characteristics: [${limitRulesCountBy.join(', ')}]): without it one counter, and its ban, is every client's, so one client's failures would lock all the others out`,
    );

  const match: Record<string, MatchValue> = {};
  if (value.match !== undefined && value.match !== null) {
    if (!isPlainObject(value.match)) problem('match', 'match must be a mapping of property → value or { regex: "…" }');
    else
      for (const [key, raw] of Object.entries(value.match)) {
        const where = [...path, 'match', key];
        if (!checkProperty(key, where, 'match property')) continue;
        if (typeof raw === 'string') match[key] = raw;
        else if (typeof raw === 'number' || typeof raw === 'boolean') match[key] = String(raw);
        else if (isPlainObject(raw) && Object.keys(raw).length === 1 && typeof raw.regex === 'string') {
          try {
            compileRuleRegex(raw.regex);
            match[key] = { regex: raw.regex };
          } catch (err) {
            problems.push({
              path: [...where, 'regex'],
              message: `invalid regular expression: ${(err as Error).message}`,
              rule: ruleName,
            });
          }
        } else
          problems.push({
            path: where,
            message: 'a match value must be a string (equality) or { regex: "…" }',
            rule: ruleName,
          });
      }
  }

  const positiveInt = (key: 'limit' | 'period_s' | 'ban_for_s', min: number, max: number): number | undefined => {
    const raw = value[key];
    if (raw === undefined || raw === null) return undefined;
    if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < min || raw > max) {
      problem(key, `${key} must be an integer from ${min} to ${max}, got ${quoted(raw)}`);
      return undefined;
    }
    return raw;
  };
  const limit = positiveInt('limit', 0, MAX_LIMIT);
  const periodS = positiveInt('period_s', 1, MAX_SECONDS);
  const banForS = positiveInt('ban_for_s', 1, MAX_SECONDS);
  let countDistinct: string | undefined;
  if (value.count_distinct !== undefined && value.count_distinct !== '') {
    if (checkProperty(value.count_distinct, [...path, 'count_distinct'], 'count_distinct'))
      countDistinct = value.count_distinct;
  }
  const hasLimit = value.limit !== undefined && value.limit !== null;
  const hasPeriod = value.period_s !== undefined && value.period_s !== null;
  const hasBan = value.ban_for_s !== undefined && value.ban_for_s !== null;
  if ((action === 'limit' || action === 'log') && (!hasLimit || !hasPeriod))
    problem(undefined, 'limit and log rules require limit and period_s');
  if (hasBan && countDistinct !== undefined) problem('ban_for_s', 'ban_for_s cannot be combined with count_distinct');
  if (hasBan && action === 'skip') problem('ban_for_s', 'ban_for_s is not valid on skip rules');
  const onStoreError = value.on_store_error;
  if (onStoreError !== undefined && !STORE_ERROR_ACTIONS.includes(onStoreError as StoreErrorAction))
    problem('on_store_error', `on_store_error must be allow or deny; got ${quoted(onStoreError)}`);
  // Only a limit rule blocks; a log or skip rule that denied on a store failure would block what it never blocks.
  else if (onStoreError === 'deny' && action !== 'limit')
    problem('on_store_error', 'on_store_error: deny is valid on limit rules only');
  if (problems.length > start) return undefined;
  const spec: RuleSpec = { name: rawName as string, action: action as Action, characteristics, match };
  if (typeof value.description === 'string') spec.description = value.description;
  if (limit !== undefined) spec.limit = limit;
  if (periodS !== undefined) spec.period_s = periodS;
  if (countDistinct !== undefined) spec.count_distinct = countDistinct;
  if (banForS !== undefined) spec.ban_for_s = banForS;
  if (onStoreError !== undefined) spec.on_store_error = onStoreError as StoreErrorAction;
  return spec;
}

/** A list of rules (`[rule, …]` or `{ rules: [rule, …] }`), names unique within it. */
export function validateRuleList(
  value: unknown,
  path: Path,
  problems: RuleProblem[],
  properties?: ReadonlySet<string>,
  limitRulesCountBy?: readonly string[],
): RuleSpec[] {
  let list: unknown = value;
  let listPath = path;
  if (isPlainObject(value)) {
    const extra = Object.keys(value).filter((k) => k !== 'rules');
    for (const k of extra)
      problems.push({
        path: [...path, k],
        message: `unknown field ${quoted(k)} (a rule list is a list, or { rules: [...] })`,
      });
    list = value.rules ?? [];
    listPath = [...path, 'rules'];
  }
  if (list === null || list === undefined) return [];
  if (!Array.isArray(list)) {
    problems.push({ path: listPath, message: 'expected a list of rules' });
    return [];
  }
  const out: RuleSpec[] = [];
  const seen = new Map<string, number>();
  list.forEach((item, i) => {
    const rule = validateRule(item, [...listPath, i], problems, properties, limitRulesCountBy);
    const name = isPlainObject(item) && typeof item.name === 'string' ? item.name : undefined;
    if (name !== undefined) {
      const first = seen.get(name);
      if (first !== undefined)
        problems.push({
          path: [...listPath, i, 'name'],
          message: `rule name ${quoted(name)} is already used by rule ${first} of this limiter; names must be unique per limiter`,
          rule: name,
        });
      else seen.set(name, i);
    }
    if (rule) out.push(rule);
  });
  return out;
}

/** Parses `available_limiters.yaml` content (already YAML-decoded). */
export function validateAvailableLimiters(doc: unknown): {
  available: Map<string, LimiterSpec>;
  problems: RuleProblem[];
} {
  const problems: RuleProblem[] = [];
  const available = new Map<string, LimiterSpec>();
  if (!isPlainObject(doc) || !isPlainObject(doc.available_limiters)) {
    problems.push({
      path: isPlainObject(doc) ? ['available_limiters'] : [],
      message: 'expected a mapping `available_limiters: { <limiter>: {...} }`',
    });
    return { available, problems };
  }
  for (const k of Object.keys(doc))
    if (k !== 'available_limiters') problems.push({ path: [k], message: `unknown top-level key ${quoted(k)}` });
  const entries = Object.entries(doc.available_limiters);
  if (entries.length === 0)
    problems.push({ path: ['available_limiters'], message: 'at least one limiter is required' });
  for (const [name, raw] of entries) {
    const path = ['available_limiters', name];
    if (!NAME_PATTERN.test(name)) problems.push({ path, message: `limiter name must match ^[a-z0-9_]{1,64}$` });
    if (!isPlainObject(raw)) {
      problems.push({
        path,
        message: 'a limiter must be a mapping with description, available_properties and default_rules',
      });
      continue;
    }
    for (const k of Object.keys(raw))
      if (!['description', 'available_properties', 'default_rules', 'limit_rules_count_by'].includes(k))
        problems.push({ path: [...path, k], message: `unknown field ${quoted(k)}` });
    if (typeof raw.description !== 'string' || raw.description.length === 0)
      problems.push({ path: [...path, 'description'], message: 'description is required' });
    const props: string[] = [];
    if (raw.available_properties !== undefined) {
      if (!Array.isArray(raw.available_properties))
        problems.push({ path: [...path, 'available_properties'], message: 'available_properties must be a list' });
      else
        raw.available_properties.forEach((p, i) => {
          if (typeof p !== 'string' || !PROPERTY_PATTERN.test(p))
            problems.push({
              path: [...path, 'available_properties', i],
              message: `invalid property name ${quoted(p)}`,
            });
          else props.push(p);
        });
    }
    const countBy: string[] = [];
    if (raw.limit_rules_count_by !== undefined) {
      if (!Array.isArray(raw.limit_rules_count_by))
        problems.push({ path: [...path, 'limit_rules_count_by'], message: 'limit_rules_count_by must be a list' });
      else
        raw.limit_rules_count_by.forEach((p, i) => {
          if (typeof p !== 'string' || !props.includes(p))
            problems.push({
              path: [...path, 'limit_rules_count_by', i],
              message: `limit_rules_count_by ${quoted(p)} is not an available property of this limiter`,
            });
          else countBy.push(p);
        });
    }
    const defaults = validateRuleList(
      raw.default_rules ?? [],
      [...path, 'default_rules'],
      problems,
      new Set(props),
      countBy,
    );
    available.set(name, {
      description: typeof raw.description === 'string' ? raw.description : '',
      available_properties: props,
      default_rules: defaults,
      ...(countBy.length > 0 ? { limit_rules_count_by: countBy } : {}),
    });
  }
  return { available, problems };
}

/**
 * Validates a map limiter → rules: the operator file (`rate_limits:` root) and the publish payload
 * (`PublishRulesRequest`, same shape). Limiters must exist; rules may use only available properties.
 */
export function validateRateLimits(
  doc: unknown,
  available: AvailableLimiters,
): { rateLimits: Map<string, RuleSpec[]>; problems: RuleProblem[] } {
  const problems: RuleProblem[] = [];
  const rateLimits = new Map<string, RuleSpec[]>();
  if (doc === null || doc === undefined) return { rateLimits, problems };
  if (!isPlainObject(doc)) {
    problems.push({ path: [], message: 'expected a mapping with the key rate_limits' });
    return { rateLimits, problems };
  }
  for (const k of Object.keys(doc))
    if (k !== 'rate_limits')
      problems.push({ path: [k], message: `unknown top-level key ${quoted(k)} (expected rate_limits)` });
  const map = doc.rate_limits;
  if (map === undefined || map === null) return { rateLimits, problems };
  if (!isPlainObject(map)) {
    problems.push({ path: ['rate_limits'], message: 'rate_limits must be a mapping of limiter → rules' });
    return { rateLimits, problems };
  }
  for (const [limiter, list] of Object.entries(map)) {
    const path = ['rate_limits', limiter];
    if (!NAME_PATTERN.test(limiter)) {
      problems.push({ path, message: 'limiter name must match ^[a-z0-9_]{1,64}$' });
      continue;
    }
    const spec = available.get(limiter);
    if (!spec) {
      problems.push({
        path,
        message: `unknown limiter ${quoted(limiter)} (available: ${[...available.keys()].join(', ')})`,
      });
      continue;
    }
    rateLimits.set(
      limiter,
      validateRuleList(list, path, problems, new Set(spec.available_properties), spec.limit_rules_count_by),
    );
  }
  return { rateLimits, problems };
}

/** Validates a stored `LimiterRules` document (what another process, or a person, wrote). */
export function validateLimiterDocument(
  doc: unknown,
  limiter: string,
  available: AvailableLimiters,
): { document: LimiterRules | undefined; problems: RuleProblem[] } {
  const problems: RuleProblem[] = [];
  const spec = available.get(limiter);
  if (!spec) return { document: undefined, problems: [{ path: [], message: `unknown limiter ${quoted(limiter)}` }] };
  if (!isPlainObject(doc))
    return { document: undefined, problems: [{ path: [], message: 'a limiter document must be a mapping of tiers' }] };
  for (const k of Object.keys(doc))
    if (!(TIERS as readonly string[]).includes(k)) problems.push({ path: [k], message: `unknown tier ${quoted(k)}` });
  const props = new Set(spec.available_properties);
  const document = emptyDocument();
  for (const tier of TIERS)
    document[tier].rules = validateRuleList(
      doc[tier] ?? { rules: [] },
      [tier],
      problems,
      props,
      spec.limit_rules_count_by,
    );
  return { document: problems.length ? undefined : document, problems };
}

/** One effective rule and the tier it came from. */
export interface TieredRule {
  readonly tier: Tier;
  readonly spec: RuleSpec;
}

/**
 * Spec 2.5: concatenate file > published > default; a name already supplied by a higher tier
 * excludes the lower rule (the higher one inherits its counter, since the name is in the key).
 */
export function mergeTiers(doc: LimiterRules): TieredRule[] {
  const out: TieredRule[] = [];
  const seen = new Set<string>();
  for (const tier of TIERS) {
    for (const spec of doc[tier].rules) {
      if (seen.has(spec.name)) continue;
      seen.add(spec.name);
      out.push({ tier, spec });
    }
  }
  return out;
}

/** Within one tier: add new names at the end, replace same names in place (spec 2.5 publish). */
export function upsertRules(existing: readonly RuleSpec[], incoming: readonly RuleSpec[]): RuleSpec[] {
  const out = [...existing];
  for (const rule of incoming) {
    const i = out.findIndex((r) => r.name === rule.name);
    if (i === -1) out.push(rule);
    else out[i] = rule;
  }
  return out;
}

export function ruleFromSpec(spec: RuleSpec): Rule {
  return {
    name: spec.name,
    action: spec.action,
    description: spec.description,
    match: spec.match ?? {},
    characteristics: spec.characteristics ?? [],
    limit: spec.limit,
    periodS: spec.period_s,
    countDistinct: spec.count_distinct,
    banForS: spec.ban_for_s,
    onStoreError: spec.on_store_error,
  };
}

export function specFromRule(rule: Rule): RuleSpec {
  const spec: RuleSpec = {
    name: rule.name,
    action: rule.action,
    characteristics: [...rule.characteristics],
    match: { ...rule.match },
  };
  if (rule.description !== undefined) spec.description = rule.description;
  if (typeof rule.limit === 'number') spec.limit = rule.limit;
  if (typeof rule.periodS === 'number') spec.period_s = rule.periodS;
  if (rule.countDistinct !== undefined) spec.count_distinct = rule.countDistinct;
  if (rule.banForS !== undefined) spec.ban_for_s = rule.banForS;
  if (rule.onStoreError !== undefined) spec.on_store_error = rule.onStoreError;
  return spec;
}

/**
 * Builds a rule in code (spec 1.2/1.7). The same checks as the file apply; callables for
 * `limit`/`periodS` are checked when resolved.
 */
export function defineRule(input: {
  name: string;
  action: Action;
  description?: string;
  match?: Record<string, MatchValue>;
  characteristics?: string[];
  limit?: Resolvable;
  periodS?: Resolvable;
  countDistinct?: string;
  banForS?: number;
  onStoreError?: StoreErrorAction;
}): Rule {
  const problems: RuleProblem[] = [];
  const probe: Record<string, unknown> = {
    name: input.name,
    action: input.action,
    match: input.match,
    characteristics: input.characteristics,
    limit: typeof input.limit === 'function' ? 0 : input.limit,
    period_s: typeof input.periodS === 'function' ? 1 : input.periodS,
    count_distinct: input.countDistinct,
    ban_for_s: input.banForS,
    on_store_error: input.onStoreError,
  };
  if (input.description !== undefined) probe.description = input.description;
  const spec = validateRule(probe, [], problems);
  if (!spec) throw new RateLimitError('invalid_rules', problems.map((p) => p.message).join('; '), { problems });
  return { ...ruleFromSpec(spec), limit: input.limit, periodS: input.periodS };
}

/** Throws `invalid_rules` listing every problem when `problems` is not empty. */
export function assertNoProblems(problems: readonly RuleProblem[], what: string): void {
  if (problems.length)
    throw new RateLimitError('invalid_rules', `${what}: ${problems.length} problem(s)`, { problems });
}
