/**
 * Rule sources and precedence (spec 2.4–2.6): one `LimiterRules` document per limiter with the tiers
 * file > published > default; each writer replaces only its own tier. Each process holds a replica
 * refreshed on an interval, keeps serving it when a refresh fails, and falls back to the compiled
 * defaults (plus its own file) for a limiter it never read. Orphaned documents are collected only
 * after a grace window, and never without the limiter list.
 *
 * Phase 3 seam: a `RuleProvider` (per-request rules from a remote service) is consulted by the
 * limiter before these tiers; see rule-provider.ts.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import { RateLimitError, formatProblem, type RuleProblem } from './errors.ts';
import type { RuleDocumentStore } from './rule-documents.ts';
import {
  TIERS,
  assertNoProblems,
  emptyDocument,
  mergeTiers,
  ruleFromSpec,
  upsertRules,
  validateLimiterDocument,
  validateRateLimits,
  type AvailableLimiters,
  type LimiterRules,
  type Rule,
  type RuleSpec,
  type Tier,
  type TieredRule,
} from './rules.ts';
import { withTimeout } from './timeout.ts';

export interface RuleRegistryDeps {
  /** The document store; undefined means compiled defaults + file only, publishing refused. */
  documents: RuleDocumentStore | undefined;
  /** Parsed available_limiters.yaml; undefined if it could not be read (then no orphan GC). */
  available: AvailableLimiters;
  /** The operator file's rules (already validated), per limiter. */
  fileRules: ReadonlyMap<string, RuleSpec[]>;
  /**
   * `false` when this process's operator file was invalid: seeding then leaves the stored file tier
   * as it is (the last good file of the fleet) instead of replacing it with nothing. Default true.
   */
  replaceFileTier?: boolean;
  clock: Clock;
  log: Logger;
  refreshIntervalMs?: number;
  /** Orphaned documents are deleted only this long after first seen. Default 7 days. */
  orphanGraceMs?: number;
  /** Longest one document-store call may take. Default 2 s. */
  timeoutMs?: number;
}

export type ReplicaSource = 'store' | 'compiled';

export interface LimiterView {
  limiter: string;
  /** Where the process's current rules for this limiter come from. */
  source: ReplicaSource;
  tiers: LimiterRules;
  /** The rules in evaluation order, each with its tier. */
  effective: TieredRule[];
}

export interface RuleRegistry {
  /** Seeds the file and default tiers, collects orphans, reads the replica, starts the refresh timer. Never throws for store failures. */
  start(): Promise<void>;
  stop(): void;
  /** Re-reads every limiter's document; false when the store failed (the replica is kept). */
  refresh(): Promise<boolean>;
  /** Current rules of a limiter, in evaluation order (hot path: no I/O). */
  rules(limiter: string): readonly Rule[];
  /**
   * Validates the batch (limiter → rules), then applies it atomically to the published tier. With
   * `allowSkip: false` a batch holding a `skip` rule is refused whole with `bypass_not_allowed`
   * (spec 2.1: guardrails on who may add bypasses). Default true (the operator's CLI).
   */
  publish(batch: unknown, options?: { allowSkip?: boolean }): Promise<{ limiters: string[]; rules: number }>;
  /** Deletes one published rule; `unknown_rule` if the published tier has no such rule. */
  unpublish(limiter: string, rule: string): Promise<void>;
  /** Tiers and effective rules as this process sees them after a fresh read (or its replica). */
  show(limiter?: string): Promise<LimiterView[]>;
  /** Marks new orphans, sweeps ones older than the grace window; returns what it did. */
  collectOrphans(): Promise<{ marked: string[]; swept: string[] }>;
  readonly limiters: readonly string[];
  status(): {
    documents: string;
    seeded: boolean;
    lastRefreshOkMs: number | undefined;
    lastRefreshError: string | undefined;
    sources: Record<string, ReplicaSource>;
  };
}

interface ReplicaEntry {
  source: ReplicaSource;
  document: LimiterRules;
  json: string;
  rules: readonly Rule[];
}

export function createRuleRegistry(deps: RuleRegistryDeps): RuleRegistry {
  const { documents, available, fileRules, clock, log } = deps;
  const refreshIntervalMs = deps.refreshIntervalMs ?? 5000;
  const orphanGraceMs = deps.orphanGraceMs ?? 7 * 24 * 3600 * 1000;
  const timeoutMs = deps.timeoutMs ?? 2000;
  const limiters = [...available.keys()];
  const replica = new Map<string, ReplicaEntry>();
  let seeded = false;
  let timer: NodeJS.Timeout | undefined;
  let lastRefreshOkMs: number | undefined;
  let lastRefreshError: string | undefined;
  let refreshing: Promise<boolean> | undefined;

  const compiledDocument = (limiter: string): LimiterRules => {
    const doc = emptyDocument();
    doc.file_rules.rules = [...(fileRules.get(limiter) ?? [])];
    doc.default_rules.rules = [...(available.get(limiter)?.default_rules ?? [])];
    return doc;
  };
  const install = (limiter: string, source: ReplicaSource, document: LimiterRules) => {
    const json = JSON.stringify(document);
    const current = replica.get(limiter);
    if (current && current.json === json && current.source === source) return;
    replica.set(limiter, { source, document, json, rules: mergeTiers(document).map((t) => ruleFromSpec(t.spec)) });
    if (current)
      log.info(
        { limiter, source, rules: mergeTiers(document).map((t) => `${t.tier}:${t.spec.name}`) },
        'rate-limit rules changed',
      );
  };
  for (const l of limiters) install(l, 'compiled', compiledDocument(l));

  const requireDocuments = (): RuleDocumentStore => {
    if (!documents)
      throw new RateLimitError(
        'store_unavailable',
        'no rule store is configured (set ARKVORY_REDIS_URL or use the PostgreSQL database)',
      );
    return documents;
  };

  /** Validates a stored document; an invalid one is logged with every problem and ignored. */
  const accept = (limiter: string, raw: unknown): LimiterRules | undefined => {
    const { document, problems } = validateLimiterDocument(raw, limiter, available);
    if (!document) {
      log.error(
        { limiter, code: 'invalid_rules', problems: problems.map(formatProblem) },
        'stored rate-limit document is invalid; keeping the last good rules',
      );
      return undefined;
    }
    return document;
  };

  const seed = async (): Promise<void> => {
    const store = requireDocuments();
    await withTimeout(
      store.update(limiters, (current) => {
        const next = new Map<string, LimiterRules>();
        for (const limiter of limiters) {
          const raw = current.get(limiter);
          const file = fileRules.get(limiter) ?? [];
          const defaults = available.get(limiter)?.default_rules ?? [];
          if (raw === undefined && file.length === 0 && defaults.length === 0) continue;
          const existing = raw === undefined ? emptyDocument() : accept(limiter, raw);
          if (!existing) continue; // never overwrite a document we cannot read: its published tier would be lost
          const fileTier = deps.replaceFileTier === false ? existing.file_rules : { rules: [...file] };
          next.set(limiter, {
            file_rules: fileTier,
            published_rules: existing.published_rules,
            default_rules: { rules: [...defaults] },
          });
        }
        return next;
      }),
      timeoutMs,
      'the rule store',
    );
    seeded = true;
    log.info(
      {
        limiters: limiters.length,
        fileRules: [...fileRules.values()].reduce((n, r) => n + r.length, 0),
        store: store.kind,
      },
      'rate-limit file and default tiers seeded',
    );
  };

  const doRefresh = async (): Promise<boolean> => {
    if (!documents) return false;
    try {
      if (!seeded) await seed();
      const raw = await withTimeout(documents.read(limiters), timeoutMs, 'the rule store');
      for (const limiter of limiters) {
        const value = raw.get(limiter);
        if (value === undefined) {
          // No document (flushed store, or nothing to seed): the compiled defaults.
          install(limiter, 'compiled', compiledDocument(limiter));
          continue;
        }
        const document = accept(limiter, value);
        if (document) install(limiter, 'store', document);
      }
      lastRefreshOkMs = clock.wallMs();
      if (lastRefreshError) log.info({ store: documents.kind }, 'rate-limit rule store reachable again');
      lastRefreshError = undefined;
      return true;
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (lastRefreshError === undefined)
        log.warn(
          { err, code: (err as { code?: string }).code ?? 'store_unavailable' },
          'rate-limit rule refresh failed; serving the rules already held',
        );
      lastRefreshError = message;
      return false;
    }
  };

  const refresh = (): Promise<boolean> => {
    refreshing ??= doRefresh().finally(() => (refreshing = undefined));
    return refreshing;
  };

  const collectOrphans = async (): Promise<{ marked: string[]; swept: string[] }> => {
    const store = requireDocuments();
    if (available.size === 0) return { marked: [], swept: [] }; // no limiter list: never collect
    const known = new Set(limiters);
    const indexed = await withTimeout(store.listIndexed(), timeoutMs, 'the rule store');
    const marks = await withTimeout(store.readOrphanMarks(), timeoutMs, 'the rule store');
    const nowMs = clock.wallMs();
    const orphans = indexed.filter((l) => !known.has(l));
    const marked: string[] = [];
    const swept: string[] = [];
    const newMarks = new Map<string, number>();
    for (const l of orphans) {
      const first = marks.get(l);
      if (first === undefined) {
        newMarks.set(l, nowMs);
        marked.push(l);
      } else if (nowMs - first >= orphanGraceMs) swept.push(l);
    }
    const unmark = [...marks.keys()].filter((l) => known.has(l) || !indexed.includes(l));
    if (newMarks.size || unmark.length)
      await withTimeout(store.writeOrphanMarks(newMarks, unmark), timeoutMs, 'the rule store');
    if (swept.length) await withTimeout(store.remove(swept), timeoutMs, 'the rule store');
    if (marked.length || swept.length)
      log.info({ marked, swept, graceMs: orphanGraceMs }, 'rate-limit orphan documents');
    return { marked, swept };
  };

  const readViews = async (names: readonly string[]): Promise<LimiterView[]> => {
    let raw: Map<string, unknown> | undefined;
    if (documents) {
      try {
        raw = await withTimeout(documents.read(names), timeoutMs, 'the rule store');
      } catch {
        raw = undefined;
      }
    }
    return names.map((limiter) => {
      const stored = raw?.get(limiter);
      const document = stored === undefined ? undefined : validateLimiterDocument(stored, limiter, available).document;
      if (document) return { limiter, source: 'store' as const, tiers: document, effective: mergeTiers(document) };
      const entry = replica.get(limiter)!;
      return { limiter, source: entry.source, tiers: entry.document, effective: mergeTiers(entry.document) };
    });
  };

  return {
    limiters,
    async start() {
      if (!documents) {
        log.warn('no rate-limit rule store: serving the compiled defaults and the file; publishing is unavailable');
        return;
      }
      await refresh();
      if (seeded)
        await collectOrphans().catch((err: unknown) => log.warn({ err }, 'rate-limit orphan collection failed'));
      timer = setInterval(() => void refresh(), refreshIntervalMs);
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
    },
    refresh,
    rules(limiter) {
      return replica.get(limiter)?.rules ?? [];
    },
    async publish(batch, options) {
      const { rateLimits, problems } = validateRateLimits(batch, available);
      assertNoProblems(problems, 'publish');
      if (options?.allowSkip === false) {
        const bypasses: RuleProblem[] = [];
        for (const [limiter, rules] of rateLimits) {
          rules.forEach((r, i) => {
            if (r.action === 'skip')
              bypasses.push({
                path: ['rate_limits', limiter, i, 'action'],
                rule: r.name,
                message:
                  'bypass (skip) rules may be published only by the principals in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS, or deployed in the operator file',
              });
          });
        }
        if (bypasses.length)
          throw new RateLimitError(
            'bypass_not_allowed',
            `Refused: ${bypasses.map((p) => `rule "${p.rule}" in ${String(p.path[1])} is a bypass (skip) rule`).join('; ')}. Only the principals in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS may publish bypass rules; operators can also deploy them in ARKVORY_RATE_LIMITS_FILE.`,
            { problems: bypasses },
          );
      }
      const store = requireDocuments();
      const names = [...rateLimits.keys()].filter((l) => rateLimits.get(l)!.length > 0);
      await withTimeout(
        store.update(names, (current) => {
          const next = new Map<string, LimiterRules>();
          for (const limiter of names) {
            const raw = current.get(limiter);
            let doc =
              raw === undefined ? compiledDocument(limiter) : validateLimiterDocument(raw, limiter, available).document;
            if (!doc) {
              log.warn({ limiter }, 'replacing an invalid stored rate-limit document while publishing');
              doc = compiledDocument(limiter);
            }
            next.set(limiter, {
              ...doc,
              published_rules: { rules: upsertRules(doc.published_rules.rules, rateLimits.get(limiter)!) },
            });
          }
          return next;
        }),
        timeoutMs,
        'the rule store',
      );
      const count = names.reduce((n, l) => n + rateLimits.get(l)!.length, 0);
      log.info({ limiters: names, rules: count }, 'rate-limit rules published');
      await refresh();
      return { limiters: names, rules: count };
    },
    async unpublish(limiter, rule) {
      if (!available.has(limiter)) throw new RateLimitError('unknown_limiter', `unknown limiter "${limiter}"`);
      const store = requireDocuments();
      await withTimeout(
        store.update([limiter], (current) => {
          const raw = current.get(limiter);
          const doc = raw === undefined ? undefined : validateLimiterDocument(raw, limiter, available).document;
          if (!doc?.published_rules.rules.some((r) => r.name === rule))
            throw new RateLimitError('unknown_rule', `limiter "${limiter}" has no published rule "${rule}"`);
          return new Map([
            [limiter, { ...doc, published_rules: { rules: doc.published_rules.rules.filter((r) => r.name !== rule) } }],
          ]);
        }),
        timeoutMs,
        'the rule store',
      );
      log.info({ limiter, rule }, 'rate-limit rule unpublished');
      await refresh();
    },
    async show(limiter) {
      if (limiter !== undefined && !available.has(limiter))
        throw new RateLimitError('unknown_limiter', `unknown limiter "${limiter}"`);
      return readViews(limiter === undefined ? limiters : [limiter]);
    },
    collectOrphans,
    status() {
      return {
        documents: documents?.kind ?? 'none',
        seeded,
        lastRefreshOkMs,
        lastRefreshError,
        sources: Object.fromEntries([...replica].map(([l, e]) => [l, e.source])),
      };
    },
  };
}

/** For callers that only need the problems as text (CLI, startup). */
export function describeProblems(problems: readonly RuleProblem[]): string[] {
  return problems.map(formatProblem);
}

export { TIERS, type Tier };
