/**
 * Rule sources and precedence (spec 2.4–2.6): one `LimiterRules` document per limiter with the tiers
 * file > published > default; each writer replaces only its own tier. Each process holds a replica
 * refreshed on an interval, keeps serving it when a refresh fails, and falls back to the compiled
 * defaults (plus its own file) for a limiter it never read. Orphaned documents are collected only
 * after a grace window, and never without the limiter list.
 *
 * Phase 3: the rules service's answers are a tier consulted before these (remote-rules.ts; the
 * tiers are combined in rule-tiers.ts).
 */
import { quoted } from '../../lib/quoted.ts';
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import { RateLimitError, formatProblem, type RuleProblem } from './errors.ts';
import type { RuleDocumentStore } from './rule-documents.ts';
import {
  TIERS,
  assertNoProblems,
  mergeTiers,
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
import { writeWithin } from './bounded-write.ts';
import { CURSORS, decodeCursor, encodeCursor, type Page, type PageRequest, pageLimit } from '../auth/page.ts';
import { refuseBypassRules, seededDocuments, withoutPublished, withPublished } from './document-changes.ts';
import { documentBoundProblems } from './document-bounds.ts';
import { collectOrphanDocuments } from './orphan-documents.ts';
import { compiledDocument, RuleReplica, type ReplicaSource, type RulesRemoved } from './rule-replica.ts';

export type { ReplicaSource } from './rule-replica.ts';

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
  /**
   * Longest one document-store read may take. Default 2 s. A write is stopped then, and its answer
   * awaited as long again (bounded-write.ts).
   */
  timeoutMs?: number;
  /** Told when a change of this process's rules removed some of a limiter's rules (their metric series go). */
  onRulesRemoved?: RulesRemoved;
}

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
   * `allowSkip: false` a batch holding a `skip` rule, or one weakening a default rule, is refused
   * whole with `bypass_not_allowed` (spec 2.1: guardrails on who may add bypasses). Default true
   * (the operator's CLI). A batch that would take a stored document past DOCUMENT_BOUNDS is refused
   * with `rules_over_bounds` (`rules_too_large` over HTTP), whoever publishes it.
   */
  publish(batch: unknown, options?: { allowSkip?: boolean }): Promise<{ limiters: string[]; rules: number }>;
  /** Deletes one published rule; `unknown_rule` if the published tier has no such rule. */
  unpublish(limiter: string, rule: string): Promise<void>;
  /** Tiers and effective rules as this process sees them after a fresh read (or its replica). */
  show(limiter?: string): Promise<LimiterView[]>;
  /**
   * `show` one page of limiters at a time, by name (policy/auth/page.ts: `limit` 1 … 1000, default
   * 100, an opaque cursor; a bad one is `invalid_request`). Only the page's documents are read; each
   * limiter's published rules are bounded by DOCUMENT_BOUNDS.
   */
  showPage(page: PageRequest): Promise<Page<LimiterView>>;
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

/**
 * A publish adds or replaces rules by name and leaves the others be, so a batch with no rules (or a
 * limiter given an empty list) changes nothing; answered "published", it read as a clearing that
 * did not happen (a template that rendered empty, `gateway_request: []` meant to remove its rules).
 * Refused as `invalid_rules`, saying how rules are removed.
 */
function refuseEmptyBatch(rateLimits: ReadonlyMap<string, readonly RuleSpec[]>): void {
  const removal =
    'a publish adds or replaces rules by name and removes none: remove a published rule with DELETE /api/v1/admin/rate-limits/{limiter}/rules/{rule} (arkvory ratelimit unpublish)';
  const problems: RuleProblem[] = [];
  if (rateLimits.size === 0) problems.push({ path: ['rate_limits'], message: `the batch holds no rules; ${removal}` });
  for (const [limiter, rules] of rateLimits)
    if (rules.length === 0)
      problems.push({ path: ['rate_limits', limiter], message: `an empty list publishes nothing; ${removal}` });
  assertNoProblems(problems, 'publish');
}

export function createRuleRegistry(deps: RuleRegistryDeps): RuleRegistry {
  const { documents, available, fileRules, clock, log } = deps;
  const refreshIntervalMs = deps.refreshIntervalMs ?? 5000;
  const orphanGraceMs = deps.orphanGraceMs ?? 7 * 24 * 3600 * 1000;
  const timeoutMs = deps.timeoutMs ?? 2000;
  const limiters = [...available.keys()];
  const replica = new RuleReplica(log, deps.onRulesRemoved);
  let seeded = false;
  let timer: NodeJS.Timeout | undefined;
  let lastRefreshOkMs: number | undefined;
  let lastRefreshError: string | undefined;
  let refreshing: Promise<boolean> | undefined;
  let queuedRefresh: Promise<boolean> | undefined;

  const compiled = (limiter: string) => compiledDocument(limiter, fileRules, available);
  for (const l of limiters) replica.install(l, 'compiled', compiled(l));
  const stored = (limiter: string, raw: unknown) => validateLimiterDocument(raw, limiter, available).document;
  const withStore = <T>(work: Promise<T>) => withTimeout(work, timeoutMs, 'the rule store');
  /** Writes stop at the timeout and say what they did (bounded-write.ts), at most twice as late. */
  const write = (
    store: RuleDocumentStore,
    names: readonly string[],
    change: (current: Map<string, unknown>) => Map<string, LimiterRules>,
  ) => writeWithin((signal) => store.update(names, change, signal), timeoutMs, log);

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
    if (!document)
      log.error(
        { limiter, code: 'invalid_rules', problems: problems.map(formatProblem) },
        'stored rate-limit document is invalid; keeping the last good rules',
      );
    return document;
  };

  const seed = async (): Promise<void> => {
    const store = requireDocuments();
    await write(store, limiters, (current) =>
      seededDocuments(current, {
        limiters,
        fileRules,
        defaults: (limiter) => available.get(limiter)?.default_rules ?? [],
        replaceFileTier: deps.replaceFileTier !== false,
        accept,
      }),
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
      const raw = await withStore(documents.read(limiters));
      for (const limiter of limiters) {
        const value = raw.get(limiter);
        if (value === undefined) {
          // No document (flushed store, or nothing to seed): the compiled defaults.
          replica.install(limiter, 'compiled', compiled(limiter));
          continue;
        }
        const document = accept(limiter, value);
        if (document) replica.install(limiter, 'store', document);
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

  const startRefresh = (): Promise<boolean> => {
    const run: Promise<boolean> = doRefresh().finally(() => {
      if (refreshing === run) refreshing = undefined;
    });
    refreshing = run;
    return run;
  };

  /** Single-flight: joins the refresh in flight, whenever it began. */
  const refresh = (): Promise<boolean> => refreshing ?? startRefresh();

  /**
   * A refresh whose read begins after this call, so it sees a write that just finished: the one in
   * flight may have read before the write. Callers meanwhile share one refresh queued behind it, so
   * a burst of publishes costs at most two reads.
   */
  const refreshFromNow = (): Promise<boolean> => {
    if (!refreshing) return startRefresh();
    queuedRefresh ??= refreshing.then(() => {
      queuedRefresh = undefined;
      // Anything in flight now began after the call above.
      return refresh();
    });
    return queuedRefresh;
  };

  const collectOrphans = () =>
    collectOrphanDocuments(requireDocuments(), {
      limiters,
      nowMs: clock.wallMs(),
      graceMs: orphanGraceMs,
      timeoutMs,
      log,
    });

  const readViews = async (names: readonly string[]): Promise<LimiterView[]> => {
    const raw = documents ? await withStore(documents.read(names)).catch(() => undefined) : undefined;
    return names.map((limiter) => {
      const value = raw?.get(limiter);
      const document = value === undefined ? undefined : stored(limiter, value);
      if (document) return { limiter, source: 'store' as const, tiers: document, effective: mergeTiers(document) };
      const entry = replica.entry(limiter)!;
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
    rules: (limiter) => replica.rules(limiter),
    async publish(batch, options) {
      const { rateLimits, problems } = validateRateLimits(batch, available);
      assertNoProblems(problems, 'publish');
      if (options?.allowSkip === false)
        refuseBypassRules(rateLimits, (limiter) => available.get(limiter)?.default_rules ?? []);
      refuseEmptyBatch(rateLimits);
      const store = requireDocuments();
      const batchByLimiter = new Map([...rateLimits].filter(([, rules]) => rules.length > 0));
      const names = [...batchByLimiter.keys()];
      await write(store, names, (current) => {
        const next = withPublished(current, batchByLimiter, {
          base: compiled,
          read: stored,
          onUnreadable: (limiter) =>
            log.warn({ limiter }, 'replacing an invalid stored rate-limit document while publishing'),
        });
        // Bounded as stored (this batch on top of what was published before), inside the update.
        const tooLarge = [...next].flatMap(([limiter, doc]) => documentBoundProblems(limiter, doc));
        if (tooLarge.length)
          throw new RateLimitError('rules_over_bounds', 'Refused: the published rules would exceed a bound', {
            problems: tooLarge,
          });
        return next;
      });
      const count = names.reduce((n, l) => n + batchByLimiter.get(l)!.length, 0);
      log.info({ limiters: names, rules: count }, 'rate-limit rules published');
      await refreshFromNow();
      return { limiters: names, rules: count };
    },
    async unpublish(limiter, rule) {
      if (!available.has(limiter)) throw new RateLimitError('unknown_limiter', `unknown limiter ${quoted(limiter)}`);
      const store = requireDocuments();
      await write(store, [limiter], (current) => withoutPublished(current, limiter, rule, stored));
      log.info({ limiter, rule }, 'rate-limit rule unpublished');
      await refreshFromNow();
    },
    async show(limiter) {
      if (limiter !== undefined && !available.has(limiter))
        throw new RateLimitError('unknown_limiter', `unknown limiter ${quoted(limiter)}`);
      return readViews(limiter === undefined ? limiters : [limiter]);
    },
    async showPage(page) {
      const limit = pageLimit(page.limit);
      const after = decodeCursor(page.cursor, CURSORS.limiters)?.[0];
      const names = [...limiters].sort().filter((name) => after === undefined || name > after);
      const shown = names.slice(0, limit);
      return {
        items: await readViews(shown),
        nextCursor: names.length > limit ? encodeCursor(CURSORS.limiters, [shown.at(-1)!]) : null,
      };
    },
    collectOrphans,
    status() {
      return {
        documents: documents?.kind ?? 'none',
        seeded,
        lastRefreshOkMs,
        lastRefreshError,
        sources: replica.sources(),
      };
    },
  };
}

/** For callers that only need the problems as text (CLI, startup). */
export function describeProblems(problems: readonly RuleProblem[]): string[] {
  return problems.map(formatProblem);
}

export { TIERS, type Tier };
