/**
 * The reference rules service's data (Phase 3, spec 3.1–3.3): rule overrides per principal and per
 * repository, scoped by calling service and limiter, in PostgreSQL (migration 0007). Validation is
 * the one rule schema (rules.ts) against the limiter's available properties; answers follow
 * rules-answer.ts. `answerFor` is pure; the store is the I/O edge.
 */
import { quoted } from '../../lib/quoted.ts';
import { jsonbText } from '../../lib/jsonb-text.ts';
import { withTransaction } from '../../lib/transaction.ts';
import { JsonTooDeepError, MAX_JSON_DEPTH, parseBoundedJson } from '../../lib/bounded-json.ts';
import type pg from 'pg';
import { CURSORS, decodeCursor, type Page, type PageRequest, pageLimit, pageOf } from '../auth/page.ts';
import { bypassesIn, describeBypass } from './document-changes.ts';
import type { RuleProblem } from './errors.ts';
import { valueOf, type Identifier } from './match.ts';
import { ruleWriteFailure } from './pg-rule-documents.ts';
import type { RulesAnswer } from './rules-answer.ts';
import { MAX_ANSWER_RULES, SERVICE_NAME_PATTERN } from './rules-answer.ts';
import { NAME_PATTERN, validateRuleList, type AvailableLimiters, type RuleSpec } from './rules.ts';

/** What an override is keyed by, in precedence order: a principal's override beats its repository's. */
export const SUBJECT_KINDS = ['principal', 'repository'] as const;
export type SubjectKind = (typeof SUBJECT_KINDS)[number];

/** Rules in one override at most: an answer joins one override per kind, and gateways take no more than MAX_ANSWER_RULES. */
export const MAX_OVERRIDE_RULES = Math.floor(MAX_ANSWER_RULES / SUBJECT_KINDS.length);

export interface OverrideKey {
  service: string;
  limiter: string;
  subjectKind: SubjectKind;
  subject: string;
}

export interface RuleOverride extends OverrideKey {
  rules: RuleSpec[];
  updatedAt?: string;
}

/** Checks the key (and, when given, the rules) of an override; every problem is listed. */
export function validateOverride(
  input: { service: unknown; limiter: unknown; subjectKind: unknown; subject: unknown; rules?: unknown },
  available: AvailableLimiters,
): { override: RuleOverride | undefined; problems: RuleProblem[] } {
  const problems: RuleProblem[] = [];
  const { service, limiter, subjectKind, subject } = input;
  if (typeof service !== 'string' || !SERVICE_NAME_PATTERN.test(service))
    problems.push({
      path: ['service'],
      message: `service must match ${SERVICE_NAME_PATTERN.source}, got ${quoted(service)}`,
    });
  const spec = typeof limiter === 'string' && NAME_PATTERN.test(limiter) ? available.get(limiter) : undefined;
  if (!spec)
    problems.push({
      path: ['limiter'],
      message: `unknown limiter ${quoted(limiter)} (available: ${[...available.keys()].join(', ')})`,
    });
  if (!SUBJECT_KINDS.includes(subjectKind as SubjectKind))
    problems.push({
      path: ['subject_kind'],
      message: `subject kind must be one of ${SUBJECT_KINDS.join(', ')}, got ${quoted(subjectKind)}`,
    });
  else if (spec && !spec.available_properties.includes(subjectKind as string))
    problems.push({
      path: ['subject_kind'],
      message: `limiter "${limiter as string}" has no property ${quoted(subjectKind as string)} (available: ${spec.available_properties.join(', ') || 'none'})`,
    });
  if (typeof subject !== 'string' || subject.length < 1 || subject.length > 256 || subject.includes('\0'))
    problems.push({ path: ['subject'], message: 'subject must be a string of 1 to 256 characters' });
  let rules: RuleSpec[] = [];
  if (input.rules !== undefined && spec)
    rules = validateRuleList(
      input.rules,
      ['rules'],
      problems,
      new Set(spec.available_properties),
      spec.limit_rules_count_by,
    );
  // A counter is keyed by rule name and characteristic values only (keys.ts), not by the override
  // that served the rule: a limit rule not counting by its subject would share one counter with every
  // other subject whose override holds a rule of that name (one file set for many customers), so one
  // customer's traffic would lock the others out. `log` and `skip` rules block nothing.
  if (SUBJECT_KINDS.includes(subjectKind as SubjectKind))
    rules.forEach((rule, i) => {
      if (rule.action === 'limit' && !(rule.characteristics ?? []).includes(subjectKind as string))
        problems.push({
          path: ['rules', i, 'characteristics'],
          message: `rule "${rule.name}": a limit rule in a ${subjectKind as string} override must count by ${subjectKind as string} (add it to characteristics), or its counter is shared with every other ${subjectKind as string} whose override has a rule of this name`,
        });
    });
  if (rules.length > MAX_OVERRIDE_RULES)
    problems.push({
      path: ['rules'],
      message: `at most ${MAX_OVERRIDE_RULES} rules per override, got ${rules.length}`,
    });
  if (problems.length) return { override: undefined, problems };
  return {
    override: {
      service: service as string,
      limiter: limiter as string,
      subjectKind: subjectKind as SubjectKind,
      subject: subject as string,
      rules,
    },
    problems,
  };
}

/**
 * Spec 2.1 for overrides: what in `override` bypasses its limiter, one line each (empty: nothing).
 * An override's rule replaces the rule of its name on the gateways it reaches, so besides a `skip`
 * one named like a shipped default rule (available_limiters.yaml) but weaker is a bypass too: a
 * `limit_requests_by_principal` with `action: log` lifts the principal's cap. The rules service
 * sees the shipped defaults only: the gateways' file and published tiers are not its to compare.
 */
export function overrideBypasses(override: RuleOverride, available: AvailableLimiters): string[] {
  return bypassesIn(override.rules, available.get(override.limiter)?.default_rules ?? []).map((b) => describeBypass(b));
}

/**
 * The answer for one identifier. `kinds` are the subject kinds that have any override for this
 * service and limiter: the answer depends on exactly those properties (so it is cached per
 * principal only when principal overrides exist, and once for everyone when none do).
 */
export function answerFor(
  kinds: ReadonlySet<SubjectKind>,
  matching: ReadonlyMap<SubjectKind, RuleSpec[]>,
  ttlS: number,
): RulesAnswer {
  const rules: RuleSpec[] = [];
  const seen = new Set<string>();
  for (const kind of SUBJECT_KINDS) {
    for (const rule of matching.get(kind) ?? []) {
      if (seen.has(rule.name)) continue; // the principal's rule of that name wins
      seen.add(rule.name);
      rules.push(rule);
    }
  }
  return { rules, ttl_s: ttlS, varies_by: SUBJECT_KINDS.filter((k) => kinds.has(k)) };
}

/**
 * The rules of a stored override (`text`: its `rules` column as written), read back within
 * MAX_JSON_DEPTH: a row written into PostgreSQL by hand skipped the service's checks, and one nested
 * thousands of levels deep answered every query it matched 500. Such rules are no rules (`undefined`,
 * with why). Rules that read back but break the schema are passed on: every gateway validates the
 * answer and falls back to its local rules (remote-rules.ts), as for any malformed answer.
 */
export function storedOverrideRules(text: string): { rules: RuleSpec[] | undefined; problem?: string } {
  try {
    return { rules: parseBoundedJson(text) as RuleSpec[] };
  } catch (err) {
    return {
      rules: undefined,
      problem:
        err instanceof JsonTooDeepError
          ? `the stored rules nest deeper than ${MAX_JSON_DEPTH} levels`
          : 'the stored rules are not JSON',
    };
  }
}

/**
 * An override as listed: one whose stored rules cannot be read back (a row written by hand, nested
 * deeper than MAX_JSON_DEPTH) is listed with `rules: null` and why, so that it can be found and removed.
 */
export interface ListedOverride extends OverrideKey {
  rules: RuleSpec[] | null;
  unreadable?: string;
  updatedAt?: string;
}

export interface OverrideStore {
  put(override: RuleOverride): Promise<RuleOverride>;
  /** False when there was no such override. */
  remove(key: OverrideKey): Promise<boolean>;
  /**
   * One page of overrides (optionally of one service and/or limiter), by service, limiter, subject
   * kind and subject: the table's key, so a page costs the same wherever it starts. A bad `limit`
   * or a cursor this listing did not give is `invalid_request` (policy/auth/page.ts).
   */
  list(filter?: { service?: string; limiter?: string }, page?: PageRequest): Promise<Page<ListedOverride>>;
  /**
   * One round trip: the subject kinds in use for (service, limiter) and this identifier's overrides,
   * by kind: their subject and their rules as stored (JSON text, for `storedOverrideRules`).
   */
  lookup(
    service: string,
    limiter: string,
    identifier: Identifier,
  ): Promise<{ kinds: Set<SubjectKind>; stored: Map<SubjectKind, { subject: string; text: string }> }>;
}

interface Row {
  service: string;
  limiter: string;
  subject_kind: SubjectKind;
  subject: string;
  /** As text: pg would JSON.parse it, however deep a hand-written row nests. */
  rules: string;
  updated_at: Date;
}

const COLUMNS = 'service, limiter, subject_kind, subject, rules::text AS rules, updated_at';

const fromRow = (r: Row): ListedOverride => {
  const key = { service: r.service, limiter: r.limiter, subjectKind: r.subject_kind, subject: r.subject };
  const updatedAt = r.updated_at.toISOString();
  const { rules, problem } = storedOverrideRules(r.rules);
  return rules ? { ...key, rules, updatedAt } : { ...key, rules: null, unreadable: problem!, updatedAt };
};

/**
 * One override write in a transaction of its own, so that its failure says what was written, as a
 * rule document's does (pg-rule-documents.ts): `store_unavailable` when nothing was (cut or refused
 * before the COMMIT), `store_outcome_unknown` when the connection was lost while the COMMIT was under
 * way. A single autocommit statement cannot tell the two apart.
 */
async function overrideWrite<T>(pool: pg.Pool, statement: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  let committing = false;
  try {
    return await withTransaction(pool, async (client) => {
      const result = await statement(client);
      committing = true;
      return result;
    });
  } catch (err) {
    throw ruleWriteFailure(err, committing);
  }
}

export function createOverrideStore(pool: pg.Pool): OverrideStore {
  return {
    async put(o) {
      const row = await overrideWrite(pool, (client) =>
        client.query<Row>(
          `INSERT INTO arkvory_rule_overrides (service, limiter, subject_kind, subject, rules) VALUES ($1, $2, $3, $4, $5::jsonb)
           ON CONFLICT (service, limiter, subject_kind, subject) DO UPDATE SET rules = EXCLUDED.rules, updated_at = now()
           RETURNING ${COLUMNS}`,
          // The rules' descriptions are a caller's free text: half a surrogate pair in them is no 500.
          [o.service, o.limiter, o.subjectKind, o.subject, jsonbText(o.rules)],
        ),
      );
      // As stored (jsonbText may have replaced half a surrogate pair); just validated, so readable.
      const stored = fromRow(row.rows[0]!);
      return { ...o, rules: stored.rules ?? o.rules, updatedAt: stored.updatedAt! };
    },
    async remove(k) {
      const { rowCount } = await overrideWrite(pool, (client) =>
        client.query(
          'DELETE FROM arkvory_rule_overrides WHERE service = $1 AND limiter = $2 AND subject_kind = $3 AND subject = $4',
          [k.service, k.limiter, k.subjectKind, k.subject],
        ),
      );
      return (rowCount ?? 0) > 0;
    },
    async list(filter = {}, page = {}) {
      const limit = pageLimit(page.limit);
      const after = decodeCursor(page.cursor, CURSORS.ruleOverrides);
      const { rows } = await pool.query<Row>(
        `SELECT ${COLUMNS} FROM arkvory_rule_overrides
         WHERE ($1::text IS NULL OR service = $1) AND ($2::text IS NULL OR limiter = $2)
           AND ($3::text IS NULL OR (service, limiter, subject_kind, subject) > ($3::text, $4::text, $5::text, $6::text))
         ORDER BY service, limiter, subject_kind, subject LIMIT $7`,
        [filter.service ?? null, filter.limiter ?? null, ...(after ?? [null, null, null, null]), limit + 1],
      );
      return pageOf(rows.map(fromRow), limit, CURSORS.ruleOverrides, (o) => [
        o.service,
        o.limiter,
        o.subjectKind,
        o.subject,
      ]);
    },
    async lookup(service, limiter, identifier) {
      // As text: pg would JSON.parse it, however deep a hand-written row nests.
      const { rows } = await pool.query<{ subject_kind: SubjectKind; subject: string | null; rules: string | null }>(
        `SELECT k.subject_kind, o.subject, o.rules::text AS rules
           FROM (SELECT DISTINCT subject_kind FROM arkvory_rule_overrides WHERE service = $1 AND limiter = $2) k
           LEFT JOIN arkvory_rule_overrides o
             ON o.service = $1 AND o.limiter = $2 AND o.subject_kind = k.subject_kind
            AND o.subject = CASE k.subject_kind WHEN 'principal' THEN $3::text ELSE $4::text END`,
        [service, limiter, valueOf(identifier, 'principal') ?? null, valueOf(identifier, 'repository') ?? null],
      );
      const kinds = new Set<SubjectKind>();
      const stored = new Map<SubjectKind, { subject: string; text: string }>();
      for (const r of rows) {
        kinds.add(r.subject_kind);
        if (r.rules !== null && r.subject !== null) stored.set(r.subject_kind, { subject: r.subject, text: r.rules });
      }
      return { kinds, stored };
    },
  };
}
